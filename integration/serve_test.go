package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/sandbox"
)

// A client of the real `bridge serve` over one transport.
type serveClient struct {
	name string
	// connect starts a bridge serve on e and returns a session to it and
	// the serve process's PID.
	connect func(t *testing.T, e *engine, opts *mcp.ClientOptions) (*mcp.ClientSession, int)
}

func serveClients() []serveClient {
	return []serveClient{{"stdio", connectStdio}, {"http", connectHTTP}}
}

func connectStdio(t *testing.T, e *engine, opts *mcp.ClientOptions) (*mcp.ClientSession, int) {
	t.Helper()
	cs, pid, _ := connectStdioArgs(t, e, opts)
	return cs, pid
}

// connectStdioArgs starts `bridge serve` with extra flags and connects over
// stdio; it also returns the bridge's stderr.
// stopGrace is how long a test's client lets its bridge stop once stdin
// ended, before it is signalled (go-sdk's default is 5 s): a bridge removes
// its sessions' and its pool's containers then, which takes runsc a second
// or more each, and what it leaves behind fails the suite.
const stopGrace = 30 * time.Second

func connectStdioArgs(t *testing.T, e *engine, opts *mcp.ClientOptions, extra ...string) (*mcp.ClientSession, int, *syncBuffer) {
	t.Helper()
	args, env := serveArgs(e)
	if slices.Contains(extra, "--proxy-url") {
		// The remote proxy has the servers: no --servers-config of our own.
		i := slices.Index(args, "--servers-config")
		args = slices.Delete(args, i, i+2)
	}
	if slices.Contains(extra, "--policy") {
		args = withoutSandboxFlags(args)
	}
	args = append(args, extra...)
	cmd := exec.Command(testSuite.bridgeBin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, opts).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd, TerminateDuration: stopGrace}, nil)
	if err != nil {
		t.Fatalf("connecting over stdio: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("bridge serve stderr:\n%s", stderr.String())
		}
	})
	return cs, cmd.Process.Pid, stderr
}

// withoutSandboxFlags drops serveArgs' --runtime and
// --allow-unenforced-limits, for a bridge started with --policy: the policy
// says the engine and whether limits must hold, and serve refuses both.
func withoutSandboxFlags(args []string) []string {
	i := slices.Index(args, "--runtime")
	args = slices.Delete(slices.Clone(args), i, i+2)
	return slices.DeleteFunc(args, func(a string) bool { return a == "--allow-unenforced-limits" })
}

// connectHTTP starts `bridge serve --http 127.0.0.1:0`-like on a free port,
// learns the address from its log, and connects over streamable HTTP.
func connectHTTP(t *testing.T, e *engine, opts *mcp.ClientOptions) (*mcp.ClientSession, int) {
	t.Helper()
	cs, pid, _ := connectHTTPArgs(t, e, opts)
	return cs, pid
}

// connectHTTPArgs is connectHTTP with extra arguments to bridge serve; it
// also returns the address it serves on, for more clients.
func connectHTTPArgs(t *testing.T, e *engine, opts *mcp.ClientOptions, extra ...string) (*mcp.ClientSession, int, string) {
	t.Helper()
	args, _ := serveArgs(e)
	a, pid := startHTTPBridge(t, e, append(args, extra...))
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, opts).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + a + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connecting over HTTP: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	listed(t, cs)
	return cs, pid, a
}

// legacyVersion is the newest MCP revision with sessions (initialize,
// Mcp-Session-Id): a go-sdk client pinned to it is a legacy client. A
// client left to itself asks for 2026-07-28, stateless over HTTP.
const legacyVersion = "2025-11-25"

// listed lists cs's tools, as every agent does before it calls one: a
// 2026-07-28 go-sdk client mirrors run_python's session argument into
// the Mcp-Param-Session header only for a tool it has listed, and the
// bridge refuses a session call without it.
func listed(t testing.TB, cs *mcp.ClientSession) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatalf("tools/list: %v", err)
	}
}

// startHTTPBridge starts `bridge` with args (serve's, for e's engine) and
// --http on a free loopback port, and returns where it listens and its
// pid; the test's end stops it.
func startHTTPBridge(t *testing.T, e *engine, args []string) (string, int) {
	t.Helper()
	_, env := serveArgs(e)
	args = append(args, "--http", "127.0.0.1:0")
	cmd := exec.Command(testSuite.bridgeBin, args...)
	cmd.Env = append(os.Environ(), append(env, "BRIDGE_LOG_LEVEL=info")...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"addr":"(127\.0\.0\.1:[0-9]+)"`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			stderr.Write([]byte(line + "\n"))
			if m := re.FindStringSubmatch(line); m != nil && strings.Contains(line, "serving MCP over HTTP") {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		// The first SIGINT drains: a run still in flight would have
		// --drain-timeout to finish; the second cancels it.
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Second):
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				t.Errorf("bridge serve --http did not stop within 6 s of SIGINT")
			}
		}
		pw.Close()
		if t.Failed() {
			t.Logf("bridge serve stderr:\n%s", stderr.String())
		}
	})
	var a string
	select {
	case a = <-addr:
	case <-time.After(30 * time.Second):
		t.Fatalf("bridge serve --http never said where it listens:\n%s", stderr.String())
	}
	// Health first: no auth on loopback, no secrets.
	resp, err := http.Get("http://" + a + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	return a, cmd.Process.Pid
}

// ownedBy counts the containers on e that the bridge process pid made.
func ownedBy(t *testing.T, e *engine, pid int) int {
	t.Helper()
	return len(ownedIDs(t, e, pid))
}

// ownedIDs are the ids of the containers on e that the bridge process pid
// made, the warm pool's included.
func ownedIDs(t *testing.T, e *engine, pid int) map[string]bool {
	t.Helper()
	cs, err := e.rt.List(context.Background(), map[string]string{sandbox.LabelManaged: "true"})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, c := range cs {
		if strings.Contains(c.Labels[sandbox.LabelOwner], fmt.Sprintf("/%d/", pid)) {
			ids[c.ID] = true
		}
	}
	return ids
}

// exited reports whether process pid has ended (gone, or a zombie not yet
// reaped by its parent).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// forEachServe runs f per engine under test and per way a client connects
// to bridge serve.
func forEachServe(t *testing.T, f func(t *testing.T, e *engine, c serveClient)) {
	t.Helper()
	forServes(t, anyEngine(), f)
}

// forServes is forEachServe on the engines r lets the test run on.
func forServes(t *testing.T, r engineRule, f func(t *testing.T, e *engine, c serveClient)) {
	t.Helper()
	forEngines(t, r, func(t *testing.T, e *engine) {
		for _, c := range serveClients() {
			t.Run(c.name, func(t *testing.T) { f(t, e, c) })
		}
	})
}

type callOutput struct {
	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	Message    string `json:"message"`
	// SessionEnded says why the call's session ended, or what reset did.
	SessionEnded string `json:"session_ended"`
	// Snapshot and Restored say what a call's snapshot and restore did.
	Snapshot *struct {
		Label string `json:"label"`
		Saved bool   `json:"saved"`
		Kind  string `json:"kind"`
		Bytes int64  `json:"bytes"`
		Note  string `json:"note"`
		// MemoryBytes is a memory snapshot's.
		MemoryBytes int64 `json:"memory_bytes"`
	} `json:"snapshot"`
	Restored *struct {
		Label string `json:"label"`
		Kind  string `json:"kind"`
		Bytes int64  `json:"bytes"`
		Note  string `json:"note"`
	} `json:"restored"`
}

func callRunPython(t *testing.T, ctx context.Context, cs *mcp.ClientSession, code string, progressToken any) (*mcp.CallToolResult, callOutput) {
	t.Helper()
	p := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": code}}
	if progressToken != nil {
		p.SetProgressToken(progressToken)
	}
	res, err := cs.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	var out callOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return res, out
}

func contentText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestServeBasics(t *testing.T) {
	forEachServe(t, func(t *testing.T, e *engine, c serveClient) {
		cs, _ := c.connect(t, e, nil)
		ctx := context.Background()
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(tools.Tools) != 1 || tools.Tools[0].Name != "run_python" {
			t.Fatalf("tools/list = %+v, want exactly run_python", tools.Tools)
		}

		res, out := callRunPython(t, ctx, cs, "print(21*2)", nil)
		if res.IsError || contentText(res) != "42\n" || out.Status != "ok" || out.Stdout != "42\n" {
			t.Fatalf("print(21*2): isError %v, text %q, %+v", res.IsError, contentText(res), out)
		}

		res, out = callRunPython(t, ctx, cs, "def f():\n    raise ValueError('nope')\nf()", nil)
		text := contentText(res)
		if !res.IsError || out.Status != "error" || out.ExitCode != 1 ||
			!strings.Contains(text, "Traceback") || !strings.Contains(text, "line 2, in f") || !strings.Contains(text, "ValueError: nope") {
			t.Fatalf("exception: isError %v, %+v\n%s", res.IsError, out, text)
		}

		res, out = callRunPython(t, ctx, cs, "print(1", nil)
		if !res.IsError || !strings.Contains(contentText(res), "SyntaxError") || !strings.Contains(contentText(res), "line 1") {
			t.Fatalf("syntax error: %q", contentText(res))
		}

		// A timeout: status timeout, within the timeout plus a margin.
		start := time.Now()
		tres, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print('spin', flush=True)\nwhile True: pass", "timeout_seconds": 2}})
		if err != nil {
			t.Fatal(err)
		}
		var tout callOutput
		b, _ := json.Marshal(tres.StructuredContent)
		json.Unmarshal(b, &tout)
		if !tres.IsError || tout.Status != "timeout" || !strings.Contains(contentText(tres), "spin") {
			t.Fatalf("timeout: %+v %q", tout, contentText(tres))
		}
		if d := time.Since(start); d > 2*time.Second+5*time.Second {
			t.Fatalf("a 2 s timeout returned after %s", d)
		}

		// Bad input: an error result, and the server serves the next call.
		bad, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": 5}})
		if err != nil || !bad.IsError || !strings.Contains(contentText(bad), "code must be a string") {
			t.Fatalf("bad input: %v %q", err, contentText(bad))
		}
		if res, _ := callRunPython(t, ctx, cs, "print('still here')", nil); contentText(res) != "still here\n" {
			t.Fatalf("after bad input: %q", contentText(res))
		}
	})
}

func TestServeProgress(t *testing.T) {
	forServes(t, aboveEngine("progress notifications"), func(t *testing.T, e *engine, c serveClient) {
		var mu sync.Mutex
		var msgs []string
		cs, _ := c.connect(t, e, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			msgs = append(msgs, r.Params.Message)
			mu.Unlock()
		}})
		res, _ := callRunPython(t, context.Background(), cs,
			"import time\nfor i in range(6):\n    print('step', i, flush=True)\n    time.sleep(0.5)", "prog-1")
		if res.IsError {
			t.Fatalf("run failed: %q", contentText(res))
		}
		mu.Lock()
		defer mu.Unlock()
		steps := 0
		for _, m := range msgs {
			if strings.HasPrefix(m, "step ") {
				steps++
			}
		}
		if steps < 2 {
			t.Fatalf("progress messages over a 3 s run: %q", msgs)
		}
	})
}

func TestServeCancelRemovesContainer(t *testing.T) {
	forEachServe(t, func(t *testing.T, e *engine, c serveClient) {
		started := make(chan struct{}, 1)
		cs, pid := c.connect(t, e, &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case started <- struct{}{}:
			default:
			}
		}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			p := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "import time\nprint('up', flush=True)\ntime.sleep(600)"}}
			p.SetProgressToken("cancel-me")
			_, err := cs.CallTool(ctx, p)
			errc <- err
		}()
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the run never reported progress")
		}
		// The run's container is one of these; the others are the warm
		// pool's, ready, and stay (they live 10 minutes).
		before := ownedIDs(t, e, pid)
		if len(before) == 0 {
			t.Fatal("no container runs the call (else this test proves nothing)")
		}
		cancel()
		if err := <-errc; err == nil {
			t.Fatal("the cancelled call returned no error")
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			now, left := ownedIDs(t, e, pid), 0
			for id := range before {
				if now[id] {
					left++
				}
			}
			if left < len(before) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the run's container still exists 15 s after notifications/cancelled (all %d of %v)", left, before)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func TestServeConcurrentCalls(t *testing.T) {
	forEachServe(t, func(t *testing.T, e *engine, c serveClient) {
		cs, _ := c.connect(t, e, nil)
		const n = 8
		var wg sync.WaitGroup
		got := make([]string, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_python",
					Arguments: map[string]any{"code": fmt.Sprintf("import os\nopen('/tmp/me', 'w').write('%d')\nprint(%d * 10, sorted(set(os.listdir('/tmp')) - {'outputs'}) + os.listdir('/tmp/outputs'))", i, i)}})
				if err != nil {
					errs[i] = err
					return
				}
				if res.IsError {
					errs[i] = fmt.Errorf("call %d: %s", i, contentText(res))
					return
				}
				got[i] = contentText(res)
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if want := fmt.Sprintf("%d ['me']\n", i*10); got[i] != want {
				t.Errorf("call %d: %q, want %q", i, got[i], want)
			}
		}
	})
}

// serve must answer initialize and tools/list at once without an engine;
// a call then says what is wrong and where to look.
func TestServeWithoutEngine(t *testing.T) {
	noEngine(t)
	cmd := exec.Command(testSuite.bridgeBin, "serve", "--runtime", "docker")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix:///nonexistent/docker.sock")
	start := time.Now()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("initialize and tools/list took %s without an engine", d)
	}
	res, out := callRunPython(t, context.Background(), cs, "print(1)", nil)
	if !res.IsError || out.Status != "unavailable" || !strings.Contains(contentText(res), "/nonexistent/docker.sock") || !strings.Contains(contentText(res), "bridge doctor") {
		t.Fatalf("%+v %q", out, contentText(res))
	}
}

// On stdin EOF or SIGTERM, runs in flight are cancelled, their containers
// removed, and the process exits within 5 s.
func TestServeShutdown(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		for _, how := range []string{"stdin EOF", "SIGTERM"} {
			t.Run(how, func(t *testing.T) {
				args, env := serveArgs(e)
				cmd := exec.Command(testSuite.bridgeBin, args...)
				cmd.Env = append(os.Environ(), env...)
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
				defer cmd.Process.Kill()
				send := func(s string) {
					if _, err := io.WriteString(stdin, s+"\n"); err != nil {
						t.Fatal(err)
					}
				}
				lines := bufio.NewScanner(stdout)
				send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
				if !lines.Scan() {
					t.Fatal("no initialize response")
				}
				send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"import time\ntime.sleep(600)"}}}`)
				deadline := time.Now().Add(time.Minute)
				for {
					if ownedBy(t, e, cmd.Process.Pid) > 0 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the call's container never appeared")
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(300 * time.Millisecond) // let the runner start the code
				start := time.Now()
				if how == "SIGTERM" {
					cmd.Process.Signal(syscall.SIGTERM)
				} else {
					stdin.Close()
				}
				go io.Copy(io.Discard, stdout)
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("bridge serve exited with %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("bridge serve still runs 5 s after %s", how)
				}
				t.Logf("exited %s after %s", time.Since(start).Round(time.Millisecond), how)
				if n := ownedBy(t, e, cmd.Process.Pid); n != 0 {
					t.Fatalf("%d containers left after shutdown", n)
				}
			})
		}
	})
}

// Over HTTP, SIGTERM drains; a second SIGTERM with a run in flight ends
// the process within 5 s and removes the run's container.
func TestServeHTTPShutdown(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		cs, pid := connectHTTP(t, e, nil)
		go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_python",
			Arguments: map[string]any{"code": "import time\ntime.sleep(600)"}})
		deadline := time.Now().Add(time.Minute)
		for ownedBy(t, e, pid) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the call's container never appeared")
			}
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		syscall.Kill(pid, syscall.SIGTERM)
		time.Sleep(500 * time.Millisecond)
		if exited(pid) {
			t.Fatal("bridge serve --http exited at the first SIGTERM with a run in flight: it should drain")
		}
		start := time.Now()
		syscall.Kill(pid, syscall.SIGTERM)
		for !exited(pid) {
			if time.Since(start) > 5*time.Second {
				t.Fatal("bridge serve --http still runs 5 s after a second SIGTERM")
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("exited %s after the second SIGTERM", time.Since(start).Round(time.Millisecond))
		if n := ownedBy(t, e, pid); n != 0 {
			t.Fatalf("%d containers left after shutdown", n)
		}
	})
}

// TestServeHTTPDrain SIGTERMs `bridge serve --http` in the middle of a
// run: the bridge stops being ready and opening sessions at once, refuses
// a new call with an error that says to reconnect, lets the run finish and
// answer, then exits 0 with no container left.
func TestServeHTTPDrain(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		b := startServeHTTP(t, "bridge serve", e, "--drain-timeout", "30s")
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + b.addr + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if code := readyzStatus(t, b.addr); code != http.StatusOK {
			// The engine opens in the background: give it a moment.
			deadline := time.Now().Add(30 * time.Second)
			for readyzStatus(t, b.addr) != http.StatusOK {
				if time.Now().After(deadline) {
					t.Fatalf("/readyz never answered 200:\n%s", b.logs.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		type answer struct {
			res *mcp.CallToolResult
			err error
		}
		ran := make(chan answer, 1)
		go func() {
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_python",
				Arguments: map[string]any{"code": "import time\ntime.sleep(3)\nprint('finished')"}})
			ran <- answer{res, err}
		}()
		time.Sleep(time.Second) // the call is in flight, its code sleeping
		sigterm := time.Now()
		if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if code := readyzStatus(t, b.addr); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz answered %d while draining, want 503", code)
		}
		if _, err := mcp.NewClient(&mcp.Implementation{Name: "late", Version: "1"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + b.addr + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion}); err == nil {
			t.Error("a new session was opened while draining")
		}
		_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(1)"}})
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != bridge.CodeDraining || !strings.Contains(je.Message, "Reconnect") {
			t.Errorf("a new call while draining: %v; want the draining error", err)
		}
		select {
		case a := <-ran:
			if a.err != nil || a.res.IsError || !strings.Contains(contentText(a.res), "finished") {
				t.Errorf("the run in flight at SIGTERM: %v\n%v", a.err, a.res)
			}
		case <-time.After(time.Minute):
			t.Fatal("the run in flight never answered")
		}
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("bridge serve still runs 10 s after its last run ended:\n%s", b.logs.String())
		}
		t.Logf("exited %s after SIGTERM", time.Since(sigterm).Round(time.Millisecond))
		if b.exitCode() != 0 {
			t.Errorf("exit code %d (%v), want 0", b.exitCode(), b.err)
		}
		if n := ownedBy(t, e, b.pid()); n != 0 {
			t.Errorf("%d containers left after the drain", n)
		}
	})
}
