package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/sandbox"
)

// processEngine is a fourth engine in a few lines: each "container" is the
// runner as a process on this machine. It isolates nothing, so it is for
// examples and tests only; a real engine (sandbox/docker, sandbox/podman,
// sandbox/kubernetes) applies the spec's hardening and limits.
type processEngine struct {
	runner string // images/runner/runner.py

	mu    sync.Mutex
	procs map[string]*process
	next  int
}

// process is one "container": its spec, and its process once started.
type process struct {
	spec sandbox.ContainerSpec
	cmd  *exec.Cmd
	done chan struct{}
	exit sandbox.ExitState
}

var _ sandbox.Runtime = (*processEngine)(nil)

func (e *processEngine) Name() string { return "process" }

func (e *processEngine) Info(context.Context) (sandbox.EngineInfo, error) {
	// It claims to enforce every limit, which only an example may do.
	return sandbox.EngineInfo{Name: "process", Enforce: sandbox.Enforcement{Memory: true, Pids: true, CPU: true}}, nil
}

func (e *processEngine) ImageInfo(context.Context, string) (sandbox.ImageInfo, error) {
	return sandbox.ImageInfo{ID: "runner.py"}, nil
}

func (e *processEngine) BuildImage(context.Context, sandbox.BuildOptions) error {
	return errors.New("the process engine builds no image")
}

func (e *processEngine) Close() error { return nil }

func (e *processEngine) Create(_ context.Context, spec sandbox.ContainerSpec) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.next++
	id := fmt.Sprintf("p%d", e.next)
	e.procs[id] = &process{spec: spec, done: make(chan struct{})}
	return id, nil
}

// Start runs the runner with the relay socket where the spec mounts the
// run folder: the one way out, as in a container.
func (e *processEngine) Start(_ context.Context, id string) error {
	p, err := e.get(id)
	if err != nil {
		return err
	}
	var runDir string
	for _, m := range p.spec.Mounts {
		if m.Target == sandbox.RelayDir {
			runDir = m.Source
		}
	}
	p.cmd = exec.Command("python3", "-I", "-B", e.runner)
	p.cmd.Env = []string{
		sandbox.EnvRelaySocket + "=" + filepath.Join(runDir, filepath.Base(sandbox.RelaySocket)),
		sandbox.EnvRelayToken + "=" + p.spec.Env[sandbox.EnvRelayToken],
		"LANG=C.UTF-8", "BRIDGE_OUTPUTS=" + filepath.Join(runDir, "outputs"),
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() {
		if err := p.cmd.Wait(); err != nil {
			p.exit.ExitCode = 1
		}
		close(p.done)
	}()
	return nil
}

func (e *processEngine) Wait(ctx context.Context, id string) (sandbox.ExitState, error) {
	p, err := e.get(id)
	if err != nil {
		return sandbox.ExitState{}, err
	}
	select {
	case <-p.done:
		return p.exit, nil
	case <-ctx.Done():
		return sandbox.ExitState{}, ctx.Err()
	}
}

func (e *processEngine) Kill(_ context.Context, id string) error {
	if p, err := e.get(id); err == nil && p.cmd != nil {
		p.cmd.Process.Kill()
	}
	return nil
}

func (e *processEngine) Remove(ctx context.Context, id string) error {
	if err := e.Kill(ctx, id); err != nil {
		return err
	}
	if p, err := e.get(id); err == nil && p.cmd != nil {
		<-p.done
	}
	e.mu.Lock()
	delete(e.procs, id)
	e.mu.Unlock()
	return nil
}

func (e *processEngine) Logs(context.Context, string, int) (string, error) { return "", nil }

func (e *processEngine) List(_ context.Context, labels map[string]string) ([]sandbox.ContainerInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []sandbox.ContainerInfo
	for id, p := range e.procs {
		match := true
		for k, v := range labels {
			match = match && p.spec.Labels[k] == v
		}
		if match {
			out = append(out, sandbox.ContainerInfo{ID: id, Labels: p.spec.Labels})
		}
	}
	return out, nil
}

func (e *processEngine) get(id string) (*process, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.procs[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	}
	return p, nil
}

// An engine is anything that implements [sandbox.Runtime]; the bridge
// gives [sandbox.NewEngine] a way to open one (cmd/bridge passes
// sandbox/detect's OpenFor). Here a made-up engine runs the runner as a
// plain process, and the warm pool keeps one started ahead of the run.
func Example_engine() {
	_, file, _, _ := runtime.Caller(0)
	proc := &processEngine{
		runner: filepath.Join(filepath.Dir(file), "..", "images", "runner", "runner.py"),
		procs:  map[string]*process{},
	}
	runRoot, err := os.MkdirTemp("", "bx-") // short: a socket path holds 108 bytes
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(runRoot)

	limits := sandbox.DefaultLimits()
	limits.Timeout = 20 * time.Second
	eng := sandbox.NewEngine(sandbox.EngineOptions{
		Name: "process",
		Open: func(context.Context, string, string, zerolog.Logger) (sandbox.Runtime, error) {
			return proc, nil
		},
		Executor: sandbox.ExecutorOptions{Image: "runner", RunRoot: runRoot},
		Pool:     func() sandbox.PoolOptions { return sandbox.PoolOptions{Size: 1, Limits: limits} },
		Logger:   zerolog.Nop(),
	})
	ctx := context.Background()
	defer eng.Close(10 * time.Second)

	res, err := eng.Run(ctx, sandbox.Request{Code: "print(6 * 7)", Limits: limits})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(res.Status, ": ", res.Stdout)
	// Output: ok: 42
}
