package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/sandbox"
)

// fakeInstances answers runs with a function of the request, in memory:
// each Acquire makes an Instance whose Exec hands run the request the run
// was made of. acquire, if set, is called first and may fail the Acquire.
type fakeInstances struct {
	run     func(ctx context.Context, req sandbox.Request) (sandbox.Result, error)
	acquire func(ctx context.Context) error
}

func (f fakeInstances) Acquire(ctx context.Context, l sandbox.Limits, runID string) (sandbox.Instance, error) {
	if f.acquire != nil {
		if err := f.acquire(ctx); err != nil {
			return nil, err
		}
	}
	return &fakeInstance{run: f.run, limits: l}, nil
}

// fakeInstance runs one Exec (it keeps no session).
type fakeInstance struct {
	run    func(ctx context.Context, req sandbox.Request) (sandbox.Result, error)
	limits sandbox.Limits
	closed atomic.Bool
}

func (i *fakeInstance) Exec(ctx context.Context, x sandbox.ExecRequest) (sandbox.Result, error) {
	return i.run(ctx, sandbox.Request{Code: x.Code, Limits: i.limits, RunID: x.RunID, Sink: x.Sink, Files: x.Files})
}
func (i *fakeInstance) Kept() bool                  { return false }
func (i *fakeInstance) Closed() bool                { return i.closed.Load() }
func (i *fakeInstance) Close(context.Context) error { i.closed.Store(true); return nil }

func newServer(t *testing.T, opts Options) *Server {
	t.Helper()
	if reflect.DeepEqual(opts.Limits, sandbox.Limits{}) {
		opts.Limits = sandbox.DefaultLimits()
		opts.Limits.Timeout = 30 * time.Second
	}
	opts.Logger = zerolog.New(io.Discard)
	if opts.Principal == nil {
		opts.Principal = clientName
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func withRunner(f func(ctx context.Context, req sandbox.Request) (sandbox.Result, error)) Instances {
	return fakeInstances{run: f}
}

// connect returns a client session to s over in-memory transports.
// clientName is a test's principal: the name its client gave (over the
// in-memory transport no bearer token names one).
func clientName(req mcp.Request) string {
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss.InitializeParams() != nil && ss.InitializeParams().ClientInfo != nil {
		return ss.InitializeParams().ClientInfo.Name
	}
	return ""
}

// connect connects a client of principal "test" to s.
func connect(t *testing.T, s *Server, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectAs(t, s, "test", copts)
}

// connectAs connects a client of principal who to s (a server of
// newServer names a client's principal by its name).
func connectAs(t *testing.T, s *Server, who string, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: who, Version: "1"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, args any) (*mcp.CallToolResult, Output) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	var out Output
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return res, out
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsList(t *testing.T) {
	s := newServer(t, Options{Instances: withRunner(nil), MaxTimeout: 120 * time.Second})
	cs := connect(t, s, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != 1 || res.Tools[0].Name != "run_python" {
		t.Fatalf("tools = %+v, want exactly run_python", res.Tools)
	}
	tool := res.Tools[0]
	for _, want := range []string{"no network", "await", "print", "import mcp_tools", "search(", "call(server, tool", "help()"} {
		if !strings.Contains(tool.Description, want) {
			t.Errorf("description lacks %q: %s", want, tool.Description)
		}
	}
	in, _ := json.Marshal(tool.InputSchema)
	if !strings.Contains(string(in), `"required":["code"]`) || !strings.Contains(string(in), `"maximum":120`) || !strings.Contains(string(in), `"additionalProperties":false`) {
		t.Errorf("input schema %s", in)
	}
	if tool.OutputSchema == nil {
		t.Error("no output schema")
	}
}

func TestRunPythonResults(t *testing.T) {
	var got sandbox.Request
	s := newServer(t, Options{Instances: withRunner(func(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
		got = req
		switch req.Code {
		case "ok":
			time.Sleep(20 * time.Millisecond)
			return sandbox.Result{Status: sandbox.StatusOK, Stdout: "42\n"}, nil
		case "error":
			return sandbox.Result{Status: sandbox.StatusError, ExitCode: 1, Stdout: "partial\n",
				Stderr: "Traceback...\nValueError: x\n", Message: "ValueError: x"}, nil
		case "cut":
			return sandbox.Result{Status: sandbox.StatusOK, Stdout: "xxxx", StdoutCut: 9000}, nil
		case "quiet":
			return sandbox.Result{Status: sandbox.StatusOK}, nil
		}
		return sandbox.Result{}, errors.New("engine unreachable: no socket at /var/run/docker.sock")
	})})
	cs := connect(t, s, nil)

	res, out := call(t, cs, map[string]any{"code": "ok"})
	// duration_ms is the run's, from asking for its sandbox to giving it up.
	if res.IsError || text(res) != "42\n" || out.Status != "ok" || out.Stdout != "42\n" || out.DurationMS < 20 {
		t.Errorf("ok: isError %v, text %q, out %+v", res.IsError, text(res), out)
	}
	if got.Limits.Timeout != 30*time.Second {
		t.Errorf("default timeout %s, want 30s", got.Limits.Timeout)
	}

	res, out = call(t, cs, map[string]any{"code": "error", "timeout_seconds": 7})
	want := "partial\nstderr:\nTraceback...\nValueError: x\n[error: ValueError: x]"
	if !res.IsError || text(res) != want || out.Status != "error" || out.ExitCode != 1 {
		t.Errorf("error: isError %v, text %q (want %q), out %+v", res.IsError, text(res), want, out)
	}
	if got.Limits.Timeout != 7*time.Second {
		t.Errorf("timeout_seconds 7 gave %s", got.Limits.Timeout)
	}

	res, out = call(t, cs, map[string]any{"code": "cut"})
	if res.IsError || !strings.Contains(text(res), "[stdout cut: 9000 more bytes not shown]") || out.StdoutCut != 9000 {
		t.Errorf("cut: %q %+v", text(res), out)
	}
	if res, _ = call(t, cs, map[string]any{"code": "quiet"}); text(res) != "(no output)" {
		t.Errorf("quiet: %q", text(res))
	}

	res, out = call(t, cs, map[string]any{"code": "engine down"})
	if !res.IsError || out.Status != "unavailable" || !strings.Contains(text(res), "/var/run/docker.sock") {
		t.Errorf("unavailable: %q %+v", text(res), out)
	}
}

func TestRunPythonRejectsBadInput(t *testing.T) {
	ran := false
	s := newServer(t, Options{MaxTimeout: 60 * time.Second, Instances: withRunner(func(context.Context, sandbox.Request) (sandbox.Result, error) {
		ran = true
		return sandbox.Result{Status: sandbox.StatusOK}, nil
	})})
	cs := connect(t, s, nil)
	tests := []struct {
		name string
		args any
		want string
	}{
		{"missing code", map[string]any{}, "missing required argument code"},
		{"code not a string", map[string]any{"code": 5}, "code must be a string"},
		{"unknown field", map[string]any{"code": "1", "cwd": "/"}, `unknown field "cwd"`},
		{"empty code", map[string]any{"code": "  \n"}, "code is empty"},
		{"timeout zero", map[string]any{"code": "1", "timeout_seconds": 0}, "between 1 and 60"},
		{"timeout too long", map[string]any{"code": "1", "timeout_seconds": 61}, "between 1 and 60"},
		{"timeout fractional", map[string]any{"code": "1", "timeout_seconds": 2.5}, "whole number"},
		{"timeout string", map[string]any{"code": "1", "timeout_seconds": "5"}, "whole number"},
		{"code too big", map[string]any{"code": "#" + strings.Repeat("x", 1<<20)}, "code is 1048577 bytes, over the limit of 1Mi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out := call(t, cs, tt.args)
			if !res.IsError || out.Status != "invalid" || !strings.Contains(text(res), tt.want) {
				t.Fatalf("isError %v, status %q, text %q; want it to say %q", res.IsError, out.Status, text(res), tt.want)
			}
		})
	}
	if ran {
		t.Fatal("bad input reached the sandbox")
	}
	// And the server keeps serving.
	if res, _ := call(t, cs, map[string]any{"code": "print(1)"}); res.IsError {
		t.Fatalf("a good call after bad ones failed: %q", text(res))
	}
}

func TestConcurrencyAndBusy(t *testing.T) {
	release := make(chan struct{})
	var running, most atomic.Int32
	s := newServer(t, Options{MaxConcurrent: 2, QueueLength: 1, Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		defer running.Add(-1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return sandbox.Result{Status: sandbox.StatusOK, Stdout: req.Code}, nil
	})})
	cs := connect(t, s, nil)
	// Three calls fill two slots and the one queue place.
	var wg sync.WaitGroup
	results := make([]string, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, _ := call(t, cs, map[string]any{"code": string(rune('a' + i))})
			results[i] = text(res)
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for running.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the third call take its queue place
	res, out := call(t, cs, map[string]any{"code": "d"})
	if !res.IsError || out.Status != "busy" || !strings.Contains(text(res), "try again") {
		t.Fatalf("fourth call: %q %+v, want busy", text(res), out)
	}
	close(release)
	wg.Wait()
	if most.Load() != 2 {
		t.Fatalf("%d runs at once, want 2", most.Load())
	}
	if strings.Join(results, "") != "abc" {
		t.Fatalf("results %q", results)
	}
}

func TestProgressNotifications(t *testing.T) {
	s := newServer(t, Options{ProgressInterval: 50 * time.Millisecond, Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		for i := range 5 {
			req.Sink.Output("stdout", strings.Repeat("line ", i+1)+"\n")
			time.Sleep(60 * time.Millisecond)
		}
		return sandbox.Result{Status: sandbox.StatusOK}, nil
	})})
	var mu sync.Mutex
	var msgs []string
	var last float64
	monotonic := true
	cs := connect(t, s, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		if r.Params.Progress < last {
			monotonic = false
		}
		last = r.Params.Progress
		msgs = append(msgs, r.Params.Message)
	}})
	p := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}}
	p.SetProgressToken("tok")
	if _, err := cs.CallTool(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) < 2 || !monotonic {
		t.Fatalf("progress messages %q (monotonic %v)", msgs, monotonic)
	}
	for _, m := range msgs {
		if !strings.HasPrefix(m, "line") {
			t.Fatalf("progress message %q is not the latest output line", m)
		}
	}
	// Without a token, no notifications. The client may hand the first
	// call's last notification to the handler after that call returned:
	// wait until none has come for 200 ms (4 intervals) before counting.
	for n := -1; n != len(msgs); {
		n = len(msgs)
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
	}
	msgs = nil
	mu.Unlock()
	call(t, cs, map[string]any{"code": "x"})
	mu.Lock()
	if len(msgs) != 0 {
		t.Fatalf("notifications without a progress token: %q", msgs)
	}
}

func TestCancellationReachesTheRun(t *testing.T) {
	cancelled := make(chan struct{})
	started := make(chan struct{})
	s := newServer(t, Options{Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		close(started)
		<-ctx.Done()
		close(cancelled)
		return sandbox.Result{Status: sandbox.StatusCancelled}, nil
	})})
	cs := connect(t, s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}})
	if err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("notifications/cancelled did not cancel the run")
	}
}

func TestShutdownCancelsRuns(t *testing.T) {
	started := make(chan struct{})
	s := newServer(t, Options{Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		close(started)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // removing the container
		return sandbox.Result{Status: sandbox.StatusCancelled}, nil
	})})
	cs := connect(t, s, nil)
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}})
		done <- res
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if res := <-done; res == nil || !res.IsError {
		t.Fatalf("the run in flight was not reported as failed: %+v", res)
	}
	if res, out := call(t, cs, map[string]any{"code": "y"}); !res.IsError || out.Status != "unavailable" {
		t.Fatalf("a call after shutdown: %q", text(res))
	}
}

// An engine that could not be opened fails the call with what to do; the
// next call gets its instance.
func TestUnavailableEngineThenUp(t *testing.T) {
	var attempts atomic.Int32
	s := newServer(t, Options{Instances: fakeInstances{
		acquire: func(context.Context) error {
			if attempts.Add(1) == 1 {
				return &sandbox.UnavailableError{Err: errors.New("container engine unreachable: tried docker")}
			}
			return nil
		},
		run: func(context.Context, sandbox.Request) (sandbox.Result, error) {
			return sandbox.Result{Status: sandbox.StatusOK, Stdout: "up"}, nil
		},
	}})
	cs := connect(t, s, nil)
	res, out := call(t, cs, map[string]any{"code": "x"})
	if !res.IsError || out.Status != "unavailable" || !strings.Contains(text(res), "bridge doctor") {
		t.Fatalf("first call: %q", text(res))
	}
	if res, _ := call(t, cs, map[string]any{"code": "x"}); res.IsError || text(res) != "up" {
		t.Fatalf("second call: %q", text(res))
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"a\nb\n":                  "b",
		"partial":                 "partial",
		"\n\n":                    "",
		strings.Repeat("é", 150):  strings.Repeat("é", 100) + "…",
		"x\r\n":                   "x",
		"one\ntwo\nthree\nfour\n": "four",
	} {
		if got := lastLine(in); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProgressJoinsLinePieces(t *testing.T) {
	p := &progress{active: true}
	for _, chunk := range []string{"step 1\nste", "p 2 of 10"} {
		p.output("stdout", chunk)
	}
	if p.last != "step 2 of 10" {
		t.Fatalf("last = %q, want the whole line", p.last)
	}
	p.output("stdout", "\nnext\n")
	if p.last != "next" {
		t.Fatalf("last = %q, want next", p.last)
	}
}

func TestShutdownCancelsEveryRun(t *testing.T) {
	const n = 3
	var started, cancelled sync.WaitGroup
	started.Add(n)
	cancelled.Add(n)
	s := newServer(t, Options{Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		started.Done()
		<-ctx.Done()
		cancelled.Done()
		return sandbox.Result{Status: sandbox.StatusCancelled}, nil
	})})
	cs := connect(t, s, nil)
	for range n {
		go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}})
	}
	started.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with %d runs in flight: %v", n, err)
	}
	cancelled.Wait()
}

func TestHungEngineBlocksNeitherShutdownNorOtherCalls(t *testing.T) {
	making := make(chan struct{})
	var once sync.Once
	s := newServer(t, Options{Instances: fakeInstances{acquire: func(ctx context.Context) error {
		once.Do(func() { close(making) })
		<-ctx.Done() // a wedged engine
		return ctx.Err()
	}}})
	cs := connect(t, s, nil)
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "x"}})
	<-making
	// A second call waiting for the runner gives up when its client does.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "y"}}); err == nil {
		t.Fatal("the second call returned a result although the engine hangs")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer scancel()
	start := time.Now()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Shutdown took %s with a hung engine", d)
	}
}

func TestQueueZeroMeansNoWaiting(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s := newServer(t, Options{MaxConcurrent: 1, QueueLength: 0, Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		started <- struct{}{}
		<-release
		return sandbox.Result{Status: sandbox.StatusOK}, nil
	})})
	cs := connect(t, s, nil)
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "a"}})
	<-started
	res, out := call(t, cs, map[string]any{"code": "b"})
	close(release)
	if !res.IsError || out.Status != "busy" {
		t.Fatalf("with one slot and no queue, a second call got %q %+v", text(res), out)
	}
}
