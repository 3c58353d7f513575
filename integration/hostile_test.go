package integration

// TestHostile runs code that attacks the bridge and the sandbox against one
// `bridge serve` per engine, and proves each attack contained: by what the
// run returned, by the bridge's memory and goroutines while it ran (from
// serve --debug-addr), and by the next run working.
//
// The code runs in the runner's own process, so it reaches the runner's
// authenticated relay connection: `_bridge_relay.query.__self__` is the
// runner's Relay object, whose send/send_frame write frames on it. Nothing
// the runner checks protects the bridge (docs/security.md); these cases
// speak the protocol (docs/protocol.md) the way hostile code would.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// hostileRSSBound is the most resident memory the bridge may have at any
	// time during a case. A bridge at rest is ~25-40 MB; the answers it may
	// hold for one run are bounded at 32 MiB (sandbox/budget.go), so an
	// attack that grew the bridge beyond its bounds shows up here.
	hostileRSSBound = 100 << 20
	// After each case the bridge's goroutines and open fds must come back
	// to within these margins of the baseline, within hostileSettle. The
	// margins allow for idle HTTP connections to the engine, which its
	// client keeps or drops on its own schedule (two goroutines and one fd
	// each).
	hostileGoroutineMargin = 6
	hostileFDMargin        = 4
	hostileSettle          = 10 * time.Second
	// hostileCPUBound is the share of one core the bridge may use while
	// idle after a case: an attack must not leave it spinning.
	hostileCPUBound = 0.5
	// Secrets in the environment of the bridge and of an upstream; no run
	// may see them.
	hostileBridgeSecret   = "s3cr3t-host"
	hostileUpstreamSecret = "s3cr3t-up"
	// hostileDenyReason is the policy's reason for denying misbehave/crash.
	hostileDenyReason = "hostile test: crashing the upstream is not allowed"
)

// bigResultsBug is the bug "big tool results, unread" shows on every engine.
const bigResultsBug = "the bridge's memory is not bounded by the answers it holds: each tool result in flight costs it " +
	"many times its size (one 4 MB result read normally takes the bridge from ~30 MB to ~110 MB RSS), and nothing bounds " +
	"the results in flight of a run (up to 64, each up to 8 MiB) nor of all runs; the 32 MiB/128 MiB budgets count only " +
	"framed answers waiting to be written, after they were built"

// bigFrameBug is the bug "stdout frame of 16 MiB" shows on every engine.
const bigFrameBug = "one frame from the runner costs the bridge about five times its size while it is decoded (a 16 MiB " +
	"stdout frame, which the protocol allows, takes it from ~30 MB to ~110 MB RSS, heap ~83 MB; 8 MiB: ~70 MB RSS), " +
	"and a run's decoder keeps its largest frame buffer until the run ends"

// hostileRun is what one run_python call returned.
type hostileRun struct {
	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	StdoutCut  int64  `json:"stdout_cut"`
	StderrCut  int64  `json:"stderr_cut"`
	Message    string `json:"message"`

	text    string        // the text content the agent reads
	wall    time.Duration // from the call to its answer
	timeout int           // the timeout_seconds it was given
	// lines are the code's verdict lines: "key value..." by key.
	lines map[string]string
}

// String sums up the run for failure messages.
func (r hostileRun) String() string {
	out := r.Stdout
	if len(out) > 2000 {
		out = out[:2000] + fmt.Sprintf("... [%d bytes]", len(r.Stdout))
	}
	errs := r.Stderr
	if len(errs) > 2000 {
		errs = errs[len(errs)-2000:]
	}
	return fmt.Sprintf("status %q exit %d after %s, message %q, stdout_cut %d\nstdout:\n%s\nstderr:\n%s",
		r.Status, r.ExitCode, r.wall.Round(time.Millisecond), r.Message, r.StdoutCut, out, errs)
}

// summary is the run's message, or its verdict lines, on one short line.
func (r hostileRun) summary() string {
	s := r.Message
	if len(r.Stdout) <= 4096 && len(r.lines) > 0 && len(r.lines) <= 20 {
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(r.lines)) {
			fmt.Fprintf(&b, "%s=%s ", k, r.lines[k])
		}
		s = strings.TrimSpace(b.String())
	} else if s == "" {
		s = fmt.Sprintf("stdout %d bytes, %d cut", len(r.Stdout), r.StdoutCut)
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// verdict collects what a case's check found wrong.
type verdict struct{ problems []string }

func (v *verdict) errorf(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

// want checks the verdict line key against the allowed values.
func (v *verdict) want(r hostileRun, key string, allowed ...string) {
	got, ok := r.lines[key]
	switch {
	case !ok:
		v.errorf("no verdict line %q", key)
	case !slices.Contains(allowed, got):
		v.errorf("%s: %q, want one of %q", key, got, allowed)
	}
}

// status checks the run's status.
func (v *verdict) status(r hostileRun, want string) {
	if r.Status != want {
		v.errorf("status %q, want %q", r.Status, want)
	}
}

// message checks that the run's message contains each of parts.
func (v *verdict) message(r hostileRun, parts ...string) {
	for _, p := range parts {
		if !strings.Contains(r.Message, p) {
			v.errorf("message %q lacks %q", r.Message, p)
		}
	}
}

// within checks that the run ended within its own timeout, container start
// and removal included: an attack on the relay must end the run early, not
// ride out its timeout.
func (v *verdict) within(r hostileRun) {
	if limit := time.Duration(r.timeout) * time.Second; r.wall >= limit {
		v.errorf("the run took %s: it should have ended before its %s timeout", r.wall.Round(time.Millisecond), limit)
	}
}

// hostileCase is one attack.
type hostileCase struct {
	name    string
	timeout int // the run's timeout_seconds
	// limits: the case needs an engine that enforces memory and pids
	// limits (the rootless engine on cgroup v1 cannot).
	limits bool
	code   string
	check  func(v *verdict, r hostileRun)
	// after checks the host once the case's run has ended.
	after func(v *verdict)
	// bug marks a known bug of the bridge, by engine name. The case still
	// runs and is checked: if its check fails it is skipped with this
	// text, and if it passes it fails, so that the mark goes once fixed.
	bug map[string]string
}

// hostileEnv is what the cases' code needs to know of the host.
type hostileEnv struct {
	debugPort string
	record    string // the misbehave upstream's record of the calls it received
}

// relayPrelude gives a case's code the runner's own relay connection.
const relayPrelude = `
import errno, json, os, socket, struct, sys, time
import _bridge_relay
relay = _bridge_relay.query.__self__  # the runner's Relay: its socket is authenticated
sock = relay._sock

def frame(payload):
    if not isinstance(payload, bytes):
        payload = json.dumps(payload).encode()
    return struct.pack(">I", len(payload)) + payload

def deafen():
    # The runner's reader thread takes this lock after each frame it reads:
    # held here, the thread stops after at most one answer, and the
    # bridge's answers pile up unread.
    relay._pending_lock.acquire()

def initial_env(name, default):
    # The runner took these out of os.environ; the process's initial
    # environment still has them (docs/security.md says so).
    for kv in open("/proc/self/environ", "rb").read().split(b"\0"):
        k, _, v = kv.partition(b"=")
        if k == name.encode():
            return v.decode()
    return default

def ename(e):
    return errno.errorcode.get(e.errno, type(e).__name__) if isinstance(e, OSError) and e.errno else type(e).__name__
`

// hostileNextCode runs after every case: the bridge still runs code, and
// the new container's /tmp and /dev/shm are empty.
const hostileNextCode = `import os
print(6*7)
print(len(os.listdir("/tmp")), len(os.listdir("/dev/shm")))`

func hostileCases(env hostileEnv) []hostileCase {
	fill := func(code string) string {
		return strings.NewReplacer("{{DEBUG_PORT}}", env.debugPort).Replace(code)
	}
	relayCode := func(code string) string { return relayPrelude + fill(code) }
	// stalled: the bridge cut the runner off for not reading, long before
	// the run's timeout.
	stalled := func(v *verdict, r hostileRun) {
		v.status(r, "error")
		v.message(r, "stopped reading the bridge's answers")
		v.within(r)
	}
	// protocolError: the bridge ended the run at once for a bad frame.
	protocolError := func(parts ...string) func(v *verdict, r hostileRun) {
		return func(v *verdict, r hostileRun) {
			v.status(r, "error")
			v.message(r, append([]string{"relay protocol error"}, parts...)...)
			v.within(r)
		}
	}
	const stdout16M = 16<<20 - 64 // data of the largest stdout frame case 7b sends

	return []hostileCase{
		// --- the relay: flooding, stalling, malformed frames -------------
		{
			// The attack: requests with fresh ids, answers never read.
			name: "query flood, answers unread", timeout: 30,
			code: relayCode(`
deafen()
i = 1000
while True:
    relay.send({"type": "query", "id": i, "op": "servers", "args": {}})
    i += 1
`),
			check: stalled,
		},
		{
			// An id still in flight (the sleep) reused: the bridge cannot
			// tell the answers apart, so it ends the run.
			name: "duplicate ids", timeout: 20,
			code: relayCode(`
relay.send({"type": "tool_call", "id": 7, "server": "misbehave", "tool": "sleep", "args": {"ms": 15000}})
for _ in range(10000):
    relay.send({"type": "query", "id": 7, "op": "servers", "args": {}})
time.sleep(60)
`),
			check: protocolError("request id 7 is already in flight"),
		},
		{
			name: "random bytes in a frame", timeout: 20,
			code: relayCode(`
import random
junk = random.Random(4).randbytes(4096)
relay.send_frame(frame(junk))
time.sleep(60)
`),
			check: protocolError(),
		},
		{
			// Half a frame, then nothing: the bridge waits for the rest
			// without a deadline of its own, so the run's timeout ends it.
			name: "truncated frame, then silence", timeout: 3,
			code: relayCode(`
relay.send_frame(struct.pack(">I", 100) + b'{"type": "std')
time.sleep(60)
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "timeout")
				v.message(r, "timed out after 3s")
			},
		},
		{
			name: "frame header claiming 2 GiB", timeout: 20,
			code: relayCode(`
relay.send_frame(struct.pack(">I", 2**31) + b"x" * 65536)
time.sleep(60)
`),
			check: protocolError("frame of 2147483648 bytes (allowed 1 to 16777216)"),
		},
		{
			name: "frame of 17 MiB", timeout: 20,
			code: relayCode(`
data = b"x" * (17 << 20)
relay.send_frame(frame(b'{"type": "stdout", "data": "' + data + b'"}'))
time.sleep(60)
`),
			check: protocolError("bytes (allowed 1 to 16777216)"),
		},
		{
			name: "tiny stdout frames flood", timeout: 30,
			code: relayCode(`
for _ in range(200000):
    relay.send({"type": "stdout", "data": "z"})
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if len(r.Stdout) != 64<<10 || int64(len(r.Stdout))+r.StdoutCut != 200000 {
					v.errorf("stdout %d bytes + %d cut, want 65536 + %d", len(r.Stdout), r.StdoutCut, 200000-64<<10)
				}
			},
		},
		{
			// encoding/json refuses nesting beyond 10000 levels.
			name: "deeply nested JSON", timeout: 20,
			code: relayCode(`
relay.send_frame(frame(b'{"type": "stdout", "data": ' + b"[" * 1000000 + b"]" * 1000000 + b"}"))
time.sleep(60)
`),
			check: protocolError(),
		},
		{
			name: "unknown frame type", timeout: 20,
			code: relayCode(`
relay.send({"type": "shell", "cmd": "id"})
time.sleep(60)
`),
			check: protocolError(),
		},
		{
			name: "frames after a forged exit", timeout: 20,
			code: relayCode(`
relay.send({"type": "exit", "status": "ok", "exit_code": 0, "stdout_cut": 0, "stderr_cut": 0})
relay.send({"type": "stdout", "data": "after exit"})
time.sleep(60)
`),
			check: protocolError("stdout after exit"),
		},
		{
			// The relay listener is closed once the runner connects: every
			// new connection is refused, and the bridge accepts none.
			name: "thousands of new connections", timeout: 30,
			code: relayCode(`
path = initial_env("BRIDGE_RELAY_SOCKET", "/run/bridge/relay.sock")
print("path", path)
counts = {}
for _ in range(3000):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        k = "connected"
    except OSError as e:
        k = ename(e)
    finally:
        s.close()
    counts[k] = counts.get(k, 0) + 1
print("outcomes", " ".join(sorted(counts)))
print("total", sum(counts.values()))
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "path", "/run/bridge/relay.sock")
				v.want(r, "outcomes", "ENOENT", "ECONNREFUSED", "ECONNREFUSED ENOENT")
				v.want(r, "total", "3000")
			},
		},
		{
			name: "second hello", timeout: 20,
			code: relayCode(`
relay.send({"type": "hello", "version": 2, "token": initial_env("BRIDGE_RELAY_TOKEN", "x"), "python": "3"})
time.sleep(60)
`),
			check: protocolError("second hello"),
		},
		{
			// A new connection, with the right token or a forged one, and
			// a socket of the code's own where the bridge's was.
			name: "forged token, new connection", timeout: 20,
			code: relayCode(`
path = initial_env("BRIDGE_RELAY_SOCKET", "/run/bridge/relay.sock")
for label, token in (("real_token", initial_env("BRIDGE_RELAY_TOKEN", "")), ("forged_token", "0" * 32)):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(frame({"type": "hello", "version": 2, "token": token, "python": "3"}))
        print(label, "answered", s.recv(64))
    except OSError as e:
        print(label, ename(e))
    s.close()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.bind(path)
    print("bind", "OK")
except OSError as e:
    print("bind", ename(e))
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "real_token", "ENOENT", "ECONNREFUSED")
				v.want(r, "forged_token", "ENOENT", "ECONNREFUSED")
				v.want(r, "bind", "EROFS", "EACCES")
			},
		},
		{
			// Names that look like paths or smuggle control characters are
			// just unknown names, answered without reaching the upstream.
			name: "path tricks in names", timeout: 20,
			code: `
import mcp_tools
for i, (server, tool) in enumerate([
        ("misbehave", "../../etc/passwd"), ("misbehave", "a/../b"), ("misbehave", "ec\x00ho"),
        ("misbehave", "echo\n"), ("misbehave", "echo/../crash"), ("misbehave", "misbehave__echo"),
        ("../misbehave", "echo"), ("misbehave\x00", "echo"), ("misbehave/..", "echo"),
        ("misbehave", "x" * 256)]):
    try:
        mcp_tools.call(server, tool, message="hi")
        print("name%d" % i, "called")
    except mcp_tools.MCPToolsError as e:
        print("name%d" % i, type(e).__name__)
print("echo", mcp_tools.call("misbehave", "echo", message="still fine")["message"])
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				for i := range 10 {
					want := "UnknownToolError"
					if i >= 6 && i <= 8 {
						want = "UnknownServerError"
					}
					v.want(r, fmt.Sprintf("name%d", i), want)
				}
				v.want(r, "echo", "still fine")
			},
			after: func(v *verdict) {
				// docs/security.md: unknown names never reach a server.
				tools := recordedToolNames(env.record)
				for _, bad := range []string{"../../etc/passwd", "a/../b", "ec\x00ho", "echo\n", "echo/../crash", "misbehave__echo", strings.Repeat("x", 256)} {
					if slices.Contains(tools, bad) {
						v.errorf("the upstream received a call of %q", bad)
					}
				}
			},
		},
		{
			// Over the decoder's 256 bytes: a protocol error that ends the
			// run with a clear message, not a crash of the bridge.
			name: "10 KB server name", timeout: 20,
			code: `
import mcp_tools
mcp_tools.call("s" * 10240, "echo", message="hi")
`,
			check: protocolError("server must be 1 to 256 bytes"),
		},
		{
			// Each unknown name makes the bridge look for the closest
			// ones: host work, metered per run.
			name: "10,000 unknown 256-byte tool names", timeout: 60,
			code: `
import mcp_tools, time
kinds = {}
t0 = time.monotonic()
for i in range(10000):
    name = "%08d" % i + "abcdefgh" * 31
    try:
        mcp_tools.call("misbehave", name)
        k = "called"
    except mcp_tools.MCPToolsError as e:
        k = type(e).__name__
    kinds[k] = kinds.get(k, 0) + 1
print("kinds", " ".join(sorted(kinds)))
print("calls", sum(kinds.values()))
print("seconds", round(time.monotonic() - t0))
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "kinds", "UnknownToolError", "LimitExceededError UnknownToolError", "LimitExceededError")
				v.want(r, "calls", "10000")
			},
		},
		{
			name: "1 KiB searches in a loop", timeout: 60,
			code: `
import mcp_tools
q = " ".join("word%d" % i for i in range(300))[:1024]
for i in range(20000):
    try:
        mcp_tools.search(q, limit=50)
    except mcp_tools.LimitExceededError as e:
        print("search", "limit")
        print("message_has_budget", "host time" in str(e))
        break
else:
    print("search", "finished")
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "search", "limit", "finished")
				if r.lines["search"] == "limit" {
					v.want(r, "message_has_budget", "True")
				}
			},
		},
		{
			name: "tool denied by policy", timeout: 20,
			code: `
import mcp_tools
try:
    mcp_tools.call("misbehave", "crash")
    print("crash", "called")
except mcp_tools.ToolDeniedError as e:
    print("crash", str(e))
print("echo", mcp_tools.call("misbehave", "echo", message="alive")["message"])
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "crash", hostileDenyReason)
				v.want(r, "echo", "alive")
			},
			after: func(v *verdict) {
				if slices.Contains(recordedToolNames(env.record), "crash") {
					v.errorf("the denied call reached the upstream")
				}
			},
		},
		{
			// Calls that never answer, abandoned when the code ends: the
			// run ends on time and the bridge drops them all.
			name: "64 hanging tool calls abandoned", timeout: 20,
			code: `
import asyncio, mcp_tools
tasks = [asyncio.ensure_future(mcp_tools.acall("misbehave", "hang")) for _ in range(64)]
await asyncio.sleep(1)
print("pending", sum(not t.done() for t in tasks))
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "pending", "64")
				v.within(r)
			},
		},

		// Last, these two: the bridge does not give back to the OS at once
		// the memory they make it take, and the garbage they leave raises its
		// next GC target, which would count against later cases.
		{
			// The largest frame allowed, as stdout: the bridge keeps the
			// output limit and counts the rest.
			name: "stdout frame of 16 MiB", timeout: 20,
			code: relayCode(fmt.Sprintf(`
relay.send_frame(frame(b'{"type":"stdout","data":"' + b"y" * %d + b'"}'))
`, stdout16M)),
			bug: map[string]string{"docker": bigFrameBug, "podman": bigFrameBug, "podman-rootless": bigFrameBug},
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if len(r.Stdout) != 64<<10 || int64(len(r.Stdout))+r.StdoutCut != stdout16M {
					v.errorf("stdout %d bytes + %d cut, want 65536 + %d", len(r.Stdout), r.StdoutCut, stdout16M-64<<10)
				}
			},
		},
		{
			name: "big tool results, unread", timeout: 60,
			code: relayCode(`
deafen()
i = 1000
while True:
    relay.send({"type": "tool_call", "id": i, "server": "misbehave", "tool": "big", "args": {"bytes": 4000000}})
    i += 1
`),
			check: stalled,
			bug:   map[string]string{"docker": bigResultsBug, "podman": bigResultsBug, "podman-rootless": bigResultsBug},
		},
	}
}

// recordedToolNames lists the tools the misbehave upstream was called with.
func recordedToolNames(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		var rec struct {
			Tool string `json:"tool"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Tool != "" {
			names = append(names, rec.Tool)
		}
	}
	return names
}

// hostileCall runs code with timeout_seconds and returns what came back.
func hostileCall(t *testing.T, cs *mcp.ClientSession, code string, timeoutS int) hostileRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeoutS)*time.Second+2*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python",
		Arguments: map[string]any{"code": code, "timeout_seconds": timeoutS}})
	if err != nil {
		t.Fatalf("tools/call: %v", err)
	}
	r := hostileRun{wall: time.Since(start), timeout: timeoutS}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	r.text = contentText(res)
	if res.IsError != (r.Status != "ok") {
		t.Errorf("isError %v with status %q", res.IsError, r.Status)
	}
	r.lines = map[string]string{}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if line == "" {
			continue
		}
		k, val, _ := strings.Cut(line, " ")
		r.lines[k] = val
	}
	return r
}

// hostileRow is one line of the summary table.
type hostileRow struct {
	name, status, result string
	wall                 time.Duration
	peak                 bridgeStats
	settled              bridgeStats
}

func TestHostile(t *testing.T) {
	// The bridge's own environment carries a secret; so does the upstream's.
	t.Setenv("BRIDGE_TEST_SECRET", hostileBridgeSecret)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	forEachEngine(t, func(t *testing.T, e *engine) {
		engineStart := time.Now()
		dir := t.TempDir()
		record := filepath.Join(dir, "calls.jsonl")
		servers := filepath.Join(dir, "servers.json")
		writeServers(t, servers, map[string]any{
			"misbehave": map[string]any{"command": self, "args": []string{"--name", "misbehave", "--record", record},
				"env": map[string]string{upstreamEnv: "1", "UPSTREAM_SECRET": hostileUpstreamSecret}},
		})
		policyFile := filepath.Join(dir, "policy.yaml")
		policy := "version: 1\n" + sandboxSection(e) + "tools:\n  rules:\n    - server: misbehave\n      tool: crash\n      action: deny\n      reason: \"" + hostileDenyReason + "\"\n"
		if err := os.WriteFile(policyFile, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
		debugAddr := freeLoopbackAddr(t)
		_, port, _ := net.SplitHostPort(debugAddr)
		cs, pid, stderr := connectStdioArgs(t, e, nil, "--servers-config", servers, "--policy", policyFile, "--debug-addr", debugAddr)
		w := watchStats(t, debugAddr)

		// Warm up: the engine connection, the upstream, a run of each
		// kind; then the baseline.
		if r := hostileCall(t, cs, "import mcp_tools\nprint(mcp_tools.call('misbehave', 'echo', message='up')['message'])", 30); r.Status != "ok" || r.Stdout != "up\n" {
			t.Fatalf("warm-up: %s", r)
		}
		if r := hostileCall(t, cs, hostileNextCode, 30); r.Status != "ok" || r.Stdout != "42\n0 0\n" {
			t.Fatalf("warm-up: %s", r)
		}
		time.Sleep(time.Second)
		base, err := w.read()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("baseline: RSS %.1f MB, heap %.1f MB, %d goroutines, %d fds", mb(base.RSS), mb(int64(base.HeapAlloc)), base.Goroutines, base.OpenFDs)
		if base.RSS >= hostileRSSBound {
			t.Fatalf("the bridge has %.1f MB resident before any attack", mb(base.RSS))
		}

		env := hostileEnv{debugPort: port, record: record}
		var rows []hostileRow
		for _, c := range hostileCases(env) {
			row := hostileRow{name: c.name}
			t.Run(c.name, func(t *testing.T) {
				defer func() {
					row.result = "PASS"
					switch {
					case t.Failed():
						row.result = "FAIL"
					case t.Skipped():
						row.result = "SKIP"
					}
					rows = append(rows, row)
				}()
				if c.limits && !e.enforced {
					t.Skip("this engine cannot enforce memory and pids limits (TestRootlessPodman checks that it says so)")
				}
				w.reset()
				r := hostileCall(t, cs, c.code, c.timeout)
				row.status, row.wall = r.Status, r.wall
				var v verdict
				c.check(&v, r)
				if c.after != nil {
					c.after(&v)
				}

				// The bridge: no container left and the next run works
				// (failures whatever the case's marks say), and it is back
				// to its baseline, bounded all along and not spinning.
				if left := containersOf(t, e, pid); len(left) != 0 {
					t.Errorf("container(s) of the bridge left after the run: %v", left)
				}
				if next := hostileCall(t, cs, hostileNextCode, 30); next.Status != "ok" || next.Stdout != "42\n0 0\n" {
					t.Errorf("the next run: %s", next)
				}
				settled, ok := settle(w, base)
				row.settled = settled
				peak, err := w.window()
				row.peak = peak
				if err != nil {
					t.Errorf("polling the bridge's stats: %v", err)
				}
				if peak.RSS >= hostileRSSBound {
					v.errorf("the bridge's RSS peaked at %.1f MB (bound %d MB; heap %.1f MB)", mb(peak.RSS), hostileRSSBound>>20, mb(int64(peak.HeapAlloc)))
				}
				if !ok {
					v.errorf("the bridge did not settle within %s: %d goroutines, %d fds (baseline %d, %d)\n%s",
						hostileSettle, settled.Goroutines, settled.OpenFDs, base.Goroutines, base.OpenFDs, w.goroutineDump(16<<10))
				}
				if share, err := cpuShare(pid, 500*time.Millisecond); err != nil {
					t.Errorf("the bridge's CPU time: %v", err)
				} else if share > hostileCPUBound {
					v.errorf("the bridge uses %.0f%% of a core after the case", share*100)
				}
				t.Logf("%s: status %s in %s; bridge peak RSS %.1f MB, heap %.1f MB, %d goroutines; settled at %d goroutines, %d fds; %s",
					c.name, r.Status, r.wall.Round(time.Millisecond), mb(peak.RSS), mb(int64(peak.HeapAlloc)), peak.Goroutines, settled.Goroutines, settled.OpenFDs, r.summary())

				bug := c.bug[e.name]
				switch {
				case len(v.problems) > 0 && bug != "":
					t.Skipf("BUG: %s\nobserved: %s\n%s", bug, strings.Join(v.problems, "; "), r)
				case len(v.problems) > 0:
					t.Errorf("not contained: %s\n%s", strings.Join(v.problems, "\n"), r)
				case bug != "":
					t.Errorf("marked as a known bug on %s, but contained now: remove the mark (%s)", e.name, bug)
				}
			})
		}

		logs := stderr.String()
		for _, s := range []string{hostileBridgeSecret, hostileUpstreamSecret} {
			if strings.Contains(logs, s) {
				t.Errorf("the secret %q is in the bridge's log", s)
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "summary on %s (baseline RSS %.1f MB, %d goroutines, %d fds; %s in all):\n", e.name, mb(base.RSS), base.Goroutines, base.OpenFDs, time.Since(engineStart).Round(time.Second))
		fmt.Fprintf(&b, "%-36s %-8s %-7s %9s %9s %8s %8s %6s\n", "case", "status", "result", "duration", "peak RSS", "peak heap", "peak gor", "settled")
		for _, r := range rows {
			fmt.Fprintf(&b, "%-36s %-8s %-7s %8.1fs %6.1f MB %6.1f MB %8d %6d\n", r.name, r.status, r.result, r.wall.Seconds(), mb(r.peak.RSS), mb(int64(r.peak.HeapAlloc)), r.peak.Goroutines, r.settled.Goroutines)
		}
		t.Log(b.String())
	})
}

// settle waits up to hostileSettle for the bridge's goroutines and open fds
// to come back to within the margins of base, and returns the last stats.
func settle(w *statsWatcher, base bridgeStats) (bridgeStats, bool) {
	deadline := time.Now().Add(hostileSettle)
	for {
		s, err := w.read()
		if err == nil && s.Goroutines <= base.Goroutines+hostileGoroutineMargin && s.OpenFDs <= base.OpenFDs+hostileFDMargin {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }
