package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

func cmdRun(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "run", "[flags] FILE|-", "Runs a Python file (- reads stdin) in a fresh sandbox container and prints its\n"+
		"output. Exits with the code's exit status; 124 on timeout, 137 when killed by\n"+
		"the memory limit, 125 when the bridge could not run it.")
	var sf settingFlags
	sf.engine(fs)
	sf.limits(fs)
	var uf upstreamFlags
	uf.register(fs, true)
	sf.callTimeout(fs)
	outputs := fs.String("outputs", "", "keep the files the code writes in /tmp/outputs in this `DIR` (created if missing; a name\n"+
		"already there gets \" (2)\", nothing is replaced); within the policy's artifacts.max_files and max_bytes_stored")
	policyPath := fs.String("policy", "", "the policy `FILE` (docs/policy.md); default "+defaultPolicyPath()+" if it exists;\nwith a policy file, the sandbox flags may only tighten it")
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if err := uf.check(); err != nil {
		return exitUsage, err
	}
	if len(args) != 1 {
		return exitUsage, usagef("want one FILE (or - for stdin), got %d: %s", len(args), quoteArgs(args))
	}
	code, err := readCode(args[0], e.stdin)
	if err != nil {
		return exitUsage, usagef("%v", err)
	}
	pol, polPath, limits, runnerImage, err := runPolicy(e, *policyPath, uf.proxyURL, sf.set)
	if err != nil {
		if terr := timeoutOverMax(e, *policyPath, sf.set); terr != nil {
			return exitUsage, terr
		}
		return exitUsage, err
	}
	store, err := policy.NewStore(pol, polPath, e.log)
	if err != nil {
		return exitUsage, err
	}
	defer store.Close()

	// The code may use the upstream servers; they start only if it does.
	tools, err := wireTools(e, &uf, "", store, nil, nil, e.log)
	if err != nil {
		return exitUsage, err
	}
	defer tools.stop()
	// One run, in a container of its own: no pool. The engine is opened
	// before the run begins, so that a run that never started is not
	// audited.
	eng := wireEngine(pol, runnerImage, tools.handler, store, false, e.log)
	// A removal that failed gets a last try before the bridge ends.
	defer eng.Close(10 * time.Second)
	if err := eng.Open(ctx); err != nil {
		return exitBridge, err
	}
	runID := sandbox.NewRunID()
	var mu sync.Mutex
	files, err := newRunFiles(*outputs, runID, bridge.ArtifactsFrom(pol.Artifacts), func(stream, data string) {
		mu.Lock()
		defer mu.Unlock()
		w := e.stdout
		if stream == "stderr" {
			w = e.stderr
		}
		io.WriteString(w, data)
	})
	if err != nil {
		return exitUsage, err
	}
	defer files.close()
	// A call the policy asks about cannot be asked here: say why, and what to do.
	defer tools.runs.Register(runID, noClient{})()
	run := store.Begin(runID)
	defer store.End(runID)
	store.Audit().RunStart(runID, "", run.Snap.Gen, pol.Sandbox, limits.Timeout)
	start := time.Now()
	res, err := eng.Run(ctx, sandbox.Request{Code: code, Limits: limits, RunID: runID, Sink: files.sink(), Files: files.limits(), Script: true})
	status := string(res.Status)
	if err != nil {
		status = "unavailable"
	}
	store.Audit().RunEnd(run, status, res.ExitCode, time.Since(start))
	if err != nil {
		return exitBridge, err
	}
	files.report(e.stderr, res.FilesSkipped)
	return reportRun(e, res), nil
}

// timeoutOverMax explains, after the policy was refused, a --timeout
// longer than sandbox.max_timeout: which key, in which policy (a file, or
// the built-in defaults), and how bridge run can raise it (--policy FILE
// with that key). It is nil when the timeout is not what was refused.
func timeoutOverMax(e *env, path string, settings []policy.Setting) error {
	var asked policy.Setting
	var others []policy.Setting
	for _, s := range settings {
		if s.Key == "sandbox.timeout" {
			asked = s
		} else {
			others = append(others, s)
		}
	}
	if asked.Key == "" {
		return nil
	}
	if path == "" {
		path = defaultPolicyFile(e)
	}
	base, mode := policy.Default(), policy.Replace
	if path != "" {
		file, err := policy.Load(path)
		if err != nil {
			return nil
		}
		base, mode = file, policy.Tighten
	}
	p, err := base.With(others, mode)
	if err != nil {
		return nil
	}
	// The timeout asked for, read with the file's grammar and bounds.
	want, err := policy.Default().With([]policy.Setting{asked, {Key: "sandbox.max_timeout", Value: asked.Value}}, policy.Replace)
	if err != nil || want.Sandbox.Timeout <= p.Sandbox.MaxTimeout {
		return nil
	}
	have, wanted := units.FormatDuration(p.Sandbox.MaxTimeout), units.FormatDuration(want.Sandbox.Timeout)
	if path == "" {
		return usagef("%s %s is longer than sandbox.max_timeout, %s under the built-in defaults (no policy file: none given with --policy, none at %s): "+
			"to allow it, write a policy file with `version: 1` and `sandbox: {max_timeout: %s}` and pass it with --policy FILE (docs/policy.md), "+
			"or give a --timeout of at most %s",
			asked.Flag, asked.Value, have, defaultPolicyPath(), wanted, have)
	}
	return usagef("%s %s is longer than sandbox.max_timeout, %s in the policy in force, %s: "+
		"to allow it, raise sandbox.max_timeout to at least %s in that file (or pass another with --policy FILE), or give a --timeout of at most %s",
		asked.Flag, asked.Value, have, path, wanted, have)
}

// noClient is the [toolhost.Run] of a `bridge run`: there is no MCP client
// to ask a person through, and no result to trace the calls in.
type noClient struct{}

// Ask answers that no one can be asked, why and what to do instead.
func (noClient) Ask(context.Context, proxy.Question) proxy.Answer {
	return proxy.Answer{How: proxy.Unsupported, Why: "bridge run cannot ask a person (it has no MCP client): " +
		"allow the tool for this run in a policy file (--policy FILE, a tools rule with action: allow), " +
		"or run the code through bridge serve with a client that supports MCP elicitation"}
}

// Record drops the call's trace: bridge run prints no result to put it in.
func (noClient) Record(toolhost.TraceEntry) {}

var _ toolhost.Run = noClient{}

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

// quoteArgs lists args for a message: "a", "b".
func quoteArgs(args []string) string {
	if len(args) == 0 {
		return "none"
	}
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
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
