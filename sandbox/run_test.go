package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// fakeRuntime is an in-memory Runtime for unit tests of the Executor. A
// "container" is a goroutine running behave with the host path of the relay
// socket; Kill cancels its context.
type fakeRuntime struct {
	enforce Enforcement
	// ociRuntime and ociRuntimes are what Info reports of OCI runtimes.
	ociRuntime  string
	ociRuntimes map[string]OCIRuntimeInfo
	imageErr    error // what ImageInfo returns
	createErr   error
	// createSlow makes Create wait for its ctx to end, make the container
	// anyway and fail, as a real engine cut off mid-request does.
	createSlow bool
	// createHook, when set, is called at the start of each Create (a test
	// may block in it); cut makes Create make the container anyway and
	// fail with ctx's error, as createSlow does.
	createHook func(ctx context.Context, spec ContainerSpec) (cut bool)
	killErr    error
	waitErr    error
	// removeFails is how many Remove calls fail before one succeeds.
	removeFails atomic.Int64
	behave      func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState

	mu         sync.Mutex
	containers map[string]*fakeContainer
	created    int
	lastSpec   ContainerSpec
	// room, when above 0, is how many containers may run at once, as a
	// Kubernetes node's CPU holds so many pods: a Start beyond it waits
	// its turn in roomQueue, first come first served, and each time it
	// finds no room asks its caller whether to give up (NoRoom).
	room      int
	roomQueue []string
}

type fakeContainer struct {
	spec    ContainerSpec
	running bool // admitted by Start (room)
	cancel  context.CancelFunc
	done    chan struct{}
	state   ExitState
	logs    string
}

var _ Containers = (*fakeRuntime)(nil)

func newFake(behave func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState) *fakeRuntime {
	return &fakeRuntime{
		enforce:    Enforcement{Memory: true, Pids: true, CPU: true},
		behave:     behave,
		containers: map[string]*fakeContainer{},
	}
}

func (f *fakeRuntime) Name() string { return "fake" }
func (f *fakeRuntime) Info(context.Context) (EngineInfo, error) {
	return EngineInfo{Name: "fake", Enforce: f.enforce, OCIRuntime: f.ociRuntime, OCIRuntimes: f.ociRuntimes}, nil
}
func (f *fakeRuntime) ImageInfo(context.Context, string) (ImageInfo, error) {
	return ImageInfo{}, f.imageErr
}

func (f *fakeRuntime) Create(ctx context.Context, spec ContainerSpec) (string, error) {
	f.mu.Lock()
	createErr := f.createErr // a test may change it under f.mu while a pool fills
	f.mu.Unlock()
	if createErr != nil {
		return "", createErr
	}
	// As the engines' backends do (docker.Client.Create, podman.Client.Create).
	if err := CheckDataMountHosts(spec.DataMounts); err != nil {
		return "", fmt.Errorf("create container %s: %w", spec.Name, err)
	}
	cut := f.createSlow
	if f.createHook != nil {
		cut = f.createHook(ctx, spec)
	}
	if f.createSlow {
		<-ctx.Done()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created++
	f.lastSpec = spec
	id := fmt.Sprintf("c%d", f.created)
	f.containers[id] = &fakeContainer{spec: spec, done: make(chan struct{})}
	if cut {
		return "", ctx.Err()
	}
	return id, nil
}

func (f *fakeRuntime) get(idOrName string) (*fakeContainer, error) {
	_, c, err := f.lookup(idOrName)
	return c, err
}

// lookup finds a container by id or by name, as the engines do.
func (f *fakeRuntime) lookup(idOrName string) (string, *fakeContainer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.containers[idOrName]; ok {
		return idOrName, c, nil
	}
	for id, c := range f.containers {
		if c.spec.Name == idOrName {
			return id, c, nil
		}
	}
	return "", nil, ErrNotFound
}

func (f *fakeRuntime) Start(ctx context.Context, id string) error {
	c, err := f.get(id)
	if err != nil {
		return err
	}
	if err := f.awaitRoom(ctx, id, c); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.mu.Lock()
	c.cancel = cancel
	f.mu.Unlock()
	sock := filepath.Join(c.spec.Mounts[0].Source, "relay.sock")
	go func() {
		st := f.behave(ctx, sock, c.spec.Env[EnvRelayToken], c.spec)
		if ctx.Err() != nil && st.ExitCode == 0 {
			st.ExitCode = 137
		}
		c.state = st
		close(c.done)
	}()
	return nil
}

// awaitRoom admits c to run once it is first in line and fewer than room
// containers run, or fails when its caller takes another instead
// ([NoRoom]) or ctx ends.
func (f *fakeRuntime) awaitRoom(ctx context.Context, id string, c *fakeContainer) error {
	f.mu.Lock()
	if f.room == 0 {
		c.running = true
		f.mu.Unlock()
		return nil
	}
	f.roomQueue = append(f.roomQueue, id)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.roomQueue = slices.DeleteFunc(f.roomQueue, func(q string) bool { return q == id })
		f.mu.Unlock()
	}()
	for {
		f.mu.Lock()
		running := 0
		for _, o := range f.containers {
			select {
			case <-o.done:
			default:
				if o.running {
					running++
				}
			}
		}
		admitted := f.roomQueue[0] == id && running < f.room
		c.running = admitted
		f.mu.Unlock()
		if admitted {
			return nil
		}
		if NoRoom(ctx, "fake: no room") {
			return fmt.Errorf("start %s: %w", id, ErrNoRoom)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waiting is how many Starts wait for room.
func (f *fakeRuntime) waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.roomQueue)
}

func (f *fakeRuntime) Wait(ctx context.Context, id string) (ExitState, error) {
	c, err := f.get(id)
	if err != nil {
		return ExitState{}, err
	}
	f.mu.Lock()
	waitErr := f.waitErr
	f.mu.Unlock()
	if waitErr != nil {
		return ExitState{}, waitErr
	}
	select {
	case <-c.done:
		return c.state, nil
	case <-ctx.Done():
		return ExitState{}, ctx.Err()
	}
}

func (f *fakeRuntime) Kill(_ context.Context, id string) error {
	if f.killErr != nil {
		return f.killErr
	}
	if c, err := f.get(id); err == nil && c.cancel != nil {
		c.cancel()
	}
	return nil
}

func (f *fakeRuntime) Remove(ctx context.Context, idOrName string) error {
	if f.removeFails.Load() > 0 {
		f.removeFails.Add(-1)
		return errors.New("engine unreachable")
	}
	id, c, err := f.lookup(idOrName)
	if err != nil {
		return nil
	}
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	f.mu.Lock()
	delete(f.containers, id)
	f.mu.Unlock()
	return nil
}

func (f *fakeRuntime) Logs(_ context.Context, id string, _ int) (string, error) {
	c, err := f.get(id)
	if err != nil {
		return "", err
	}
	return c.logs, nil
}

func (f *fakeRuntime) List(_ context.Context, labels map[string]string) ([]ContainerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cs []ContainerInfo
	for id, c := range f.containers {
		cs = append(cs, ContainerInfo{ID: id, Labels: c.spec.Labels})
	}
	return slices.DeleteFunc(cs, func(c ContainerInfo) bool {
		for k, v := range labels {
			if c.Labels[k] != v {
				return true
			}
		}
		return false
	}), nil
}

// newTestExecutor returns an Executor on rt whose run root is checked to be
// empty, and rt to hold no container, when the test ends.
func newTestExecutor(t testing.TB, rt Containers, opts ExecutorOptions) *Executor {
	t.Helper()
	opts.Image = "test-image"
	// t.TempDir's long names would pass the 108-byte limit of socket paths.
	tmp, err := os.MkdirTemp("", "bt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts.RunRoot = filepath.Join(tmp, "runs")
	opts.Logger = zerolog.New(io.Discard)
	ex, err := NewExecutor(context.Background(), rt, opts)
	if err != nil {
		t.Fatal(err)
	}
	ex.exitGrace = 500 * time.Millisecond
	t.Cleanup(func() {
		left, _ := os.ReadDir(opts.RunRoot)
		if len(left) != 0 {
			t.Errorf("run root not cleaned up: %d entries left", len(left))
		}
		if ids, _ := rt.List(context.Background(), nil); len(ids) != 0 {
			t.Errorf("containers left behind: %v", ids)
		}
	})
	return ex
}

func testLimits() Limits {
	l := DefaultLimits()
	l.Timeout = 10 * time.Second
	return l
}

// pythonRunner runs the real runner (images/runner/runner.py) as a host
// process in place of a container.
func pythonRunner(t testing.TB) func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 not found: the runner's unit tests need it")
		}
		t.Skip("python3 not found")
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "images", "runner", "runner.py")
	return func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState {
		cmd := exec.CommandContext(ctx, py, "-I", "-B", script)
		cmd.Env = []string{EnvRelaySocket + "=" + sock, EnvRelayToken + "=" + token, "LANG=C.UTF-8", "BRIDGE_OUTPUTS=" + filepath.Join(filepath.Dir(sock), "outputs")}
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ee.ExitCode() < 0 {
				return ExitState{ExitCode: 137}
			}
			return ExitState{ExitCode: ee.ExitCode()}
		}
		return ExitState{}
	}
}

// fakeRunner is a scripted runner in Go, for behaviours the real one never shows.
type fakeRunner struct {
	conn net.Conn
}

func dialRunner(ctx context.Context, sock string) (*fakeRunner, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { conn.Close() })
	return &fakeRunner{conn: conn}, nil
}

func (r *fakeRunner) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	hdr := make([]byte, 4)
	binary.BigEndian.PutUint32(hdr, uint32(len(b)))
	_, err = r.conn.Write(append(hdr, b...))
	return err
}

// recv reads one frame from the bridge as a generic object.
func (r *fakeRunner) recv() (map[string]any, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r.conn, hdr[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(r.conn, b); err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func hello(token string) map[string]any {
	return map[string]any{"type": "hello", "version": relay.Version, "token": token, "python": "3.test"}
}

func TestRunPython(t *testing.T) {
	tests := []struct {
		name   string
		code   string
		limits func(*Limits)
		check  func(t *testing.T, r Result)
	}{
		{"print", "print(21*2)", nil, func(t *testing.T, r Result) {
			if r.Status != StatusOK || r.Stdout != "42\n" || r.ExitCode != 0 {
				t.Fatalf("got %+v", r)
			}
		}},
		{"stderr and await", "import asyncio, sys\nawait asyncio.sleep(0.01)\nprint('err', file=sys.stderr)\nprint('out')", nil, func(t *testing.T, r Result) {
			if r.Status != StatusOK || r.Stdout != "out\n" || r.Stderr != "err\n" {
				t.Fatalf("got %+v", r)
			}
		}},
		{"exception", "x = 1\nraise ValueError('bad value')", nil, func(t *testing.T, r Result) {
			if r.Status != StatusError || r.ExitCode != 1 || r.Error == nil || r.Error.Type != "ValueError" {
				t.Fatalf("got %+v", r)
			}
			if !strings.Contains(r.Error.Traceback, "line 2") || strings.Contains(r.Error.Traceback, "runner.py") {
				t.Fatalf("traceback should show the user's line 2 and no runner frames:\n%s", r.Error.Traceback)
			}
			if !strings.Contains(r.Message, "bad value") {
				t.Fatalf("message %q should carry the exception", r.Message)
			}
		}},
		{"exit code", "import sys\nsys.exit(3)", nil, func(t *testing.T, r Result) {
			if r.Status != StatusError || r.ExitCode != 3 || r.Message != "exited with code 3" {
				t.Fatalf("got %+v", r)
			}
		}},
		{"output cap", "print('x' * 10000)\nprint('y' * 10, file=__import__('sys').stderr)", func(l *Limits) { l.OutputBytes = 1024 }, func(t *testing.T, r Result) {
			if r.Status != StatusOK || len(r.Stdout) != 1024 || r.StdoutCut != 10001-1024 || r.Stderr != strings.Repeat("y", 10)+"\n" || r.StderrCut != 0 {
				t.Fatalf("got status %s, stdout %d bytes, cut %d, stderr %q cut %d", r.Status, len(r.Stdout), r.StdoutCut, r.Stderr, r.StderrCut)
			}
		}},
		{"timeout keeps output", "import time\nprint('before', flush=True)\nwhile True: time.sleep(0.01)", func(l *Limits) { l.Timeout = 700 * time.Millisecond }, func(t *testing.T, r Result) {
			if r.Status != StatusTimeout || r.Stdout != "before\n" || !strings.Contains(r.Message, "700ms") {
				t.Fatalf("got %+v", r)
			}
			if r.Duration > r.Startup+5*time.Second {
				t.Fatalf("timeout took %s after start", r.Duration-r.Startup)
			}
		}},
	}
	rt := newFake(pythonRunner(t))
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := testLimits()
			if tt.limits != nil {
				tt.limits(&l)
			}
			res, err := ex.Run(context.Background(), Request{Code: tt.code, Limits: l})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			tt.check(t, res)
		})
	}
}

func TestRunStreamsOutput(t *testing.T) {
	ex := newTestExecutor(t, newFake(pythonRunner(t)), ExecutorOptions{})
	var mu sync.Mutex
	var got []string
	res, err := ex.Run(context.Background(), Request{
		Code:   "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.05)",
		Limits: testLimits(),
		OnOutput: func(stream, data string) {
			mu.Lock()
			got = append(got, stream+":"+data)
			mu.Unlock()
		},
	})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("Run: %v %+v", err, res)
	}
	if strings.Join(got, "") != "stdout:0\nstdout:1\nstdout:2\n" {
		t.Fatalf("streamed %q", got)
	}
}

func TestRunCancel(t *testing.T) {
	ex := newTestExecutor(t, newFake(pythonRunner(t)), ExecutorOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	res, err := ex.Run(ctx, Request{Code: "while True: pass", Limits: testLimits()})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Status != StatusCancelled {
		t.Fatalf("status = %s, want cancelled", res.Status)
	}
}

func TestRunnerMisbehaves(t *testing.T) {
	tests := []struct {
		name   string
		behave func(ctx context.Context, sock, token string) ExitState
		check  func(t *testing.T, r Result, err error)
	}{
		{"wrong token then right one", func(ctx context.Context, sock, token string) ExitState {
			bad, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = bad.send(hello("not-the-token"))
			if _, err := bad.recv(); err == nil {
				return ExitState{ExitCode: 2} // the bridge answered an impostor
			}
			r, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(hello(token))
			if _, err := r.recv(); err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(map[string]any{"type": "stdout", "data": "hi"})
			_ = r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0})
			return ExitState{}
		}, func(t *testing.T, r Result, err error) {
			if err != nil || r.Status != StatusOK || r.Stdout != "hi" {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
		{"resumed hello in a fresh run", func(ctx context.Context, sock, token string) ExitState {
			bad, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			h := hello(token)
			h["resumed"] = true
			_ = bad.send(h)
			if _, err := bad.recv(); err == nil {
				return ExitState{ExitCode: 2} // the bridge took a resume it never asked for
			}
			return ExitState{ExitCode: 3}
		}, func(t *testing.T, r Result, err error) {
			if err == nil || !strings.Contains(err.Error(), "code 3") {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
		{"parked without a park", func(ctx context.Context, sock, token string) ExitState {
			r, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(hello(token))
			_, _ = r.recv()
			_ = r.send(map[string]any{"type": "parked"})
			<-ctx.Done()
			return ExitState{ExitCode: 137}
		}, func(t *testing.T, r Result, err error) {
			if err != nil || r.Status != StatusError || !strings.Contains(r.Message, "parked without a park") {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
		{"protocol garbage", func(ctx context.Context, sock, token string) ExitState {
			r, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(hello(token))
			_, _ = r.recv()
			_, _ = r.conn.Write([]byte{0xff, 0xff, 0xff, 0xff, 'x'})
			<-ctx.Done()
			return ExitState{ExitCode: 137}
		}, func(t *testing.T, r Result, err error) {
			if err != nil || r.Status != StatusError || !strings.Contains(r.Message, "relay protocol error") {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
		{"killed by memory limit", func(ctx context.Context, sock, token string) ExitState {
			r, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(hello(token))
			_, _ = r.recv()
			r.conn.Close()
			return ExitState{ExitCode: 137, OOMKilled: true}
		}, func(t *testing.T, r Result, err error) {
			if err != nil || r.Status != StatusMemory || !strings.Contains(r.Message, "512 MiB") {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
		{"tool call without upstreams", func(ctx context.Context, sock, token string) ExitState {
			r, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(hello(token))
			_, _ = r.recv()
			_ = r.send(map[string]any{"type": "tool_call", "id": 9, "server": "fs", "tool": "read", "args": map[string]any{}})
			m, err := r.recv()
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			e, _ := m["error"].(map[string]any)
			_ = r.send(map[string]any{"type": "stdout", "data": fmt.Sprint(m["type"], " ", m["id"], " ", e["type"])})
			_ = r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0})
			return ExitState{}
		}, func(t *testing.T, r Result, err error) {
			if err != nil || r.Stdout != "tool_result 9 tools_unavailable" {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
		{"exits before connecting", func(ctx context.Context, sock, token string) ExitState {
			return ExitState{ExitCode: 127}
		}, func(t *testing.T, r Result, err error) {
			if err == nil || !strings.Contains(err.Error(), "exited with code 127 before connecting") {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
		{"connection drops without exit", func(ctx context.Context, sock, token string) ExitState {
			r, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(hello(token))
			_, _ = r.recv()
			r.conn.Close()
			return ExitState{ExitCode: 3}
		}, func(t *testing.T, r Result, err error) {
			if err != nil || r.Status != StatusError || r.ExitCode != 3 || !strings.Contains(r.Message, "without reporting a status") {
				t.Fatalf("got %+v, %v", r, err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
				return tt.behave(ctx, sock, token)
			})
			ex := newTestExecutor(t, rt, ExecutorOptions{StartTimeout: 5 * time.Second})
			res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
			tt.check(t, res, err)
		})
	}
}

func TestRunRefusesUnenforcedLimits(t *testing.T) {
	rt := newFake(pythonRunner(t))
	rt.enforce = Enforcement{Pids: true, CPU: true, Reason: "rootless Podman on cgroup v1 ignores memory limits"}
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	_, err := ex.Run(context.Background(), Request{Code: "print(1)", Limits: testLimits()})
	if !errors.Is(err, ErrLimitsNotEnforced) || !strings.Contains(err.Error(), "cgroup v1") || !strings.Contains(err.Error(), "--allow-unenforced-limits") {
		t.Fatalf("err = %v, want ErrLimitsNotEnforced with the reason and the way out", err)
	}
	if rt.created != 0 {
		t.Fatal("a container was created although the limits cannot be enforced")
	}
	ex = newTestExecutor(t, rt, ExecutorOptions{AllowUnenforcedLimits: true})
	res, err := ex.Run(context.Background(), Request{Code: "print(1)", Limits: testLimits()})
	if err != nil || res.Stdout != "1\n" {
		t.Fatalf("with AllowUnenforcedLimits: %+v, %v", res, err)
	}
	// The engine is not asked for a limit it would drop; the others stay.
	if s := rt.lastSpec; s.Memory != 0 || s.MemorySwap != 0 || s.Pids != 128 || s.CPUQuota != CPUPeriod {
		t.Fatalf("spec limits: memory %d swap %d pids %d cpu quota %d", s.Memory, s.MemorySwap, s.Pids, s.CPUQuota)
	}
}

// A missing image is reported with the caller's hint, which knows which
// images it can build: by NewExecutor, and by a run should the image go
// after it.
func TestRunImageMissing(t *testing.T) {
	missing := fmt.Errorf("%w: test-image is not in the local image store", ErrImageNotFound)
	hint := func(image, engine string) string { return "make " + image + " on " + engine }
	for _, tt := range []struct {
		name string
		hint func(image, engine string) string
		want []string
	}{
		{"caller's hint", hint, []string{"make test-image on fake"}},
		{"no hint", nil, []string{"pull or build test-image with fake", "`bridge image build --runtime fake` makes only the bridge's own runner"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			check := func(err error) {
				t.Helper()
				if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "test-image is not in the local image store") {
					t.Fatalf("err = %v, want ErrImageNotFound", err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not say %q", err, w)
					}
				}
			}
			rt := newFake(nil)
			rt.imageErr = missing
			tmp, err := os.MkdirTemp("", "bt-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(tmp)
			_, err = NewExecutor(context.Background(), rt, ExecutorOptions{Image: "test-image", ImageHint: tt.hint,
				RunRoot: filepath.Join(tmp, "runs"), Logger: zerolog.New(io.Discard)})
			check(err)

			rt.imageErr, rt.createErr = nil, missing
			ex := newTestExecutor(t, rt, ExecutorOptions{ImageHint: tt.hint})
			_, err = ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
			check(err)
		})
	}
	// Another failure to inspect the image is no hint's business.
	rt := newFake(nil)
	rt.imageErr = errors.New("engine on fire")
	_, err := NewExecutor(context.Background(), rt, ExecutorOptions{Image: "test-image", ImageHint: hint, Logger: zerolog.New(io.Discard)})
	if err == nil || errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "runner image test-image: engine on fire") {
		t.Fatalf("err = %v", err)
	}
}

func TestRunRejectsBadLimits(t *testing.T) {
	ex := newTestExecutor(t, newFake(nil), ExecutorOptions{})
	l := testLimits()
	l.Memory = 1
	if _, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l}); err == nil || !strings.Contains(err.Error(), "memory limit must be at least") {
		t.Fatalf("err = %v", err)
	}
}

func TestValidPrefix(t *testing.T) {
	s := "aé€"
	for n, want := range map[int]string{0: "", 1: "a", 2: "a", 3: "aé", 4: "aé", 5: "aé", 6: "aé€", 9: "aé€"} {
		if got := validPrefix(s, n); got != want {
			t.Errorf("validPrefix(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
}

// connectAndExec plays a runner up to receiving exec.
func connectAndExec(ctx context.Context, sock, token string) (*fakeRunner, error) {
	r, err := dialRunner(ctx, sock)
	if err != nil {
		return nil, err
	}
	if err := r.send(hello(token)); err != nil {
		return nil, err
	}
	if _, err := r.recv(); err != nil {
		return nil, err
	}
	return r, nil
}

// blockingTools counts the calls in flight and blocks each until its ctx ends.
type blockingTools struct {
	mu        sync.Mutex
	now, most int
}

func (b *blockingTools) CallTool(ctx context.Context, _ string, call relay.ToolCall) relay.ToolResult {
	b.mu.Lock()
	b.now++
	b.most = max(b.most, b.now)
	b.mu.Unlock()
	<-ctx.Done()
	b.mu.Lock()
	b.now--
	b.mu.Unlock()
	return relay.ToolResult{ID: call.ID, Error: &relay.ToolError{Type: "timeout", Message: "cancelled"}}
}

func (b *blockingTools) Query(ctx context.Context, runID string, q relay.Query) relay.ToolResult {
	return b.CallTool(ctx, runID, relay.ToolCall{ID: q.ID})
}

func TestHostileRunnerIsBounded(t *testing.T) {
	t.Run("tool call flood", func(t *testing.T) {
		sent := make(chan int, 1)
		rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
			r, err := connectAndExec(ctx, sock, token)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			// Never read a reply; send until the bridge stops reading.
			n := 0
			_ = r.conn.SetWriteDeadline(time.Now().Add(time.Second))
			for ; n < 100000; n++ {
				if r.send(map[string]any{"type": "tool_call", "id": n + 1, "server": "s", "tool": "t"}) != nil {
					break
				}
			}
			sent <- n
			<-ctx.Done()
			return ExitState{ExitCode: 137}
		})
		tools := &blockingTools{}
		ex := newTestExecutor(t, rt, ExecutorOptions{Tools: tools})
		l := testLimits()
		l.Timeout = 2 * time.Second
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l})
		if err != nil || res.Status != StatusTimeout {
			t.Fatalf("got %+v, %v", res, err)
		}
		n := <-sent
		if tools.most > maxRequests || tools.most == 0 {
			t.Fatalf("%d tool calls were in flight at once (cap %d)", tools.most, maxRequests)
		}
		if n >= 100000 {
			t.Fatalf("the bridge kept reading all %d calls: no backpressure", n)
		}
		t.Logf("runner sent %d calls before blocking; at most %d in flight", n, tools.most)
	})
	t.Run("duplicate tool call id", func(t *testing.T) {
		rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
			r, err := connectAndExec(ctx, sock, token)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(map[string]any{"type": "tool_call", "id": 1, "server": "s", "tool": "t"})
			_ = r.send(map[string]any{"type": "tool_call", "id": 1, "server": "s", "tool": "t"})
			<-ctx.Done()
			return ExitState{ExitCode: 137}
		})
		ex := newTestExecutor(t, rt, ExecutorOptions{Tools: &blockingTools{}})
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
		if err != nil || res.Status != StatusError || !strings.Contains(res.Message, "already in flight") {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
	t.Run("never reads the code", func(t *testing.T) {
		rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
			r, err := dialRunner(ctx, sock)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(hello(token))
			<-ctx.Done()
			return ExitState{ExitCode: 137}
		})
		ex := newTestExecutor(t, rt, ExecutorOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		res, err := ex.Run(ctx, Request{Code: strings.Repeat("#", 8<<20), Limits: testLimits()})
		if err != nil || res.Status != StatusCancelled {
			t.Fatalf("got %+v, %v", res, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("Run took %s after its ctx ended", d)
		}
	})
	t.Run("exit then keeps the socket open", func(t *testing.T) {
		rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
			r, err := connectAndExec(ctx, sock, token)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(map[string]any{"type": "stdout", "data": "done"})
			_ = r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0})
			<-ctx.Done()
			return ExitState{ExitCode: 137}
		})
		ex := newTestExecutor(t, rt, ExecutorOptions{})
		ex.exitGrace = 200 * time.Millisecond
		l := testLimits()
		l.Timeout = 5 * time.Second
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l})
		if err != nil || res.Status != StatusOK || res.Stdout != "done" {
			t.Fatalf("got %+v, %v", res, err)
		}
		if res.Duration > 4*time.Second {
			t.Fatalf("took %s: the exit's grace was not applied", res.Duration)
		}
	})
	t.Run("frame after exit", func(t *testing.T) {
		rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
			r, err := connectAndExec(ctx, sock, token)
			if err != nil {
				return ExitState{ExitCode: 1}
			}
			_ = r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0})
			_ = r.send(map[string]any{"type": "stdout", "data": "late"})
			<-ctx.Done()
			return ExitState{ExitCode: 137}
		})
		ex := newTestExecutor(t, rt, ExecutorOptions{})
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
		if err != nil || res.Status != StatusError || !strings.Contains(res.Message, "after exit") {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
}

// A runner that reported its exit and hung up has said everything: Exec
// answers then, without waiting for the engine to notice that the
// container ended (tens of ms on a real engine), and Close removes what is
// left of it.
func TestExecAnswersOnTheRunnersReport(t *testing.T) {
	lingering := make(chan struct{})
	rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		_ = r.send(map[string]any{"type": "stdout", "data": "done"})
		_ = r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0})
		r.conn.Close()
		close(lingering)
		<-ctx.Done() // the process is gone; the engine has not said so yet
		return ExitState{ExitCode: 0}
	})
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	ex.exitGrace = 5 * time.Second // a wait for the engine would end in a kill
	inst, err := ex.Start(context.Background(), testLimits(), "lingers")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := inst.Exec(ctx, ExecRequest{RunID: "lingers", Code: "pass", Timeout: 20 * time.Second, OutputBytes: 1 << 10})
	if err != nil || res.Status != StatusOK || res.Stdout != "done" {
		t.Fatalf("got %+v, %v", res, err)
	}
	<-lingering
	if inst.ended() {
		t.Fatal("Exec waited for the container to end")
	}
	if err := inst.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEngineFailuresAreBounded(t *testing.T) {
	spin := func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		if _, err := connectAndExec(ctx, sock, token); err != nil {
			return ExitState{ExitCode: 1}
		}
		<-ctx.Done()
		return ExitState{ExitCode: 137}
	}
	t.Run("kill fails", func(t *testing.T) {
		rt := newFake(spin)
		rt.killErr = errors.New("engine wedged")
		ex := newTestExecutor(t, rt, ExecutorOptions{})
		ex.killWait = 300 * time.Millisecond
		l := testLimits()
		l.Timeout = 200 * time.Millisecond
		start := time.Now()
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l})
		if err != nil || res.Status != StatusTimeout {
			t.Fatalf("got %+v, %v", res, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Run took %s with a failing Kill", d)
		}
	})
	t.Run("wait fails", func(t *testing.T) {
		rt := newFake(spin)
		rt.waitErr = errors.New("engine lost the container")
		ex := newTestExecutor(t, rt, ExecutorOptions{})
		_, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
		if err == nil || !strings.Contains(err.Error(), "engine lost the container") {
			t.Fatalf("err = %v, want the engine's error", err)
		}
	})
	t.Run("cancelled during create", func(t *testing.T) {
		rt := newFake(spin)
		rt.createSlow = true
		ex := newTestExecutor(t, rt, ExecutorOptions{StartTimeout: 200 * time.Millisecond})
		// newTestExecutor's cleanup fails the test if the container made
		// by the cut-off create is left behind.
		_, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
		if err == nil || rt.created != 1 {
			t.Fatalf("err = %v, created %d", err, rt.created)
		}
	})
}

// A container whose removal fails is removed in the background once the
// engine answers again, and Close reports what is still left.
func TestFailedRemovalIsRetried(t *testing.T) {
	rt := newFake(pythonRunner(t))
	rt.removeFails.Store(3)
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	ex.removals.first, ex.removals.most = 20*time.Millisecond, 50*time.Millisecond
	_, err := ex.Run(context.Background(), Request{Code: "print(1)", Limits: testLimits()})
	if err == nil || !strings.Contains(err.Error(), "removing container") {
		t.Fatalf("a failed removal must be reported: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(ex.PendingRemovals()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still pending: %v", ex.PendingRemovals())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := ex.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	rt2 := newFake(pythonRunner(t))
	rt2.removeFails.Store(1 << 30)
	ex2 := newTestExecutor(t, rt2, ExecutorOptions{})
	_, _ = ex2.Run(context.Background(), Request{Code: "print(1)", Limits: testLimits()})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := ex2.Close(ctx); err == nil || !strings.Contains(err.Error(), "could not be removed") {
		t.Fatalf("Close with a removal that keeps failing: %v", err)
	}
	rt2.removeFails.Store(0)
	_ = rt2.Remove(context.Background(), ex2.PendingRemovals()[0]) // for the cleanup check
}

// deadlineTools answers every call at once and keeps the deadline of the
// last call's ctx.
type deadlineTools struct {
	mu       sync.Mutex
	deadline time.Time
	ok       bool
}

func (d *deadlineTools) CallTool(ctx context.Context, _ string, call relay.ToolCall) relay.ToolResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deadline, d.ok = ctx.Deadline()
	return relay.ToolResult{ID: call.ID, Result: json.RawMessage(`{}`)}
}

func (d *deadlineTools) Query(ctx context.Context, runID string, q relay.Query) relay.ToolResult {
	return d.CallTool(ctx, runID, relay.ToolCall{ID: q.ID})
}

// A tool call's ctx ends when the run does: the ToolHandler can tell a
// remote MCP proxy how long the run may still call.
func TestToolCallsHaveTheRunsDeadline(t *testing.T) {
	rt := newFake(func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		_ = r.send(map[string]any{"type": "tool_call", "id": 1, "server": "s", "tool": "t"})
		_, _ = r.recv()
		_ = r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0})
		return ExitState{ExitCode: 0}
	})
	tools := &deadlineTools{}
	ex := newTestExecutor(t, rt, ExecutorOptions{Tools: tools})
	l := testLimits()
	l.Timeout = 10 * time.Minute
	before := time.Now()
	res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("got %+v, %v", res, err)
	}
	tools.mu.Lock()
	defer tools.mu.Unlock()
	if !tools.ok || tools.deadline.Before(before.Add(l.Timeout)) || tools.deadline.After(time.Now().Add(l.Timeout)) {
		t.Fatalf("the call's deadline is %v (set %v), want the run's: %s after the code started", tools.deadline, tools.ok, l.Timeout)
	}
}
