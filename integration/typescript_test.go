package integration

// Tests of `bridge serve --http` against the JavaScript clients people run:
// the TypeScript SDK 2.x client with the Tasks extension's client
// (integration/npm/modern-client.mjs), the TypeScript SDK 1.x client
// (integration/npm/legacy-client.mjs), and the MCP Inspector CLI over HTTP.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Two principals' tokens for the tests of this file.
const (
	tsAlice = "alice-0123456789abcdef0123456789abcdef"
	tsBob   = "bob-0123456789abcdef0123456789abcdef01"
)

// tsStep is one line a client script prints: {"step": NAME, ...}.
type tsStep struct {
	Step          string              `json:"step"`
	Version       string              `json:"version"`
	Era           string              `json:"era"`
	SessionID     *string             `json:"sessionId"`
	Tasks         bool                `json:"tasks"`
	Names         []string            `json:"names"`
	SessionHeader string              `json:"sessionHeader"`
	Structured    callOutput          `json:"structured"`
	IsError       bool                `json:"isError"`
	Calls         []map[string]string `json:"calls"`
	Kind          string              `json:"kind"`
	TaskID        string              `json:"taskId"`
	Status        string              `json:"status"`
	States        []string            `json:"states"`
	Stdout        string              `json:"stdout"`
	At            string              `json:"at"`
	Message       string              `json:"message"`
	Error         string              `json:"error"`
	Cause         string              `json:"cause"`
}

// nodeClient runs the script of integration/npm against the bridge's
// /mcp at addr, with env added (the tokens), and hands each line it prints
// to step as it comes; step answers with what to write to the script's
// stdin ("" for nothing). It returns the steps, and fails the test if the
// script fails or reports an error. The script imports its packages
// from the node_modules beside it, and the npm peers may be installed in
// another checkout ($BRIDGE_NPM_DIR): it runs from a copy in a folder of
// its own, beside a link to them (as oversizedClient's does).
func nodeClient(t *testing.T, npm, script, addr string, env []string, step func(tsStep) string) []tsStep {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(repoRoot(), "integration", "npm", script))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, script), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(npm, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(dir, script), "http://"+addr+"/mcp")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var steps []tsStep
	var raw strings.Builder
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		raw.WriteString(sc.Text() + "\n")
		var s tsStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Errorf("%s printed %q: %v", script, sc.Text(), err)
			continue
		}
		steps = append(steps, s)
		if step != nil {
			if in := step(s); in != "" {
				io.WriteString(stdin, in)
			}
		}
	}
	stdin.Close()
	err = cmd.Wait()
	if err != nil || slices.ContainsFunc(steps, func(s tsStep) bool { return s.Step == "error" || s.Step == "background-error" }) {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", script, err, raw.String(), stderr)
	}
	t.Logf("%s:\n%s", script, raw.String())
	return steps
}

// stepsNamed are the steps of that name, in order.
func stepsNamed(steps []tsStep, name string) []tsStep {
	var out []tsStep
	for _, s := range steps {
		if s.Step == name {
			out = append(out, s)
		}
	}
	return out
}

// oneStep is the one step of that name.
func oneStep(t *testing.T, steps []tsStep, name string) tsStep {
	t.Helper()
	s := stepsNamed(steps, name)
	if len(s) != 1 {
		t.Fatalf("%d %q steps, want 1: %+v", len(s), name, steps)
	}
	return s[0]
}

// tsBridge starts `bridge serve --http` on e with sessions, tasks (a run
// still going after 500 ms is a task) and the two principals' tokens.
func tsBridge(t *testing.T, e *engine) (addr string, pid int) {
	t.Helper()
	args, _ := serveArgs(e)
	return startHTTPBridge(t, e, append(withoutSandboxFlags(args), "--policy", tasksPolicy(t, e, 0, 3, "1m", "10m"),
		"--principals", principalsFile(t, "alice "+tsAlice, "bob "+tsBob)))
}

// TestTypeScript2Client: the TypeScript SDK 2.x client negotiates
// 2026-07-28 with `bridge serve --http` (server/discover, no MCP session),
// lists run_python with its session property mirrored into the
// Mcp-Param-Session header, and keeps a session by name across calls,
// each call carrying the header; through the Tasks extension's client a
// 4 s run becomes a task it polls to completion and gets the result of,
// and a 300 s run's task it cancels, whose container then goes.
func TestTypeScript2Client(t *testing.T) {
	scope := aboveEngine("the TypeScript SDK 2.x client and ext-tasks over HTTP")
	runsOn(t, scope)
	npm := npmPeers(t)
	forEngines(t, scope, func(t *testing.T, e *engine) {
		addr, pid := tsBridge(t, e)
		var running map[string]bool
		steps := nodeClient(t, npm, "modern-client.mjs", addr, []string{"MCP_BEARER_TOKEN=" + tsAlice}, func(s tsStep) string {
			if s.Step != "running" {
				return ""
			}
			// The session's container and the 300 s run's.
			waitFor(t, 30*time.Second, "the session's and the task's containers", func() bool { return len(ownedIDs(t, e, pid)) == 2 })
			running = ownedIDs(t, e, pid)
			return "cancel\n"
		})

		if c := oneStep(t, steps, "connect"); c.Version != "2026-07-28" || c.Era != "modern" || c.SessionID != nil || !c.Tasks {
			t.Errorf("connect: %+v, want 2026-07-28, modern, no MCP session, the Tasks extension", c)
		}
		if l := oneStep(t, steps, "tools"); !slices.Equal(l.Names, []string{"run_python"}) || l.SessionHeader != "Session" {
			t.Errorf("tools/list: %+v, want run_python with its session mirrored into Mcp-Param-Session", l)
		}
		calls := stepsNamed(steps, "call")
		if len(calls) != 2 || calls[0].Structured.Status != "ok" || calls[1].Structured.Stdout != "1\n" {
			t.Errorf("x = 1, then print(x), in session ts: %+v", calls)
		}
		h := oneStep(t, steps, "headers")
		if len(h.Calls) != 2 {
			t.Errorf("%d tools/call requests recorded, want 2", len(h.Calls))
		}
		for _, c := range h.Calls {
			if c["mcp-param-session"] != "ts" || c["mcp-name"] != "run_python" || c["mcp-protocol-version"] != "2026-07-28" || c["mcp-session-id"] != "" {
				t.Errorf("a tools/call's headers: %v", c)
			}
		}

		if k := oneStep(t, steps, "task"); k.Kind != "task" || k.TaskID == "" {
			t.Errorf("a 4 s run through ext-tasks: %+v, want a task", k)
		}
		done := oneStep(t, steps, "settled")
		if done.Status != "completed" || done.Stdout != "started\nfinished\n" || len(done.States) < 2 ||
			done.States[0] != "working" || done.States[len(done.States)-1] != "completed" {
			t.Errorf("the 4 s task's end: %+v", done)
		}
		if r := oneStep(t, steps, "running"); r.Kind != "task" || r.TaskID == "" {
			t.Errorf("a 300 s run through ext-tasks: %+v, want a task", r)
		}
		if c := oneStep(t, steps, "cancel"); c.Status != "cancelled" {
			t.Errorf("the cancelled task: %+v", c)
		}
		waitFor(t, 15*time.Second, "the cancelled task's container removed", func() bool { return len(ownedIDs(t, e, pid)) == 1 })
		for id := range ownedIDs(t, e, pid) {
			if !running[id] {
				t.Errorf("container %s appeared after the cancel", id)
			}
		}
	})
}

// TestTypeScript1ClientLegacy: the TypeScript SDK 1.x client negotiates
// 2025-11-25 with `bridge serve --http` (initialize, an Mcp-Session-Id)
// and keeps a session by name across calls; a second connection of the
// same principal finds the session (sessions belong to the principal,
// not the MCP session), and another principal naming it is refused.
func TestTypeScript1ClientLegacy(t *testing.T) {
	scope := aboveEngine("the TypeScript SDK 1.x client over HTTP")
	runsOn(t, scope)
	npm := npmPeers(t)
	forEngines(t, scope, func(t *testing.T, e *engine) {
		addr, _ := tsBridge(t, e)
		steps := nodeClient(t, npm, "legacy-client.mjs", addr, []string{"MCP_BEARER_TOKEN=" + tsAlice, "MCP_OTHER_TOKEN=" + tsBob}, nil)

		c := oneStep(t, steps, "connect")
		if c.Version != legacyVersion || c.SessionID == nil || *c.SessionID == "" {
			t.Fatalf("connect: %+v, want %s with an MCP session", c, legacyVersion)
		}
		calls := stepsNamed(steps, "call")
		if len(calls) != 2 || calls[0].Structured.Status != "ok" || calls[1].Structured.Stdout != "1\n" {
			t.Errorf("x = 1, then print(x), in session legacy: %+v", calls)
		}
		for _, h := range oneStep(t, steps, "headers").Calls {
			if h["mcp-session-id"] != *c.SessionID || h["mcp-protocol-version"] != legacyVersion || h["mcp-param-session"] != "" {
				t.Errorf("a tools/call's headers: %v", h)
			}
		}
		again := oneStep(t, steps, "again")
		if again.SessionID == nil || *again.SessionID == *c.SessionID || again.Structured.Stdout != "1\n" {
			t.Errorf("alice's second connection: %+v, want its own MCP session and x from session legacy", again)
		}
		other := oneStep(t, steps, "other")
		if !other.IsError || other.Structured.Status != "invalid" || !strings.Contains(other.Structured.Message, "held by another principal") {
			t.Errorf("bob naming alice's session: %+v", other)
		}
	})
}

// wireLog records the requests a proxy in front of the bridge passes on:
// each one's JSON-RPC method and MCP headers.
type wireLog struct {
	mu   sync.Mutex
	reqs []wireRequest
}

type wireRequest struct {
	method, version, session, name string
}

// wireRecorder serves a reverse proxy to the bridge at addr that logs
// what passes, and returns its address.
func wireRecorder(t *testing.T, addr string) (string, *wireLog) {
	t.Helper()
	log := &wireLog{}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
	proxy.FlushInterval = -1 // SSE events as they come
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(body, &msg)
			log.mu.Lock()
			log.reqs = append(log.reqs, wireRequest{msg.Method, r.Header.Get("Mcp-Protocol-Version"), r.Header.Get("Mcp-Session-Id"), r.Header.Get("Mcp-Name")})
			log.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), log
}

// take returns the requests logged so far and forgets them.
func (l *wireLog) take() []wireRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// inspectorHTTP runs the MCP Inspector CLI against the /mcp at addr with
// token, negotiating era ("": the Inspector's default), and returns the
// "result" of its JSON output.
func inspectorHTTP(t *testing.T, npm, addr, token, era, method string, methodArgs ...string) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"--cli", "--server-url", "http://" + addr + "/mcp", "--header", "Authorization: Bearer " + token, "--method", method}
	if era != "" {
		args = append(args, "--protocol-era", era)
	}
	args = append(append(args, methodArgs...), "--format", "json")
	cmd := exec.CommandContext(ctx, filepath.Join(npm, ".bin", "mcp-inspector"), args...)
	cmd.Env = append(os.Environ(), "MCP_STORAGE_DIR="+t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("mcp-inspector --protocol-era %q --method %s: %v\nstdout:\n%s\nstderr:\n%s", era, method, err, stdout.String(), stderr.String())
	}
	var out struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out.Result) == 0 {
		t.Fatalf("mcp-inspector --method %s printed no {\"result\": ...} (%v)\nstdout:\n%s\nstderr:\n%s", method, err, stdout.String(), stderr.String())
	}
	return out.Result
}

// TestInspectorStateless: the MCP Inspector CLI over HTTP with a token,
// left to its default (it initializes with 2025-11-25 and keeps an MCP
// session) and told --protocol-era modern (2026-07-28 through
// server/discover, stateless: no initialize, no Mcp-Session-Id), lists
// run_python and calls it; on 2026-07-28 it declares the Tasks extension,
// so a 2 s run becomes a task it polls (tasks/get by Mcp-Name) to its
// result.
func TestInspectorStateless(t *testing.T) {
	scope := aboveEngine("the MCP Inspector over HTTP")
	runsOn(t, scope)
	npm := npmPeers(t)
	forEngines(t, scope, func(t *testing.T, e *engine) {
		bridge, _ := tsBridge(t, e)
		addr, wire := wireRecorder(t, bridge)
		for _, c := range []struct{ era, version string }{{"", legacyVersion}, {"modern", "2026-07-28"}} {
			raw := inspectorHTTP(t, npm, addr, tsAlice, c.era, "tools/list")
			if !strings.Contains(string(raw), `"name":"run_python"`) {
				t.Errorf("era %q: tools/list: %s", c.era, raw)
			}
			raw = inspectorHTTP(t, npm, addr, tsAlice, c.era, "tools/call", "--tool-name", "run_python", "--tool-arg", "code=print(21*2)")
			var res struct {
				Structured callOutput `json:"structuredContent"`
			}
			if err := json.Unmarshal(raw, &res); err != nil || res.Structured.Stdout != "42\n" {
				t.Errorf("era %q: tools/call print(21*2): %s", c.era, raw)
			}
			reqs := wire.take()
			t.Logf("era %q: %+v", c.era, reqs)
			for _, r := range reqs {
				switch {
				case r.method == "initialize":
					if c.version != legacyVersion {
						t.Errorf("era %q: an initialize", c.era)
					}
				case r.method == "server/discover":
				case r.method == "notifications/initialized" && c.version == legacyVersion:
				case r.version != c.version || (r.session != "") != (c.version == legacyVersion):
					t.Errorf("era %q: %+v, want version %s, an MCP session only with %s", c.era, r, c.version, legacyVersion)
				}
			}
			if !slices.ContainsFunc(reqs, func(r wireRequest) bool { return r.method == "tools/call" }) {
				t.Errorf("era %q: no tools/call passed the proxy: %+v", c.era, reqs)
			}
		}

		// 2026-07-28 with the Tasks extension: a 2 s run is a task.
		raw := inspectorHTTP(t, npm, addr, tsAlice, "modern", "tools/call", "--tool-name", "run_python",
			"--tool-arg", "code=import time; time.sleep(2); print('slept')")
		var res struct {
			Structured callOutput `json:"structuredContent"`
		}
		if err := json.Unmarshal(raw, &res); err != nil || res.Structured.Stdout != "slept\n" {
			t.Errorf("a 2 s run: %s", raw)
		}
		polls := 0
		for _, r := range wire.take() {
			if r.method == "tasks/get" && r.name != "" && r.version == "2026-07-28" {
				polls++
			}
		}
		if polls == 0 {
			t.Errorf("the Inspector polled no task for a 2 s run")
		}
	})
}
