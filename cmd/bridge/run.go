package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// limitFlags registers the flags that set a run's limits.
type limitFlags struct {
	limits         sandbox.Limits
	memory, tmpfs  sizeFlag
	allowUnenforce bool
}

func (lf *limitFlags) register(fs *flag.FlagSet) {
	lf.limits = sandbox.DefaultLimits()
	lf.memory = sizeFlag{&lf.limits.Memory}
	lf.tmpfs = sizeFlag{&lf.limits.TmpfsSize}
	fs.DurationVar(&lf.limits.Timeout, "timeout", lf.limits.Timeout, "kill the code after this long (e.g. 30s, 2m)")
	fs.Var(lf.memory, "memory", "memory limit, no swap (e.g. 256Mi, 1Gi)")
	fs.Float64Var(&lf.limits.CPUs, "cpus", lf.limits.CPUs, "CPU quota in cores")
	fs.Int64Var(&lf.limits.Pids, "pids", lf.limits.Pids, "maximum processes and threads")
	fs.Var(lf.tmpfs, "tmpfs-size", "size of the writable /tmp (e.g. 64Mi)")
	fs.IntVar(&lf.limits.OutputBytes, "output-limit", lf.limits.OutputBytes, "bytes kept of each of stdout and stderr")
	fs.BoolVar(&lf.allowUnenforce, "allow-unenforced-limits", false, "run even where the engine cannot enforce memory/pids/cpu limits (e.g. rootless Podman on cgroup v1)")
}

// applyTo writes the limits into a policy's sandbox section.
func (lf *limitFlags) applyTo(p *policy.Policy) {
	l := lf.limits
	p.Sandbox.Timeout, p.Sandbox.Memory, p.Sandbox.CPUs, p.Sandbox.Pids = l.Timeout, l.Memory, l.CPUs, l.Pids
	p.Sandbox.TmpfsSize, p.Sandbox.OutputLimit = l.TmpfsSize, int64(l.OutputBytes)
	p.Sandbox.RequireEnforcedLimits = !lf.allowUnenforce
}

// sizeFlag is a byte size flag that accepts units (512Mi).
type sizeFlag struct{ p *int64 }

func (s sizeFlag) String() string {
	if s.p == nil {
		return ""
	}
	return fmt.Sprint(*s.p)
}

func (s sizeFlag) Set(v string) error {
	n, err := sandbox.ParseSize(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}

func cmdRun(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "run", "[flags] FILE|-", "Runs a Python file (- reads stdin) in a fresh sandbox container and prints its\n"+
		"output. Exits with the code's exit status; 124 on timeout, 137 when killed by\n"+
		"the memory limit, 125 when the bridge could not run it.")
	engine := fs.String("runtime", sandbox.EngineAuto, "container engine: auto, podman or docker")
	ociRuntime := ociRuntimeFlag(fs)
	image := fs.String("image", images.Name(), "runner image")
	var lf limitFlags
	lf.register(fs)
	var uf upstreamFlags
	uf.register(fs, true)
	policyPath := fs.String("policy", "", "the policy `FILE` (docs/policy.md); default "+defaultPolicyPath()+" if it exists;\nwith a policy, the sandbox flags are refused")
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if err := uf.check(); err != nil {
		return exitUsage, err
	}
	if fs.NArg() != 1 {
		return exitUsage, usagef("want exactly one FILE (or - for stdin), got %d arguments", fs.NArg())
	}
	if err := checkRuntime(*engine); err != nil {
		return exitUsage, err
	}
	if err := checkOCIRuntime(*ociRuntime); err != nil {
		return exitUsage, err
	}
	if err := lf.limits.Validate(); err != nil {
		return exitUsage, usagef("%v", err)
	}
	code, err := readCode(fs.Arg(0), e.stdin)
	if err != nil {
		return exitUsage, usagef("%v", err)
	}

	pol, polPath, limits, runnerImage, err := runPolicy(fs, *policyPath, uf.proxyURL, func(p *policy.Policy) {
		lf.applyTo(p)
		p.Sandbox.Engine, p.Sandbox.OCIRuntime, p.Sandbox.Image = *engine, *ociRuntime, *image
		p.Budgets.CallTimeout = uf.callTimeout
	})
	if err != nil {
		return exitUsage, err
	}
	store, err := policy.NewStore(pol, polPath, e.log)
	if err != nil {
		return exitUsage, err
	}
	defer store.Close()

	// The code may use the upstream servers; they start only if it does.
	up, stopUpstreams, err := uf.upstreams(e, "", store, e.log)
	if err != nil {
		return exitUsage, err
	}
	defer stopUpstreams()
	var tools sandbox.ToolHandler
	if up != nil {
		tools = bridge.ToolHandler(up, 0, e.log)
	}

	rt, err := sandbox.OpenFor(ctx, pol.Sandbox.Engine, pol.Sandbox.OCIRuntime, e.log)
	if err != nil {
		return exitBridge, err
	}
	defer rt.Close()
	ex, err := sandbox.NewExecutor(ctx, rt, sandbox.ExecutorOptions{
		Image: runnerImage, AllowUnenforcedLimits: !pol.Sandbox.RequireEnforcedLimits, OCIRuntime: pol.Sandbox.OCIRuntime,
		Tools: tools, Logger: e.log,
	})
	if err != nil {
		return exitBridge, err
	}
	defer func() {
		// A removal that failed gets a last try before the bridge ends.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := ex.Close(cctx); err != nil {
			e.log.Warn().Err(err).Msg("")
		}
	}()
	runID := sandbox.NewRunID()
	run := store.Begin(runID)
	defer store.End(runID)
	store.Audit().RunStart(runID, run.Snap.Gen, pol.Sandbox, limits.Timeout)
	start := time.Now()
	var mu sync.Mutex
	res, err := ex.Run(ctx, sandbox.Request{
		Code:   code,
		Limits: limits,
		RunID:  runID,
		OnOutput: func(stream, data string) {
			mu.Lock()
			defer mu.Unlock()
			w := e.stdout
			if stream == "stderr" {
				w = e.stderr
			}
			io.WriteString(w, data)
		},
	})
	status := string(res.Status)
	if err != nil {
		status = "unavailable"
	}
	store.Audit().RunEnd(run, status, res.ExitCode, time.Since(start))
	if err != nil {
		return exitBridge, err
	}
	return reportRun(e, res), nil
}

// reportRun prints what the output does not say and picks the exit code.
func reportRun(e *env, res sandbox.Result) int {
	if res.StdoutCut > 0 || res.StderrCut > 0 {
		fmt.Fprintf(e.stderr, "bridge: output cut: %d bytes of stdout and %d of stderr beyond the %s cap\n",
			res.StdoutCut, res.StderrCut, "--output-limit")
	}
	switch res.Status {
	case sandbox.StatusOK:
		return 0
	case sandbox.StatusError:
		if res.Error == nil {
			fmt.Fprintf(e.stderr, "bridge: %s\n", res.Message)
		}
		if res.ExitCode > 0 && res.ExitCode < 256 {
			return res.ExitCode
		}
		return 1
	case sandbox.StatusTimeout:
		fmt.Fprintf(e.stderr, "bridge: %s\n", res.Message)
		return exitTimeout
	case sandbox.StatusMemory:
		fmt.Fprintf(e.stderr, "bridge: %s\n", res.Message)
		return 137
	case sandbox.StatusCancelled:
		fmt.Fprintf(e.stderr, "bridge: %s\n", res.Message)
		return exitCanceled
	}
	fmt.Fprintf(e.stderr, "bridge: run ended with status %s: %s\n", res.Status, res.Message)
	return 1
}

// ociRuntimeFlag registers --oci-runtime.
func ociRuntimeFlag(fs *flag.FlagSet) *string {
	return fs.String("oci-runtime", sandbox.OCIRuntimeDefault, "OCI runtime of every container: default (the engine's), runc, or runsc\n"+
		"(gVisor: a second wall against kernel exploits; the engine must be set up for it, see docs/policy.md)")
}

// checkOCIRuntime rejects an unknown --oci-runtime before any engine is tried.
func checkOCIRuntime(name string) error {
	if err := sandbox.CheckOCIRuntime(name); err != nil {
		return usagef("--oci-runtime: %v", err)
	}
	return nil
}

// checkRuntime rejects an unknown --runtime before any engine is tried.
func checkRuntime(engine string) error {
	if _, err := sandbox.Candidates(engine, os.Getenv); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// maxCodeBytes bounds the code read from a file or stdin.
const maxCodeBytes = 4 << 20

func readCode(name string, stdin io.Reader) (string, error) {
	var r io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxCodeBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxCodeBytes {
		return "", fmt.Errorf("%s is larger than %d MiB", name, maxCodeBytes>>20)
	}
	return string(b), nil
}

// timeSince is time.Since, rounded for people.
func timeSince(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
