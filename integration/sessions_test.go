package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionPolicy writes a policy with sessions on (idle_timeout idle) and
// no warm pool (so that the bridge's containers are its sessions' and
// runs'), and returns its path.
func sessionPolicy(t *testing.T, e *engine, idle string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\n" + sandboxSection(e) + "pool:\n  size: 0\nsessions:\n  enabled: true\n  idle_timeout: " + idle + "\n"
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sessionCall calls run_python with args and returns its result, text and
// structuredContent.
func sessionCall(t *testing.T, cs *mcp.ClientSession, args map[string]any) (callOutput, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %v: %v", args, err)
	}
	var out callOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return out, contentText(res)
}

// TestSessions: through a real MCP client over stdio, a session keeps its
// interpreter across calls and nothing else sees it; a timeout the code
// survives keeps it, code that ignores the interrupt loses it, an idle
// session is removed, and nothing is left when the bridge exits.
func TestSessions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		servers := misbehaveServers(t)
		debugAddr := freeLoopbackAddr(t)
		cs, pid, stderr := connectStdioArgs(t, e, nil, "--policy", sessionPolicy(t, e, "10s"), "--servers-config", servers, "--debug-addr", debugAddr)
		run := func(args map[string]any) (callOutput, string) { return sessionCall(t, cs, args) }
		// The bridge's own costs before any session, to compare with once
		// they all ended.
		if out, text := run(map[string]any{"code": "import mcp_tools\nmcp_tools.call('misbehave', 'echo', message='warm')"}); out.Status != "ok" {
			t.Fatalf("a first run: %+v %s", out, text)
		}
		waitFor(t, 30*time.Second, "the first run's container removed", func() bool { return len(ownedIDs(t, e, pid)) == 0 })
		time.Sleep(time.Second)
		base := debugStats(t, debugAddr)
		var peak bridgeStats

		if out, text := run(map[string]any{"code": "x = 41\nopen('/tmp/kept', 'w').write('yes')", "session": "a"}); out.Status != "ok" {
			t.Fatalf("first call: %+v %s", out, text)
		}
		if out, text := run(map[string]any{"code": "print(x + 1, open('/tmp/kept').read())", "session": "a"}); out.Stdout != "42 yes\n" {
			t.Fatalf("second call in a: %+v %s", out, text)
		}
		// A session's tool calls go through the policy like a run's, each
		// call audited with the session's id.
		if out, text := run(map[string]any{"code": "import mcp_tools\nprint(mcp_tools.call('misbehave', 'echo', message='from a')['message'])", "session": "a"}); out.Stdout != "from a\n" {
			t.Fatalf("a tool call in session a: %+v %s", out, text)
		}
		// The bridge writes its log a few ms behind (internal/logwriter).
		checkSessionAudit(t, awaitLog(t, stderr, "the audit of the session's echo call", func(log string) bool {
			return strings.Count(log, `"server":"misbehave","tool":"echo"`) >= 2 // the baseline run's, then the session's
		}))

		// Neither a fresh run nor another session sees a's state.
		if out, _ := run(map[string]any{"code": "import os\nprint('x' in globals(), os.path.exists('/tmp/kept'))"}); out.Stdout != "False False\n" {
			t.Errorf("a call without session: %+v", out)
		}
		if out, _ := run(map[string]any{"code": "import os\nprint('x' in globals(), os.path.exists('/tmp/kept'))", "session": "b"}); out.Stdout != "False False\n" {
			t.Errorf("session b: %+v", out)
		}

		// A timeout interrupts the code; it stops, and the state stays.
		out, text := run(map[string]any{"code": "import time\nx = 41\ntime.sleep(60)", "session": "a", "timeout_seconds": 2})
		if out.Status != "timeout" || !strings.Contains(out.Message, "keeps its state") {
			t.Fatalf("interrupted call: %+v %s", out, text)
		}
		if out, text := run(map[string]any{"code": "print(x)", "session": "a"}); out.Stdout != "41\n" {
			t.Fatalf("after the interrupt: %+v %s", out, text)
		}

		// Code that ignores KeyboardInterrupt loses the session, plainly.
		out, text = run(map[string]any{"code": "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except KeyboardInterrupt:\n        pass",
			"session": "a", "timeout_seconds": 1})
		if out.Status != "timeout" || !strings.Contains(out.Message, "state is lost") || !strings.Contains(text, `session "a" ended`) {
			t.Fatalf("ignored the interrupt: %+v %s", out, text)
		}
		if out, _ := run(map[string]any{"code": "print('x' in globals())", "session": "a"}); out.Stdout != "False\n" {
			t.Errorf("a new session a: %+v", out)
		}

		// One call at a time: a second call to a busy session waits (here
		// up to its own 2 s timeout), then is told so.
		first := make(chan callOutput, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{
				"code": "import time\nprint('start', flush=True)\ntime.sleep(6)\nprint('done')", "session": "c"}})
			var out callOutput
			if err == nil {
				b, _ := json.Marshal(res.StructuredContent)
				_ = json.Unmarshal(b, &out)
			}
			first <- out
		}()
		time.Sleep(2 * time.Second) // the first call is in the session
		out, text = run(map[string]any{"code": "print('second')", "session": "c", "timeout_seconds": 2})
		if out.Status != "busy" || !strings.Contains(out.Message, `session "c" is still running another call`) {
			t.Errorf("a second call to a busy session: %+v %s", out, text)
		}
		if out := <-first; out.Status != "ok" || out.Stdout != "start\ndone\n" {
			t.Errorf("the first call: %+v", out)
		}
		if out, _ := run(map[string]any{"code": "", "session": "c", "reset": true}); out.Status != "ok" {
			t.Errorf("reset c: %+v", out)
		}

		// Running out of memory ends the session, as plainly.
		if e.enforced {
			if out, text := run(map[string]any{"code": "y = 1", "session": "m"}); out.Status != "ok" {
				t.Fatalf("session m: %+v %s", out, text)
			}
			out, text := run(map[string]any{"code": "data = 'x' * (1 << 30)", "session": "m"})
			if out.Status != "memory" || !strings.Contains(text, `session "m" ended`) || !strings.Contains(text, "state is lost") {
				t.Errorf("out of memory in a session: %+v %s", out, text)
			}
			if out, _ := run(map[string]any{"code": "print('y' in globals())", "session": "m"}); out.Stdout != "False\n" {
				t.Errorf("session m after running out of memory: %+v", out)
			}
			if out, _ := run(map[string]any{"code": "", "session": "m", "reset": true}); out.Status != "ok" {
				t.Errorf("reset m: %+v", out)
			}
		}

		// The code shares the runner's process and its relay socket: a
		// thread it leaves behind writes garbage to the socket between two
		// calls. The next call ends in a protocol error, the session with
		// it, and the bridge goes on.
		out, text = run(map[string]any{"code": `import threading, time, _bridge_relay
sock = _bridge_relay.query.__self__._sock
def later():
    time.sleep(0.5)
    sock.sendall(b"\x00\x00\x00\x05junk!")
threading.Thread(target=later, daemon=True).start()`, "session": "h"})
		if out.Status != "ok" {
			t.Fatalf("session h: %+v %s", out, text)
		}
		time.Sleep(time.Second)
		out, text = run(map[string]any{"code": "print('next')", "session": "h"})
		if out.Status != "error" || !strings.Contains(out.Message, "relay protocol error") || !strings.Contains(text, `session "h" ended`) {
			t.Errorf("after garbage between calls: %+v %s", out, text)
		}
		if out, _ := run(map[string]any{"code": "print('fine')", "session": "h"}); out.Stdout != "fine\n" {
			t.Errorf("a new session h: %+v", out)
		}
		if out, _ := run(map[string]any{"code": "", "session": "h", "reset": true}); out.Status != "ok" {
			t.Errorf("reset h: %+v", out)
		}

		// reset ends a session and removes its container. a and b are the
		// sessions left (used now, so that neither is idle yet).
		for _, name := range []string{"a", "b"} {
			if out, text := run(map[string]any{"code": "pass", "session": name}); out.Status != "ok" {
				t.Fatalf("session %s: %+v %s", name, out, text)
			}
		}
		waitFor(t, 30*time.Second, "two session containers", func() bool { return len(ownedIDs(t, e, pid)) == 2 })
		if out, text := run(map[string]any{"code": "", "session": "b", "reset": true}); out.Status != "ok" || !strings.Contains(text, `session "b" ended`) {
			t.Errorf("reset: %+v %s", out, text)
		}
		waitFor(t, 30*time.Second, "b's container removed", func() bool { return len(ownedIDs(t, e, pid)) == 1 })

		peak = peak.max(debugStats(t, debugAddr))

		// Idle for 10 s (idle_timeout): a's container goes too.
		waitFor(t, 40*time.Second, "the idle session's container removed", func() bool { return len(ownedIDs(t, e, pid)) == 0 })
		// With no session left, the bridge is back to its costs before
		// them: one goroutine more at most (the watch on this client,
		// which made sessions, until it disconnects).
		var now bridgeStats
		waitFor(t, 15*time.Second, "goroutines and fds back to the baseline", func() bool {
			now = debugStats(t, debugAddr)
			return now.backTo(base, 1, 0)
		})
		t.Logf("bridge before sessions: %d goroutines, %d fds, RSS %.1f MiB; with sessions (sampled): %d goroutines, RSS %.1f MiB; after: %d goroutines, %d fds, RSS %.1f MiB",
			base.Goroutines, base.OpenFDs, float64(base.RSS)/(1<<20), peak.Goroutines, float64(peak.RSS)/(1<<20), now.Goroutines, now.OpenFDs, float64(now.RSS)/(1<<20))
		awaitLog(t, stderr, "the session's idle end", func(log string) bool {
			return strings.Contains(log, `"why":"idle for 10s (sessions.idle_timeout)"`)
		})
		stopBridge(t, e, cs, pid)
	})
}

// TestSessionsBelongToTheirPrincipal: over HTTP with --principals, a
// session belongs to the principal whose token made it, not to a
// connection: its client's next connection finds it (the session outlives
// the connection), another principal naming it is refused with a clear
// error (no run in it, no reset of it, no empty session of that name),
// and its own sessions are its own.
func TestSessionsBelongToTheirPrincipal(t *testing.T) {
	forEngines(t, aboveEngine("which principal a session belongs to"), func(t *testing.T, e *engine) {
		const alice, bob = "alice-0123456789abcdef0123456789abcdef", "bob-0123456789abcdef0123456789abcdef01"
		args, _ := serveArgs(e)
		addr, pid := startHTTPBridge(t, e, append(withoutSandboxFlags(args), "--policy", sessionPolicy(t, e, "10m"),
			"--principals", principalsFile(t, "alice "+alice, "bob "+bob)))
		first, err := connectAs(t, addr, alice)
		if err != nil {
			t.Fatal(err)
		}
		b, err := connectAs(t, addr, bob)
		if err != nil {
			t.Fatal(err)
		}
		if out, text := sessionCall(t, first, map[string]any{"code": "secret = 'alice'", "session": "shared"}); out.Status != "ok" {
			t.Fatalf("alice: %+v %s", out, text)
		}
		// Alice's client goes; her session stays, and her next connection
		// finds it.
		first.Close()
		again, err := connectAs(t, addr, alice)
		if err != nil {
			t.Fatal(err)
		}
		if out, _ := sessionCall(t, again, map[string]any{"code": "print(secret)", "session": "shared"}); out.Stdout != "alice\n" {
			t.Errorf("alice's next connection: %+v", out)
		}
		for what, call := range map[string]map[string]any{
			"a call":           {"code": "print(globals().get('secret'))", "session": "shared"},
			"a reset":          {"code": "", "session": "shared", "reset": true},
			"a reset and code": {"code": "print(1)", "session": "shared", "reset": true},
		} {
			if out, text := sessionCall(t, b, call); out.Status != "invalid" || out.Stdout != "" || !strings.Contains(out.Message, `session "shared" is held by another principal`) {
				t.Errorf("bob's %s in alice's session: %+v %s", what, out, text)
			}
		}
		if out, _ := sessionCall(t, b, map[string]any{"code": "print(globals().get('secret'))", "session": "bobs"}); out.Stdout != "None\n" {
			t.Errorf("bob's own session: %+v", out)
		}
		if out, _ := sessionCall(t, again, map[string]any{"code": "print(secret)", "session": "shared"}); out.Stdout != "alice\n" {
			t.Errorf("alice's session after bob's tries: %+v", out)
		}
		waitFor(t, 30*time.Second, "two session containers", func() bool { return len(ownedIDs(t, e, pid)) == 2 })
	})
}

// checkSessionAudit finds, in the bridge's log, a tool_call record of the
// echo call whose run's run_start record names a session, the same
// session as the calls of session a before it.
func checkSessionAudit(t *testing.T, log string) {
	t.Helper()
	sessionOf := map[string]string{} // run id -> session id
	var echoRun string
	for _, line := range strings.Split(log, "\n") {
		var rec struct {
			Audit   string `json:"audit"`
			Event   string `json:"event"`
			RunID   string `json:"run_id"`
			Session string `json:"session"`
			Server  string `json:"server"`
			Tool    string `json:"tool"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Audit != "bridge" {
			continue
		}
		switch {
		case rec.Event == "run_start":
			sessionOf[rec.RunID] = rec.Session
		case rec.Event == "tool_call" && rec.Server == "misbehave" && rec.Tool == "echo":
			echoRun = rec.RunID
		}
	}
	if echoRun == "" {
		t.Fatalf("no tool_call audit record for misbehave/echo:\n%s", log)
	}
	id := sessionOf[echoRun]
	if id == "" {
		t.Fatalf("the echo call's run %s has no session in its run_start record:\n%s", echoRun, log)
	}
	n := 0
	for _, s := range sessionOf {
		if s == id {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d runs audited with session %s, want the 3 calls of session a", n, id)
	}
}

// awaitLog waits until the bridge's log (its stderr, as far as written)
// satisfies cond, and returns it; the test fails with the log if it does
// not within 10 s. The bridge writes its log from a queue, up to
// logwriter.Linger behind the moment a record is made.
func awaitLog(t *testing.T, stderr *syncBuffer, what string, cond func(log string) bool) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := stderr.String()
		if cond(log) {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in the bridge's log within 10 s:\n%s", what, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// quietLog returns the bridge's log once it has not grown for 50 ms (ten
// times logwriter.Linger), or after 10 s: what a check that something is
// not in the log must read.
func quietLog(stderr *syncBuffer) string {
	log, since := stderr.String(), time.Now()
	for deadline := since.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if now := stderr.String(); len(now) != len(log) {
			log, since = now, time.Now()
		} else if time.Since(since) >= 50*time.Millisecond {
			break
		}
	}
	return log
}

// waitFor polls cond every 100 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSessionsResetWithCode: with the warm pool on, reset: true with code
// ends the session and runs the code in a new one of that name, and the
// result says so (session_ended, and a line of its text); the new session
// goes on.
func TestSessionsResetWithCode(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		pol := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(pol, []byte("version: 1\n"+sandboxSection(e)+"pool:\n  size: 1\nsessions:\n  enabled: true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cs, _, _ := connectStdioArgs(t, e, nil, "--policy", pol)
		if out, text := sessionCall(t, cs, map[string]any{"code": "x = 1", "session": "s"}); out.Status != "ok" || out.SessionEnded != "" {
			t.Fatalf("first call: %+v %s", out, text)
		}
		out, text := sessionCall(t, cs, map[string]any{"code": "print(globals().get('x'))\ny = 2", "session": "s", "reset": true})
		want := `reset: session "s" was ended, its state is lost; the code ran in a new session "s"`
		if out.Status != "ok" || out.Stdout != "None\n" || out.SessionEnded != want || !strings.Contains(text, "["+want+"]") {
			t.Fatalf("reset with code: %+v\n%s", out, text)
		}
		if out, text := sessionCall(t, cs, map[string]any{"code": "print(y)", "session": "s"}); out.Stdout != "2\n" || out.SessionEnded != "" {
			t.Fatalf("the call after the reset: %+v %s", out, text)
		}
	})
}
