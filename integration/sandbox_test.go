package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
)

// Each hardening property is proved from inside the container, by code
// that would succeed if the property did not hold.

func TestNetworkUnreachable(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		out := mustOK(t, e, `
import errno, os, socket
print(sorted(os.listdir("/sys/class/net")))
# A UDP connect sends no packet; it only looks up a route.
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("192.0.2.1", 53))
    print("connected")
except OSError as e:
    print(errno.errorcode[e.errno])
# A private address, as another pod's on a pod network would be.
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1)
    s.connect(("10.0.0.1", 80))
    print("connected")
except OSError as e:
    print(errno.errorcode.get(e.errno, "timeout"))
try:
    socket.getaddrinfo("example.com", 443)
    print("resolved")
except OSError as e:
    print("no dns")
`)
		want := "['lo']\nENETUNREACH\nENETUNREACH\nno dns\n"
		if e.cand.Engine == sandbox.EngineKubernetes {
			// A pod always has the CNI's interface: the runner refuses
			// the code every IP socket instead.
			want = "['eth0', 'lo']\nEPERM\nEPERM\nno dns\n"
		}
		if e.kind() == kindRunsc {
			// gVisor's network stack (--network=none: a loopback only)
			// has no route to any host.
			want = "['lo']\nEHOSTUNREACH\nEHOSTUNREACH\nno dns\n"
		}
		if out != want {
			t.Fatalf("network is reachable from the sandbox:\n%s\nwant\n%s", out, want)
		}
	})
}

func TestRootReadOnly(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		out := mustOK(t, e, `
import errno
for path in ["/x", "/etc/passwd", "/usr/lib/python3/x", "/opt/bridge/runner.py", "/run/bridge/x", "/var/tmp/x"]:
    try:
        open(path, "a").close()
        print(path, "writable")
    except OSError as e:
        print(path, errno.errorcode[e.errno])
`)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasSuffix(line, "EROFS") && !strings.HasSuffix(line, "EACCES") {
				t.Errorf("%s (want EROFS or EACCES)", line)
			}
		}
		if !strings.Contains(out, "/x EROFS") {
			t.Errorf("writing / did not fail with EROFS:\n%s", out)
		}
	})
}

func TestIdentityAndPrivileges(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		out := mustOK(t, e, `
import os
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
print(os.getuid(), os.geteuid(), os.getgid())
print(status["CapEff"].strip(), status["CapPrm"].strip(), status.get("CapAmb", "absent").strip())
print(status.get("NoNewPrivs", "absent").strip())
print(open("/proc/1/comm").read().strip() != "python3")
`)
		want := "65534 65534 65534\n0000000000000000 0000000000000000 0000000000000000\n1\nTrue\n"
		if e.kind() == kindRunsc {
			// gVisor's /proc/self/status shows neither (its bundle asks
			// for no ambient capabilities and no_new_privs:
			// sandbox/runsc's TestBundleHardening).
			want = "65534 65534 65534\n0000000000000000 0000000000000000 absent\nabsent\nTrue\n"
		}
		if out != want {
			t.Fatalf("identity/privileges inside the sandbox:\n%s\nwant:\n%s", out, want)
		}
	})
}

func TestTmpfsLimits(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		l := limits()
		l.TmpfsSize = 8 << 20
		res := run(t, e, `
import errno, os, stat
chunk = b"x" * (1 << 20)
written = 0
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(32):
            f.write(chunk)
            f.flush()
            written += 1
except OSError as e:
    print("full", errno.errorcode[e.errno], written)
os.remove("/tmp/fill")
with open("/tmp/tool", "w") as f:
    f.write("#!/bin/sh\necho ran\n")
os.chmod("/tmp/tool", 0o755)
try:
    os.execv("/tmp/tool", ["/tmp/tool"])
except OSError as e:
    print("exec", errno.errorcode[e.errno])
`, l)
		if res.Status != sandbox.StatusOK {
			t.Fatalf("status %s: %s\n%s", res.Status, res.Message, res.Stderr)
		}
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "full ENOSPC ") || lines[1] != "exec EACCES" {
			t.Fatalf("tmpfs not limited or not noexec:\n%s", res.Stdout)
		}
		var mb int
		if _, err := fmt.Sscan(strings.TrimPrefix(lines[0], "full ENOSPC "), &mb); err != nil || mb > 8 {
			t.Fatalf("wrote %s MiB into an 8 MiB tmpfs", strings.TrimPrefix(lines[0], "full ENOSPC "))
		}
	})
}

func TestMemoryLimitKills(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		if !e.enforced {
			t.Skip("this engine cannot enforce memory limits (TestRootlessPodman and TestDoctor check that it says so)")
		}
		l := limits()
		l.Memory = 256 << 20
		res := run(t, e, `
print("allocating", flush=True)
data = "x" * (1 << 30)
print("allocated", len(data))
`, l)
		if res.Status != sandbox.StatusMemory {
			t.Fatalf("status %s (%s), want memory\nstdout: %s", res.Status, res.Message, res.Stdout)
		}
		// Output still in the runner's pipe when the kernel kills it is lost;
		// what must never appear is the line after the allocation.
		if !strings.Contains(res.Message, "256 MiB") || strings.Contains(res.Stdout, "allocated") {
			t.Fatalf("message %q, stdout %q", res.Message, res.Stdout)
		}
		assertNoContainer(t, e, res.RunID)
	})
}

func TestForkBombHitsPidsLimit(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		if !e.enforced {
			t.Skip("this engine cannot enforce pids limits")
		}
		l := limits()
		l.Pids = 32
		start := time.Now()
		res := run(t, e, `
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
    print("fork failed after", children, "children:", e.strerror, flush=True)
    raise
`, l)
		switch {
		case e.kind() == kindRunsc && res.Status != sandbox.StatusOK && strings.Contains(res.Message, "SIGKILL"):
			// gVisor's processes are its kernel's, within the sandbox's
			// memory: the forks that are left meet the memory limit,
			// which kills the run, once the pids limit has stopped the
			// bomb (below, the code said so).
		case res.Status != sandbox.StatusError || res.Error == nil || res.Error.Type != "BlockingIOError":
			t.Fatalf("status %s (%s), error %+v, stdout %q", res.Status, res.Message, res.Error, res.Stdout)
		}
		if !strings.Contains(res.Stdout, "fork failed after") {
			t.Fatalf("stdout %q", res.Stdout)
		}
		t.Logf("fork bomb contained in %s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(res.Stdout))
		assertNoContainer(t, e, res.RunID)
	})
}

func TestTimeoutKills(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		l := limits()
		l.Timeout = 2 * time.Second
		res := run(t, e, "print('started', flush=True)\nwhile True: pass", l)
		if res.Status != sandbox.StatusTimeout {
			t.Fatalf("status %s (%s), want timeout", res.Status, res.Message)
		}
		if res.Stdout != "started\n" || !strings.Contains(res.Message, "timed out after 2s") {
			t.Fatalf("stdout %q, message %q", res.Stdout, res.Message)
		}
		// Generous: the point is that the run returns, not how fast.
		if exec := res.Duration - res.Startup; exec > l.Timeout+20*time.Second {
			t.Fatalf("a 2 s timeout took %s to return", exec)
		}
		assertNoContainer(t, e, res.RunID)
	})
}

func TestCancelRemovesContainer(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		started := make(chan struct{}, 1)
		var res sandbox.Result
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, err = executor(t, e).Run(ctx, sandbox.Request{
				Code:   "print('go', flush=True)\nimport time\ntime.sleep(600)",
				Limits: limits(),
				OnOutput: func(string, string) {
					select {
					case started <- struct{}{}:
					default:
					}
				},
			})
		}()
		select {
		case <-started:
		case <-time.After(time.Minute):
			t.Fatal("the code never started")
		}
		cancel()
		<-done
		if err != nil || res.Status != sandbox.StatusCancelled {
			t.Fatalf("status %s, err %v", res.Status, err)
		}
		assertNoContainer(t, e, res.RunID)
	})
}

func TestOutputAndErrors(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		l := limits()
		l.OutputBytes = 4096
		res := run(t, e, `
import asyncio, sys
await asyncio.sleep(0.01)
print("y" * 10000)
print("warn", file=sys.stderr)
def f():
    return {}["missing"]
f()
`, l)
		if res.Status != sandbox.StatusError || res.ExitCode != 1 || res.Error == nil || res.Error.Type != "KeyError" {
			t.Fatalf("status %s, exit %d, error %+v", res.Status, res.ExitCode, res.Error)
		}
		if len(res.Stdout) != 4096 || res.StdoutCut != 10001-4096 {
			t.Fatalf("stdout %d bytes, cut %d", len(res.Stdout), res.StdoutCut)
		}
		if !strings.HasPrefix(res.Stderr, "warn\n") || !strings.Contains(res.Error.Traceback, `line 7, in f`) || strings.Contains(res.Error.Traceback, "runner.py") {
			t.Fatalf("stderr %q\ntraceback %s", res.Stderr, res.Error.Traceback)
		}
	})
}

func TestConcurrentRunsAreIsolated(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		ex := executor(t, e)
		const n = 4
		results := make(chan sandbox.Result, n)
		for i := range n {
			go func() {
				res, err := ex.Run(context.Background(), sandbox.Request{
					Code:   fmt.Sprintf("import os, json\nopen('/tmp/mine', 'w').write('%d')\nprint(json.dumps([%d, sorted(set(os.listdir('/tmp')) - {'outputs'}) + os.listdir('/tmp/outputs')]))", i, i),
					Limits: limits(),
				})
				if err != nil {
					res.Message = err.Error()
				}
				results <- res
			}()
		}
		seen := map[int]bool{}
		for range n {
			res := <-results
			if res.Status != sandbox.StatusOK {
				t.Fatalf("status %s: %s", res.Status, res.Message)
			}
			var got []any
			if err := json.Unmarshal([]byte(res.Stdout), &got); err != nil {
				t.Fatalf("stdout %q: %v", res.Stdout, err)
			}
			seen[int(got[0].(float64))] = true
			if files, _ := json.Marshal(got[1]); string(files) != `["mine"]` {
				t.Fatalf("a run saw another run's files: %s", files)
			}
		}
		if len(seen) != n {
			t.Fatalf("distinct results: %v", seen)
		}
	})
}
