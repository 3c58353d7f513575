package testupstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// runMainEnv makes the test binary behave as the testupstream command, so
// the process tests need no separate build.
const runMainEnv = "TESTUPSTREAM_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(Run(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// lockedBuffer collects the server's log output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// callObserver reports, through done, each tools/call the server finished
// handling (its handler returned), by tool name.
func callObserver(server *mcp.Server) <-chan string {
	done := make(chan string, 100)
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if method == "tools/call" {
				if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
					select {
					case done <- p.Name:
					default:
					}
				}
			}
			return res, err
		}
	})
	return done
}

// connect runs newServer(opts) in-process and returns a client session to it.
func connect(t *testing.T, opts options, copts *mcp.ClientOptions) (*mcp.ClientSession, *mcp.Server) {
	t.Helper()
	logs := &lockedBuffer{}
	if opts.logw == nil {
		opts.logw = logs
	}
	if opts.exit == nil {
		opts.exit = func(code int) { t.Errorf("server tried to exit with status %d", code) }
	}
	server := newServer(opts)
	return connectTo(t, server, copts, logs), server
}

func connectTo(t *testing.T, server *mcp.Server, copts *mcp.ClientOptions, logs *lockedBuffer) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "testclient", Version: "0"}, copts)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		if t.Failed() && logs != nil {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	params := &mcp.CallToolParams{Name: tool}
	if args != nil {
		params.Arguments = args
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("calling %s: %v", tool, err)
	}
	return res
}

// text is the result's only content, which must be text.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("got %d content items, want 1: %+v", len(res.Content), res.Content)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("content is %T, want text", res.Content[0])
	}
	return tc.Text
}

func TestInitializeAndListTools(t *testing.T) {
	cs, _ := connect(t, options{name: "upstream-a", instructions: "Use echo."}, nil)
	init := cs.InitializeResult()
	if init.ServerInfo.Name != "upstream-a" {
		t.Errorf("server name = %q, want upstream-a", init.ServerInfo.Name)
	}
	if init.Instructions != "Use echo." {
		t.Errorf("instructions = %q", init.Instructions)
	}
	if init.Capabilities.Tools == nil || !init.Capabilities.Tools.ListChanged {
		t.Errorf("tools capability = %+v, want listChanged", init.Capabilities.Tools)
	}

	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("tool %s has no description", tool.Name)
		}
		schema, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(schema, &m); err != nil || m["type"] != "object" {
			t.Errorf("tool %s: input schema %s is not an object schema", tool.Name, schema)
		}
	}
	slices.Sort(names)
	want := []string{"add_tool", "barrier", "big", "count", "crash", "echo", "fail", "hang", "sleep"}
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
}

func TestDefaultName(t *testing.T) {
	cs, _ := connect(t, options{}, nil)
	if got := cs.InitializeResult().ServerInfo.Name; got != "testupstream" {
		t.Errorf("server name = %q, want testupstream", got)
	}
}

func TestEcho(t *testing.T) {
	cs, _ := connect(t, options{}, nil)
	res := call(t, cs, "echo", map[string]any{"message": "héllo"})
	if res.IsError {
		t.Fatalf("echo failed: %+v", res)
	}
	if got := text(t, res); got != "héllo" {
		t.Errorf("text = %q", got)
	}
	sc, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if string(sc) != `{"message":"héllo"}` {
		t.Errorf("structuredContent = %s", sc)
	}

	res = call(t, cs, "echo", map[string]any{})
	if !res.IsError {
		t.Errorf("echo without message: want a tool error, got %+v", res)
	}
}

func TestBarrier(t *testing.T) {
	cs, _ := connect(t, options{}, nil)
	const n = 4
	var wg sync.WaitGroup
	texts := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "barrier", Arguments: map[string]any{"n": n}})
			if err != nil {
				errs[i] = err
				return
			}
			if len(res.Content) == 1 {
				if tc, ok := res.Content[0].(*mcp.TextContent); ok {
					texts[i] = tc.Text
				}
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || texts[i] != "released" {
			t.Errorf("call %d: %q, %v", i, texts[i], errs[i])
		}
	}
	// One call alone never passes a barrier for two.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "barrier", Arguments: map[string]any{"n": 2}})
	if err == nil && !res.IsError {
		t.Fatalf("a lone call passed a barrier for 2: %+v", res)
	}
}

func TestSleepHonoursCancellation(t *testing.T) {
	opts := options{logw: &lockedBuffer{}}
	server := newServer(opts)
	done := callObserver(server)
	cs := connectTo(t, server, nil, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 60000}})
	if err == nil {
		t.Fatal("cancelled sleep returned no error")
	}
	select {
	case name := <-done:
		if name != "sleep" {
			t.Errorf("finished call = %q", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sleep handler still running 5s after cancellation")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("cancelled sleep took %v", elapsed)
	}
}

func TestHangIgnoresCancellation(t *testing.T) {
	release := make(chan struct{})
	logs := &lockedBuffer{}
	server := newServer(options{logw: logs, release: release})
	done := callObserver(server)
	cs := connectTo(t, server, nil, logs)
	// Registered after connectTo's cleanup, so it runs first: the session
	// cannot shut down while the handler is still running.
	var once sync.Once
	releaseHang := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseHang)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hang"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang call error = %v, want deadline exceeded", err)
	}
	select {
	case name := <-done:
		t.Errorf("%s handler returned after its call was cancelled", name)
	case <-time.After(200 * time.Millisecond):
	}
	if !strings.Contains(logs.String(), "hanging anyway") {
		t.Errorf("hang did not see the cancellation; log:\n%s", logs.String())
	}

	// The server still answers other calls meanwhile.
	if got := text(t, call(t, cs, "echo", map[string]any{"message": "still here"})); got != "still here" {
		t.Errorf("echo = %q", got)
	}
	<-done // the echo

	releaseHang()
	select {
	case name := <-done:
		if name != "hang" {
			t.Errorf("finished call = %q, want hang", name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hang handler did not return after release")
	}
}

func TestBig(t *testing.T) {
	cs, _ := connect(t, options{}, nil)
	for _, n := range []int{0, 1, 16, 17, 18, 1000, 1 << 20} {
		res := call(t, cs, "big", map[string]any{"bytes": n})
		if res.IsError {
			t.Fatalf("big %d failed: %+v", n, res)
		}
		if res.StructuredContent != nil {
			t.Errorf("big %d: unexpected structuredContent", n)
		}
		got := text(t, res)
		if len(got) != n {
			t.Errorf("big %d: got %d bytes", n, len(got))
		}
		if got != strings.Repeat(bigPattern, n/len(bigPattern)+1)[:n] {
			t.Errorf("big %d: unexpected text %.40q...", n, got)
		}
	}
	if res := call(t, cs, "big", map[string]any{"bytes": -1}); !res.IsError {
		t.Errorf("big -1: want a tool error")
	}
}

func TestFail(t *testing.T) {
	cs, _ := connect(t, options{}, nil)
	res := call(t, cs, "fail", map[string]any{"message": "no such file"})
	if !res.IsError {
		t.Errorf("fail: IsError = false")
	}
	if got := text(t, res); got != "no such file" {
		t.Errorf("fail text = %q", got)
	}
}

func TestCount(t *testing.T) {
	cs, _ := connect(t, options{}, nil)
	for range 3 {
		call(t, cs, "echo", map[string]any{"message": "x"})
	}
	// Calls of unknown tools are counted too.
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "nope"}); err == nil {
		t.Errorf("calling an unknown tool: no error")
	}
	res := call(t, cs, "count", nil)
	if got := text(t, res); got != `{"calls":5}` {
		t.Errorf("count = %s, want {\"calls\":5}", got)
	}
}

func TestRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	rec, err := openRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	cs, _ := connect(t, options{record: rec}, nil)

	before := time.Now()
	ctx := context.Background()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{
		Meta:      mcp.Meta{"bridge/run": "r1", "progressToken": "p1"},
		Name:      "echo",
		Arguments: map[string]any{"message": "one"},
	}); err != nil {
		t.Fatal(err)
	}
	// The line is on disk as soon as the call is answered.
	lines := readRecords(t, path)
	if len(lines) != 1 {
		t.Fatalf("got %d record lines after one call, want 1", len(lines))
	}
	call(t, cs, "fail", map[string]any{"message": "two"})
	call(t, cs, "count", nil)

	lines = readRecords(t, path)
	if len(lines) != 3 {
		t.Fatalf("got %d record lines, want 3", len(lines))
	}
	for i, want := range []string{"echo", "fail", "count"} {
		if lines[i].Tool != want {
			t.Errorf("line %d: tool = %q, want %q", i, lines[i].Tool, want)
		}
		ts, err := time.Parse(time.RFC3339Nano, lines[i].Time)
		if err != nil {
			t.Errorf("line %d: bad time %q: %v", i, lines[i].Time, err)
		} else if ts.Before(before.Add(-time.Second)) || ts.After(time.Now().Add(time.Second)) {
			t.Errorf("line %d: time %v out of range", i, ts)
		}
	}
	var args map[string]any
	if err := json.Unmarshal(lines[0].Arguments, &args); err != nil || args["message"] != "one" {
		t.Errorf("line 0: arguments = %s", lines[0].Arguments)
	}
	if lines[0].Meta["bridge/run"] != "r1" || lines[0].Meta["progressToken"] != "p1" {
		t.Errorf("line 0: meta = %v", lines[0].Meta)
	}
	if string(lines[2].Arguments) != "{}" {
		t.Errorf("line 2: arguments = %s, want {}", lines[2].Arguments)
	}
}

func readRecords(t *testing.T, path string) []record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []record
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad record line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if !bytes.HasSuffix(data, []byte("\n")) && len(data) > 0 {
		t.Errorf("record file does not end in a newline")
	}
	return recs
}

func TestAddToolNotifiesListChanged(t *testing.T) {
	changed := make(chan struct{}, 10)
	cs, _ := connect(t, options{}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			changed <- struct{}{}
		},
	})
	if got := text(t, call(t, cs, "add_tool", map[string]any{"name": "dyn_echo"})); got != "added" {
		t.Errorf("add_tool = %q, want added", got)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/tools/list_changed after add_tool")
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "dyn_echo" }) {
		t.Errorf("dyn_echo not listed after add_tool")
	}
	if got := text(t, call(t, cs, "dyn_echo", map[string]any{"message": "hi"})); got != "hi" {
		t.Errorf("dyn_echo = %q", got)
	}
}

// startProcess runs the test binary as the testupstream command.
func startProcess(t *testing.T, args ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "TESTUPSTREAM_RECORD=")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("testupstream stderr:\n%s", stderr.String())
		}
	})
	return cmd, stderr
}

func TestProcessStdioRecordAndCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	cmd, stderr := startProcess(t, "--record", path, "--name", "proc")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "testclient", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ServerInfo.Name; got != "proc" {
		t.Errorf("server name = %q", got)
	}
	if got := text(t, call(t, cs, "echo", map[string]any{"message": "over stdio"})); got != "over stdio" {
		t.Errorf("echo = %q", got)
	}
	if got := text(t, call(t, cs, "count", nil)); got != `{"calls":2}` {
		t.Errorf("count = %s", got)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "crash", Arguments: map[string]any{"exit_code": 7}}); err == nil {
		t.Errorf("crash answered: %+v", res)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("process exit = %v, want status 7", err)
	}
	if !strings.Contains(stderr.String(), "testupstream: crashing on purpose") {
		t.Errorf("stderr lacks the crash message:\n%s", stderr.String())
	}
	lines := readRecords(t, path)
	var tools []string
	for _, l := range lines {
		tools = append(tools, l.Tool)
	}
	if !slices.Equal(tools, []string{"echo", "count", "crash"}) {
		t.Errorf("recorded tools = %v", tools)
	}
}

func TestProcessStdioExitsOnEOF(t *testing.T) {
	cmd, _ := startProcess(t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	select {
	case err := <-waitc:
		if err != nil {
			t.Errorf("exit after EOF: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("process still running 10s after stdin was closed")
	}
}

// A hanging call must not keep the process alive once its client is gone.
func TestProcessStdioExitsWhileHanging(t *testing.T) {
	for _, how := range []string{"eof", "sigterm"} {
		t.Run(how, func(t *testing.T) {
			cmd, stderr := startProcess(t)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			client := mcp.NewClient(&mcp.Implementation{Name: "testclient", Version: "0"}, nil)
			cs, err := client.Connect(context.Background(), &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
			if err != nil {
				t.Fatal(err)
			}
			go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "hang"})
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(stderr.String(), "tools/call #1 hang") {
				if time.Now().After(deadline) {
					t.Fatal("hang call not received")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if how == "eof" {
				stdin.Close()
			} else if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitc := make(chan error, 1)
			go func() { waitc <- cmd.Wait() }()
			select {
			case err := <-waitc:
				if err != nil {
					t.Errorf("exit: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("process still running 10s later")
			}
			cs.Close()
		})
	}
}

func TestProcessHTTP(t *testing.T) {
	urlFile := filepath.Join(t.TempDir(), "url")
	cmd, stderr := startProcess(t, "--http", "127.0.0.1:0", "--url-file", urlFile, "--instructions", "over http")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var url string
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(urlFile)
		if err == nil {
			url = strings.TrimSpace(string(data))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no URL file after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("url = %q", url)
	}
	if !strings.Contains(stderr.String(), url) {
		t.Errorf("stderr does not mention %s:\n%s", url, stderr.String())
	}

	changed := make(chan struct{}, 10)
	client := mcp.NewClient(&mcp.Implementation{Name: "testclient", Version: "0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().Instructions; got != "over http" {
		t.Errorf("instructions = %q", got)
	}
	if got := text(t, call(t, cs, "echo", map[string]any{"message": "over http"})); got != "over http" {
		t.Errorf("echo = %q", got)
	}
	call(t, cs, "add_tool", map[string]any{"name": "late"})
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Error("no notifications/tools/list_changed over HTTP")
	}
	if got := text(t, call(t, cs, "count", nil)); got != `{"calls":3}` {
		t.Errorf("count = %s", got)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
