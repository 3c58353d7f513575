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
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/sandbox"
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

// fillCase writes 1 MiB pieces into dir until the write fails: both
// writable places are tmpfs of 64 MiB, so the code must meet ENOSPC there.
func fillCase(dir, key string) hostileCase {
	return hostileCase{
		name: "fill " + dir, timeout: 30,
		code: fmt.Sprintf(`
import errno
chunk = b"x" * (1 << 20)
n = 0
try:
    with open(%q, "wb") as f:
        while True:
            f.write(chunk)
            f.flush()
            n += 1
except OSError as e:
    print(%q, errno.errorcode[e.errno])
print("mib_le_64", n <= 64)
`, dir+"/fill", key),
		check: func(v *verdict, r hostileRun) {
			v.status(r, "ok")
			v.want(r, key, "ENOSPC")
			v.want(r, "mib_le_64", "True")
		},
	}
}

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
	// before plants what the case needs on the host, just before its run.
	before func(t *testing.T)
	// bug marks a known bug of the bridge, by engine name. The case still
	// runs and is checked: if its check fails it is skipped with this
	// text, and if it passes it fails, so that the mark goes once fixed.
	bug map[string]string
	// rss, when set, replaces hostileRSSBound for this case: a bound the
	// bridge's own configured limits imply, said where it is set.
	rss int64
}

// hostileEnv is what the cases' code needs to know of the host.
type hostileEnv struct {
	debugPort    string
	abstractName string // an abstract unix socket the test listens on, without the leading NUL
	record       string // the misbehave upstream's record of the calls it received
	yard         yardPlant
	// gvisor: the engine is runsc, whose kernel (gVisor's) answers some
	// refusals with other errnos, and where a fork bomb meets the memory
	// limit first.
	gvisor bool
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

// syscallPrelude calls system calls by number through libc.
const syscallPrelude = `
import ctypes, errno, os, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {
    "x86_64": dict(mount=165, umount2=166, setuid=105, chroot=161, bpf=321, perf_event_open=298,
                   init_module=175, reboot=169, sethostname=170, pivot_root=155, swapon=167,
                   kexec_load=246, open_by_handle_at=304, ptrace=101, unshare=272, keyctl=250, add_key=248),
    "aarch64": dict(mount=40, umount2=39, setuid=146, chroot=51, bpf=280, perf_event_open=241,
                    init_module=105, reboot=142, sethostname=161, pivot_root=41, swapon=224,
                    kexec_load=104, open_by_handle_at=265, ptrace=117, unshare=97, keyctl=219, add_key=217),
}[platform.machine()]

def sc(name, *args):
    argv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    r = libc.syscall(ctypes.c_long(NR[name]), *argv)
    e = ctypes.get_errno()
    return "OK" if r != -1 else errno.errorcode.get(e, str(e))
`

// hostileNextCode runs after every case: the bridge still runs code, and
// the new container's /tmp (but for the runner's empty outputs folder)
// and /dev/shm are empty.
const hostileNextCode = `import os
print(6*7)
print(len([n for n in os.listdir("/tmp") if n != "outputs"]) + len(os.listdir("/tmp/outputs")), len(os.listdir("/dev/shm")))`

// okFailures are the errnos a refused operation may fail with.
var okFailures = []string{"EPERM", "EACCES", "EROFS", "ENOSYS"}

func hostileCases(env hostileEnv) []hostileCase {
	fill := func(code string) string {
		return strings.NewReplacer("{{DEBUG_PORT}}", env.debugPort, "{{ABSTRACT}}", env.abstractName).Replace(code)
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
	// allRefused: every verdict line's value is one of okFailures (or,
	// under gVisor, an errno it answers for what it does not implement).
	refusals := okFailures
	if env.gvisor {
		refusals = append(slices.Clone(okFailures), "ENODEV", "ENOTSUP", "EOPNOTSUPP")
	}
	allRefused := func(v *verdict, r hostileRun, min int) {
		if len(r.lines) < min {
			v.errorf("%d verdict lines, want at least %d", len(r.lines), min)
		}
		for k, got := range r.lines {
			if !slices.Contains(refusals, got) {
				v.errorf("%s: %q, want one of %q", k, got, refusals)
			}
		}
	}
	// unreachable: a connect or send with no route: the host kernel says
	// the network is unreachable, gVisor's that the host is.
	unreachable := []string{"ENETUNREACH"}
	if env.gvisor {
		unreachable = append(unreachable, "EHOSTUNREACH")
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
		// --- files out: frames forged on the runner's connection ---------
		{
			// The exec said at most 1 MiB a file (no artifacts.dir): a file
			// announced at 1 GiB is a lie the bridge ends the run for.
			name: "file announced past exec's limit", timeout: 20,
			code: relayCode(`
relay.send({"type": "file", "id": 1, "name": "x", "size": 1 << 30})
time.sleep(60)
`),
			check: protocolError("over the 1048576 exec allowed"),
		},
		{
			name: "file bytes past the announced size", timeout: 20,
			code: relayCode(`
import base64
relay.send({"type": "file", "id": 1, "name": "x", "size": 10})
piece = base64.b64encode(b"y" * (1 << 20)).decode()
for _ in range(64):
    relay.send({"type": "file_data", "id": 1, "data": piece})
time.sleep(60)
`),
			check: protocolError("sent more than its 10 bytes"),
		},
		{
			// put is the bridge's frame: from the runner's side it is a
			// type the bridge does not read, not a way to write the host.
			name: "put frame toward the bridge", timeout: 20,
			code: relayCode(`
relay.send({"type": "put", "id": 1, "path": "../../x", "size": 1})
time.sleep(60)
`),
			check: protocolError(`unknown message type "put"`),
		},
		{
			name: "file named out of the folder", timeout: 20,
			code: relayCode(`
relay.send({"type": "file", "id": 1, "name": "../../etc/passwd", "size": 1})
time.sleep(60)
`),
			check: protocolError("empty, . or .. part"),
		},
		{
			name: "file_skip flood", timeout: 20,
			code: relayCode(`
for i in range(100000):
    relay.send({"type": "file_skip", "name": "f%d" % i, "size": 0, "reason": "too_many"})
time.sleep(60)
`),
			check: protocolError("more than 100 file_skip frames"),
		},
		{
			// Honest frames, hostile quantity: 10,000 files in the folder
			// come back as 20 and a count, and the bridge stays small.
			name: "10,000 files in the outputs folder", timeout: 60,
			code: `
for i in range(10000):
    with open(f"/tmp/outputs/f{i:05}.txt", "w") as f:
        f.write("x" * 100)
print("written")
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if !strings.Contains(r.text, "[not returned: ") || !strings.Contains(r.text, "more (structuredContent.artifacts lists them)]") {
					v.errorf("the text does not say what did not come back: %.300q", r.text)
				}
			},
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
			// The bridge answers once the runner reported and hung up,
			// without waiting for the engine to see the container end: a
			// forged report and hang-up end the run at once with what the
			// code claimed (it controls its own result anyway), and the code
			// that runs on is killed with its container, which the check for
			// leftovers after each case sees gone.
			name: "a forged exit and hang-up, then code that runs on", timeout: 30,
			code: relayCode(`
sock.sendall(frame({"type": "stdout", "data": "forged\n"}))
relay._finished = True  # the runner's reader thread then ends quietly at EOF
sock.sendall(frame({"type": "exit", "status": "ok", "exit_code": 0, "stdout_cut": 0, "stderr_cut": 0}))
sock.shutdown(socket.SHUT_RDWR)
while True:
    open("/tmp/still-running", "w").write(str(time.time()))
    time.sleep(0.05)
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if !strings.Contains(r.Stdout, "forged") {
					v.errorf("stdout %q lacks the forged line", r.Stdout)
				}
				v.within(r)
			},
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
    s = None
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        k = "connected"
    except OSError as e:
        k = ename(e)
    finally:
        if s is not None:
            s.close()
    counts[k] = counts.get(k, 0) + 1
print("outcomes", " ".join(sorted(counts)))
print("total", sum(counts.values()))
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "path", "/run/bridge/relay.sock")
				// EPERM: the runner lets the code make no unix socket.
				v.want(r, "outcomes", "EPERM", "ENOENT", "ECONNREFUSED", "ECONNREFUSED ENOENT")
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
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(frame({"type": "hello", "version": 2, "token": token, "python": "3"}))
        print(label, "answered", s.recv(64))
        s.close()
    except OSError as e:
        print(label, ename(e))
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    print("bind", "OK")
except OSError as e:
    print("bind", ename(e))
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "real_token", "EPERM", "ENOENT", "ECONNREFUSED")
				v.want(r, "forged_token", "EPERM", "ENOENT", "ECONNREFUSED")
				v.want(r, "bind", "EPERM", "EROFS", "EACCES")
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

		// --- the classics -------------------------------------------------
		{
			name: "fork bomb", timeout: 30, limits: true,
			code: `
import os, time
children = 0
try:
    while True:
        if os.fork() == 0:
            while True:
                try:
                    os.fork()
                except OSError:
                    time.sleep(0.01)
        children += 1
except OSError as e:
    print("fork_failed", e.strerror, flush=True)
    raise
`,
			check: func(v *verdict, r hostileRun) {
				if env.gvisor && r.Status == "memory" {
					// gVisor's processes are its kernel's, within the
					// sandbox's memory: the bomb meets the memory limit
					// before the process limit, and the run is killed.
					v.message(r, "memory limit")
					return
				}
				v.status(r, "error")
				v.message(r, "BlockingIOError")
				v.want(r, "fork_failed", "Resource temporarily unavailable")
			},
		},
		{
			name: "memory bomb", timeout: 30, limits: true,
			code: `
print("allocating", flush=True)
data = "x" * (2 << 30)
print("allocated", len(data))
`,
			check: func(v *verdict, r hostileRun) {
				if _, ok := r.lines["allocated"]; ok {
					v.errorf("2 GiB allocated under a 512 MiB limit")
				}
				switch {
				case r.Status == "memory" && strings.Contains(r.Message, "memory limit"):
				case r.Status == "error" && strings.Contains(r.Message, "MemoryError"):
				default:
					v.errorf("status %q, message %q: want memory, or an error with MemoryError", r.Status, r.Message)
				}
			},
		},
		fillCase("/tmp", "tmp"),
		fillCase("/dev/shm", "shm"),
		{
			name: "CPU spin past the timeout", timeout: 3,
			code: "print('spinning', flush=True)\nwhile True: pass",
			check: func(v *verdict, r hostileRun) {
				v.status(r, "timeout")
				v.message(r, "timed out after 3s")
				v.want(r, "spinning", "")
			},
		},
		{
			name: "SIGTERM ignored", timeout: 3,
			code: `
import signal
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, signal.SIG_IGN)
print("ignoring", flush=True)
while True:
    pass
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "timeout")
				v.want(r, "ignoring", "")
			},
		},
		{
			// A daemon that outlives the code; the container goes anyway
			// (TestHostile checks after every case that none is left).
			name: "orphaned daemon", timeout: 20,
			code: `
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
    os._exit(0)
os.wait()
print("daemon", "left")
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "daemon", "left")
				v.within(r)
			},
		},
		{
			name: "zombie flood", timeout: 30, limits: true,
			code: `
import errno, os
n = 0
try:
    for _ in range(5000):
        if os.fork() == 0:
            os._exit(0)
        n += 1
    print("zombies", "all")
except OSError as e:
    print("zombies", errno.errorcode[e.errno])
print("under_pids_limit", n < 128)
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "zombies", "EAGAIN")
				v.want(r, "under_pids_limit", "True")
			},
		},
		{
			// 127.0.0.1:DEBUG_PORT is the bridge's own debug endpoint on
			// the host's loopback: the container's loopback is another.
			name: "TCP out", timeout: 30,
			code: fill(`
import errno, os, socket
print("interfaces", " ".join(sorted(os.listdir("/sys/class/net"))))
def tcp(label, addr, family=socket.AF_INET):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, type(e).__name__))
        return
    s.settimeout(5)
    try:
        s.connect(addr)
        print(label, "connected")
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, type(e).__name__))
    s.close()
tcp("public", ("1.1.1.1", 53))
tcp("host_loopback_debug", ("127.0.0.1", {{DEBUG_PORT}}))
tcp("docker_gateway", ("172.17.0.1", 2375))
tcp("podman_gateway", ("10.88.0.1", 22))
tcp("ipv6_public", ("2606:4700:4700::1111", 53), socket.AF_INET6)
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if r.lines["interfaces"] == "eth0 lo" {
					// A Kubernetes pod has the CNI's interface: the runner
					// refuses the code every IP socket instead.
					for _, k := range []string{"public", "host_loopback_debug", "docker_gateway", "podman_gateway", "ipv6_public"} {
						v.want(r, k, "EPERM")
					}
					return
				}
				v.want(r, "interfaces", "lo")
				v.want(r, "public", unreachable...)
				v.want(r, "host_loopback_debug", "ECONNREFUSED")
				v.want(r, "docker_gateway", unreachable...)
				v.want(r, "podman_gateway", unreachable...)
				v.want(r, "ipv6_public", append([]string{"EADDRNOTAVAIL", "EAFNOSUPPORT"}, unreachable...)...)
			},
		},
		{
			name: "UDP out", timeout: 20,
			code: `
import errno, os, socket
print("interfaces", " ".join(sorted(os.listdir("/sys/class/net"))))
for label, addr in (("udp_dns", ("1.1.1.1", 53)), ("udp_gateway", ("172.17.0.1", 53))):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"\x00" * 32, addr)
        print(label, "sent")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				// No route; or, in a Kubernetes pod (the CNI's interface),
				// no IP socket at all.
				want := unreachable
				if r.lines["interfaces"] == "eth0 lo" {
					want = []string{"EPERM"}
				} else {
					v.want(r, "interfaces", "lo")
				}
				v.want(r, "udp_dns", want...)
				v.want(r, "udp_gateway", want...)
			},
		},
		{
			name: "DNS", timeout: 30,
			code: `
import socket
for label, name in (("dns_public", "example.com"), ("dns_docker_host", "host.docker.internal")):
    try:
        socket.getaddrinfo(name, 443, type=socket.SOCK_STREAM)
        print(label, "resolved")
    except OSError as e:
        print(label, type(e).__name__)
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "dns_public", "gaierror")
				v.want(r, "dns_docker_host", "gaierror")
			},
		},
		{
			name: "raw sockets", timeout: 20,
			code: `
import errno, socket
for label, args in (("af_packet", (socket.AF_PACKET, socket.SOCK_RAW, 0x0300)),
                    ("raw_icmp", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)),
                    ("raw_tcp", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP))):
    try:
        socket.socket(*args).close()
        print(label, "OK")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				for _, k := range []string{"af_packet", "raw_icmp", "raw_tcp"} {
					v.want(r, k, "EPERM")
				}
			},
		},
		{
			// The test listens on this abstract socket in the host's
			// network namespace; the container has its own.
			name: "abstract unix socket of the host", timeout: 20,
			code: fill(`
import errno, socket
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0{{ABSTRACT}}")
    print("abstract", "connected")
except OSError as e:
    print("abstract", errno.errorcode[e.errno])
`),
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "abstract", "EPERM", "ECONNREFUSED")
			},
		},
		{
			name: "writes outside /tmp", timeout: 20,
			code: `
import errno, os
import socket
paths = ["/x", "/etc/passwd", "/usr/bin/python3", "/opt/bridge/runner.py", "/proc/sys/kernel/hostname",
         "/proc/sys/vm/drop_caches", "/proc/1/oom_score_adj"]
# Present or not depending on the kernel's configuration and cgroup version.
maybe = ["/proc/sysrq-trigger", "/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled",
         "/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max",
         "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max"]
tried = 0
for p in paths + [p for p in maybe if os.path.exists(p)]:
    tried += p.startswith("/sys/")
    try:
        with open(p, "w") as f:
            f.write("-1000\n" if "oom" in p else "pwned\n")
        print(p, "written")
    except OSError as e:
        print(p, errno.errorcode[e.errno])
print("sys_paths_tried", tried >= 2)
try:
    socket.sethostname("pwned")
    print("sethostname", "OK")
except OSError as e:
    print("sethostname", errno.errorcode[e.errno])
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if env.gvisor {
					// gVisor's /sys has none of these knobs; it checks
					// permission before the read-only mount (TestRootReadOnly
					// proves the root read-only there); and /proc/1 is its
					// own init's, whose oom_score_adj it keeps for itself:
					// the host's processes keep theirs.
					v.want(r, "/x", "EACCES", "EROFS")
					v.want(r, "/proc/1/oom_score_adj", "written", "EACCES", "EPERM")
					delete(r.lines, "/proc/1/oom_score_adj")
					delete(r.lines, "sys_paths_tried")
					allRefused(v, r, 7)
					return
				}
				v.want(r, "sys_paths_tried", "True")
				v.want(r, "/x", "EROFS")
				delete(r.lines, "sys_paths_tried")
				allRefused(v, r, 10)
			},
		},
		{
			// What needs a capability, or that the seccomp profile refuses.
			name: "privileged system calls", timeout: 20,
			code: syscallPrelude + `
print("mount", sc("mount", b"none", b"/tmp", b"tmpfs", 0, None))
print("umount2", sc("umount2", b"/proc", 2))
print("setuid0", sc("setuid", 0))
print("chroot", sc("chroot", b"/tmp"))
print("bpf", sc("bpf", 0, None, 0))
print("perf_event_open", sc("perf_event_open", None, 0, -1, -1, 0))
print("init_module", sc("init_module", None, 0, b""))
print("reboot", sc("reboot", 0xfee1dead, 672274793, 0, None))
print("sethostname", sc("sethostname", b"pwned", 5))
print("pivot_root", sc("pivot_root", b"/tmp", b"/tmp"))
print("swapon", sc("swapon", b"/tmp/swap", 0))
print("kexec_load", sc("kexec_load", 0, 0, None, 0))
print("open_by_handle_at", sc("open_by_handle_at", -100, None, 0))
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				allRefused(v, r, 13)
			},
		},
		{
			// Attaching to PID 1 is refused or, where the kernel allows
			// tracing a process of the same uid (no Yama), reaches only
			// the container's own init: the PID namespace is private.
			name: "ptrace PID 1", timeout: 20,
			code: syscallPrelude + `
r = sc("ptrace", 16, 1, None, None)  # PTRACE_ATTACH
if r == "OK":
    cmdline = open("/proc/1/cmdline", "rb").read()
    uid = open("/proc/1/status").read().split("Uid:")[1].split()[0]
    own = b"/opt/bridge/runner.py" in cmdline and uid == "65534"
    os.waitpid(1, 0x40000000)  # __WALL: the attach stops it
    sc("ptrace", 17, 1, None, None)  # PTRACE_DETACH
    r = "own-init" if own else "OK-foreign-process"
print("ptrace_pid1", r)
print("processes_all_65534", all(open("/proc/%s/status" % p).read().split("Uid:")[1].split()[0] == "65534"
                                 for p in os.listdir("/proc") if p.isdigit()))
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "ptrace_pid1", "EPERM", "own-init")
				v.want(r, "processes_all_65534", "True")
			},
		},
		{
			// A user namespace would give the code a full set of
			// capabilities over namespaces of its own (mounts, network):
			// kernel attack surface the sandbox means to close. keyctl
			// reaches the kernel keyrings, which are not namespaced. Tried
			// in a forked child: unshare(CLONE_NEWUSER) needs a process
			// with one thread, and the runner has several.
			name: "user namespace, keyrings", timeout: 20,
			code: syscallPrelude + `
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    out = ["userns " + sc("unshare", 0x10000000),  # CLONE_NEWUSER
           "keyctl " + sc("keyctl", 0, -3, 1),       # KEYCTL_GET_KEYRING_ID, the session keyring, create
           "add_key " + sc("add_key", b"user", b"bridge", b"x", 1, -3)]
    os.write(w, "\n".join(out).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print(os.read(r, 4096).decode())
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				allRefused(v, r, 3)
			},
		},
		{
			// Neither the bridge's environment nor an upstream's reaches
			// the sandbox: the code dumps every environment and command
			// line it can read, and the test looks for the secrets.
			name: "environment secrets", timeout: 30,
			code: `
import errno, os, mcp_tools
blobs = ["os.environ " + repr(dict(os.environ))]
for p in sorted(os.listdir("/proc")):
    if p.isdigit():
        for f in ("environ", "cmdline"):
            try:
                blobs.append("/proc/%s/%s " % (p, f) + repr(open("/proc/%s/%s" % (p, f), "rb").read()))
            except OSError as e:
                blobs.append("/proc/%s/%s %s" % (p, f, errno.errorcode[e.errno]))
blobs.append("servers " + repr(mcp_tools.servers()))
blobs.append("tools " + repr([t["name"] for t in mcp_tools.tools("misbehave")]))
print("\n".join(blobs))
print("dumped", "yes")
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "dumped", "yes")
				if r.StdoutCut != 0 {
					v.errorf("the dump was cut (%d bytes): the secrets could hide in the cut part", r.StdoutCut)
				}
				// The dump must have read the runner's environment, else
				// it proves nothing.
				if !strings.Contains(r.Stdout, "BRIDGE_RELAY_TOKEN=") || !strings.Contains(r.Stdout, "/proc/1/cmdline") {
					v.errorf("the dump lacks the runner's environment or PID 1's command line")
				}
				for _, s := range []string{hostileBridgeSecret, hostileUpstreamSecret} {
					if strings.Contains(r.text+r.Stdout+r.Stderr+r.Message, s) {
						v.errorf("the secret %q reached the sandbox", s)
					}
				}
			},
		},
		{
			name: "1 GiB of stdout", timeout: 60,
			code: `
import sys
chunk = b"z" * (1 << 20)
for _ in range(1024):
    sys.stdout.buffer.write(chunk)
sys.stdout.flush()
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if len(r.Stdout) != 64<<10 || int64(len(r.Stdout))+r.StdoutCut != 1<<30 {
					v.errorf("stdout %d bytes + %d cut, want 65536 + %d", len(r.Stdout), r.StdoutCut, 1<<30-64<<10)
				}
			},
		},
		{
			name: "one 100 MB line", timeout: 60,
			code: `
import sys
sys.stdout.write("y" * 100_000_000 + "\n");
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if len(r.Stdout) != 64<<10 || int64(len(r.Stdout))+r.StdoutCut != 100_000_001 {
					v.errorf("stdout %d bytes + %d cut, want 65536 + %d", len(r.Stdout), r.StdoutCut, 100_000_001-64<<10)
				}
			},
		},
		{
			// The last expression's value is shown (notebook habits): its
			// repr runs in the runner after the code, and is bounded as
			// any output.
			name: "a last value of 100 MB", timeout: 60,
			code: `
class A:
    def __repr__(self):
        return "r" * 100_000_000
A()
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if len(r.Stdout) != 64<<10 || int64(len(r.Stdout))+r.StdoutCut != 100_000_001 {
					v.errorf("stdout %d bytes + %d cut, want 65536 + %d", len(r.Stdout), r.StdoutCut, 100_000_001-64<<10)
				}
			},
		},
		{
			name: "a last value whose repr raises", timeout: 20,
			code: `
class A:
    def __repr__(self):
        raise RuntimeError("no repr for you")
A()
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "error")
				if !strings.Contains(r.Stderr, "RuntimeError: no repr for you") || !strings.Contains(r.Stderr, `line 5`) {
					v.errorf("stderr %q: want the RuntimeError and the line of the expression", r.Stderr)
				}
			},
		},
		{
			name: "a last value whose repr never returns", timeout: 3,
			code: `
class A:
    def __repr__(self):
        while True:
            pass
A()
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "timeout")
			},
		},
		{
			// The relay directory is the host's run directory, mounted
			// read-only; no engine socket is in reach.
			name: "host paths", timeout: 20,
			code: `
import errno, os, socket
mounts = [l.split() for l in open("/proc/self/mountinfo")]
rb = [m for m in mounts if m[4] == "/run/bridge"]
print("run_bridge_mount", rb[0][5].split(",")[0] if rb else "missing")
def attempt(label, fn):
    try:
        fn()
        print(label, "OK")
    except OSError as e:
        print(label, errno.errorcode[e.errno])
attempt("mkdir", lambda: os.mkdir("/run/bridge/x"))
attempt("create", lambda: open("/run/bridge/x", "w").close())
attempt("symlink", lambda: os.symlink("/etc/passwd", "/run/bridge/y"))
attempt("bind", lambda: socket.socket(socket.AF_UNIX).bind("/run/bridge/evil.sock"))
print("listing", sorted(os.listdir("/run/bridge")))
for label, p in (("docker_sock", "/var/run/docker.sock"), ("podman_sock", "/run/podman/podman.sock"),
                 ("containerd_sock", "/run/containerd/containerd.sock")):
    print(label, os.path.exists(p))
`,
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				v.want(r, "run_bridge_mount", "ro")
				for _, k := range []string{"mkdir", "create", "symlink"} {
					v.want(r, k, "EROFS", "EACCES")
				}
				v.want(r, "bind", "EPERM", "EROFS", "EACCES") // EPERM: no unix socket of the code's own
				v.want(r, "listing", "[]")
				for _, k := range []string{"docker_sock", "podman_sock", "containerd_sock"} {
					v.want(r, k, "False")
				}
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
			check: func(v *verdict, r hostileRun) {
				v.status(r, "ok")
				if len(r.Stdout) != 64<<10 || int64(len(r.Stdout))+r.StdoutCut != stdout16M {
					v.errorf("stdout %d bytes + %d cut, want 65536 + %d", len(r.Stdout), r.StdoutCut, stdout16M-64<<10)
				}
			},
		},
		{
			name: "big tool results, unread", timeout: 60,
			// Results are read and decoded before their size is known:
			// what bounds this is the run's result capacity, 64 MiB (8
			// calls of up to 8 MiB, sandbox/budget.go), on top of the
			// bridge at rest (~31 MB) and the decoding's own copies. It
			// measured 80-95 MB; before the capacity, 460 MB.
			rss: 128 << 20,
			code: relayCode(`
deafen()
i = 1000
while True:
    relay.send({"type": "tool_call", "id": i, "server": "misbehave", "tool": "big", "args": {"bytes": 4000000}})
    i += 1
`),
			check: stalled,
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
	// An abstract unix socket in the host's network namespace: the
	// sandbox must not reach it.
	abstract := fmt.Sprintf("bridge-hostile-%d", os.Getpid())
	aln, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer aln.Close()
	var abstractAccepted atomic.Int64
	go func() {
		for {
			c, err := aln.Accept()
			if err != nil {
				return
			}
			abstractAccepted.Add(1)
			c.Close()
		}
	}()
	if c, err := net.Dial("unix", "@"+abstract); err != nil {
		t.Fatalf("the host cannot reach its own abstract socket: %v", err)
	} else {
		c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); abstractAccepted.Load() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the abstract socket never accepted the test's own connection")
		}
		time.Sleep(10 * time.Millisecond)
	}

	forEachEngine(t, func(t *testing.T, e *engine) {
		engineStart := time.Now()
		dir := t.TempDir()
		record := filepath.Join(dir, "calls.jsonl")
		servers := filepath.Join(dir, "servers.json")
		yard := plantYard(t, dir, e)
		writeServers(t, servers, map[string]any{
			"misbehave": map[string]any{"command": self, "args": []string{"--name", "misbehave", "--record", record},
				"env": map[string]string{upstreamEnv: "1", "UPSTREAM_SECRET": hostileUpstreamSecret, yardTokenEnv: yard.token}},
		})
		policyFile := filepath.Join(dir, "policy.yaml")
		// The pool on, as users run it (2 ready containers): each attack
		// runs in a container made before it, for it alone; after it, that
		// container is gone and only the pool's ready ones are left.
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

		env := hostileEnv{debugPort: port, abstractName: abstract, record: record, yard: yard, gvisor: e.kind() == kindRunsc}
		cases := hostileCases(env)
		// The yardsticks' cases go before the last two, which must stay last.
		cases = slices.Insert(cases, len(cases)-2, yardCases(env)...)
		var rows []hostileRow
		for _, c := range cases {
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
				ready := readyPool(t, e, pid, w)
				if c.before != nil {
					c.before(t)
				}
				w.reset()
				r := hostileCall(t, cs, c.code, c.timeout)
				row.status, row.wall = r.Status, r.wall
				var v verdict
				c.check(&v, r)
				if c.after != nil {
					c.after(&v)
				}

				// The bridge: the attack's container gone, nothing left but
				// the pool's ready containers, and the next run works
				// (failures whatever the case's marks say), and it is back
				// to its baseline, bounded all along and not spinning.
				// The run's container is removed after its answer, in the
				// background: give that a few seconds.
				if left := attackLeft(t, e, pid, ready, w); left != "" {
					t.Errorf("after the run: %s", left)
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
				bound := int64(hostileRSSBound)
				if c.rss != 0 {
					bound = c.rss
				}
				if peak.RSS >= bound {
					v.errorf("the bridge's RSS peaked at %.1f MB (bound %d MB; heap %.1f MB)", mb(peak.RSS), bound>>20, mb(int64(peak.HeapAlloc)))
				}
				if !ok {
					v.errorf("the bridge did not settle within %s: %d goroutines, %d fds (baseline %d, %d)\n%s",
						hostileSettle, settled.Goroutines, settled.OpenFDs, base.Goroutines, base.OpenFDs, w.goroutineDump(16<<10))
				}
				if share, took, err := cpuQuiet(pid); err != nil {
					t.Errorf("the bridge's CPU time: %v", err)
				} else if share > hostileCPUBound {
					v.errorf("the bridge still uses %.0f%% of a core %s after the case", share*100, hostileSettle)
				} else if took > 0 {
					t.Logf("the bridge went quiet %s after it settled", took.Round(100*time.Millisecond))
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

		if n := abstractAccepted.Load(); n != 1 {
			t.Errorf("the host's abstract socket accepted %d connection(s) from the sandbox", n-1)
		}
		logs := quietLog(stderr)
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
		if err == nil && s.backTo(base, hostileGoroutineMargin, hostileFDMargin) {
			return s, true
		}
		if time.Now().After(deadline) {
			return s, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cpuQuiet samples the bridge's CPU share in 500 ms windows until it is at
// most hostileCPUBound or hostileSettle has passed, and returns the last
// share and how long it took beyond the first window. Work the attack left
// behind may finish (a garbage collection of a big heap, upstream answers
// to calls already abandoned still being read); a bridge left spinning
// never gets quiet.
func cpuQuiet(pid int) (share float64, took time.Duration, err error) {
	start := time.Now()
	for first := true; ; first = false {
		if share, err = cpuShare(pid, 500*time.Millisecond); err != nil || share <= hostileCPUBound {
			if first {
				return share, 0, err
			}
			return share, time.Since(start) - 500*time.Millisecond, err
		}
		if time.Since(start) > hostileSettle {
			return share, time.Since(start), nil
		}
	}
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// poolTarget is how many ready containers the bridge's warm pool aims to
// keep now: the default size (2), or more after it grew under the cases'
// runs (up to pool.max).
func poolTarget(t *testing.T, w *statsWatcher) int {
	t.Helper()
	s, err := w.read()
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool == nil {
		t.Fatal("the bridge has no warm pool")
	}
	return s.Pool.Target
}

// readyPool waits until the bridge pid's warm pool is full (its target),
// and returns its containers' ids: the next run takes one of them.
func readyPool(t *testing.T, e *engine, pid int, w *statsWatcher) map[string]bool {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs := containersOf(t, e, pid)
		target := poolTarget(t, w)
		if len(cs) == target || time.Now().After(deadline) {
			ids := map[string]bool{}
			for _, c := range cs {
				ids[c.ID] = true
			}
			if len(cs) != target {
				t.Fatalf("the warm pool has %d containers 30 s on, want its target %d", len(cs), target)
			}
			return ids
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// attackLeft waits up to 10 s for the run that took one of ready to be
// gone, with no more than the pool's containers left, and says what is
// wrong if that does not happen, "" if it does.
func attackLeft(t *testing.T, e *engine, pid int, ready map[string]bool, w *statsWatcher) string {
	t.Helper()
	var cs []sandbox.ContainerInfo
	target := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		cs, target = containersOf(t, e, pid), poolTarget(t, w)
		kept := 0
		for _, c := range cs {
			if ready[c.ID] {
				kept++
			}
		}
		if kept < len(ready) && len(cs) <= target {
			return ""
		}
	}
	return fmt.Sprintf("10 s after the run, the bridge has %d containers (the pool's target is %d), %v; every container that was ready before it is still there, the run's included", len(cs), target, cs)
}
