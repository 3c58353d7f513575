package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/detect"
	"github.com/bridge-mcp/bridge/sandbox/doctor"
)

// gvisorProbe runs in the sandbox and reports what the code sees, as JSON.
const gvisorProbe = `
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(1 << 14)
n = libc.syscall(103, 3, buf, len(buf))  # syslog(SYSLOG_ACTION_READ_ALL)
out = {"klog": buf.raw[:n].decode(errors="replace") if n > 0 else "", "version": open("/proc/version").read().strip()}
out["ifaces"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
# A UDP connect sends no packet; it only needs a route. 192.0.2.1 is TEST-NET-1.
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 9))
    out["route"] = "a route exists"
except OSError as e:
    out["route"] = errno.errorcode.get(e.errno, str(e))
writes = {}
for path in ("/probe", "/var/tmp/probe", "/etc/probe"):
    try:
        open(path, "w").close()
        writes[path] = "written"
    except OSError as e:
        writes[path] = errno.errorcode.get(e.errno, str(e.errno))
out["writes"] = writes
out["ids"] = [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()]
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
out["caps"] = {k: int(status.get(k, "0").strip(), 16) for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh")}
out["nnp"] = libc.prctl(39, 0, 0, 0, 0)
out["memtotal"] = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
print(json.dumps(out))
`

// gvisorEngine is an engine to run gVisor on, and whether this machine
// must be able to (setup.sh set it up, or CI).
type gvisorEngine struct {
	name string
	rt   sandbox.Runtime
	cand detect.Candidate
	must bool
}

// gvisorEngines are the engines under test that run gVisor: Docker with a
// runtime called runsc, and the Podman service setup.sh starts for it
// (BRIDGE_PODMAN_RUNSC_SOCKET). Podman's API cannot choose a runtime per
// container, so the rootful runc service is not one of them.
func gvisorEngines(t testing.TB) []gvisorEngine {
	t.Helper()
	setUp := strings.Split(os.Getenv("BRIDGE_GVISOR"), ",")
	must := func(name string) bool { return ci() || slices.Contains(setUp, name) }
	var out []gvisorEngine
	for _, e := range testSuite.engines {
		switch e.name {
		case "docker":
			out = append(out, gvisorEngine{name: "docker", rt: e.rt, cand: e.cand, must: must("docker")})
		case "podman":
			uri := os.Getenv("BRIDGE_PODMAN_RUNSC_SOCKET")
			if uri == "" {
				uri = "unix:///run/podman/podman-runsc.sock"
			}
			c := detect.Candidate{Engine: sandbox.EnginePodman, URI: uri, Why: "test"}
			rt, err := detect.Connect(context.Background(), c)
			if err != nil {
				if must("podman") {
					t.Errorf("podman-runsc: %v (integration/env/setup.sh starts this service)", err)
				} else {
					t.Logf("podman-runsc: not tested: %v (run `make setup`)", err)
				}
				continue
			}
			t.Cleanup(func() { rt.Close() })
			out = append(out, gvisorEngine{name: "podman-runsc", rt: rt, cand: c, must: must("podman")})
		}
	}
	return out
}

// gvisorRule is where the gVisor tests run: where setup.sh set gVisor up.
func gvisorRule() engineRule {
	return only("gVisor is set up for Docker (a runtime called runsc) and a Podman service of its own; the test cluster has no RuntimeClass for runsc", kindDocker, kindPodman)
}

// TestGVisor runs the sandbox's isolation checks under gVisor (oci_runtime:
// runsc) on every engine that runs it here, proves from inside that the
// code met gVisor's kernel and not the host's, and checks that an engine
// that cannot run gVisor refuses to run code at all.
func TestGVisor(t *testing.T) {
	if rootless() {
		t.Skip("rootless Podman runs runsc here (cgroup v1) only with --runtime-flag ignore-cgroups, which drops every " +
			"limit, and from a service of its own that setup.sh does not start for the rootless user: gVisor is tested rootful only")
	}
	runsOn(t, gvisorRule())
	engines := gvisorEngines(t)
	if len(engines) == 0 {
		if ci() {
			t.Fatal("no engine to run gVisor on (setup.sh sets up docker and podman-runsc)")
		}
		t.Skip("no engine under test can run gVisor: run `make setup`")
	}
	hostVersion, err := os.ReadFile("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range engines {
		t.Run(g.name, func(t *testing.T) {
			ctx := context.Background()
			ex, err := sandbox.NewExecutor(ctx, g.rt, sandbox.ExecutorOptions{
				Image: imageName(), OCIRuntime: sandbox.OCIRuntimeRunsc, Logger: quiet(),
			})
			if err != nil {
				if g.must {
					t.Fatalf("%s cannot run gVisor although setup.sh set it up (or CI=true): %v", g.name, err)
				}
				t.Skipf("%s cannot run gVisor here: %v", g.name, err)
			}
			if ex.OCIRuntime() != sandbox.OCIRuntimeRunsc {
				t.Fatalf("executor runs %q", ex.OCIRuntime())
			}
			l := limits()
			l.Memory = 256 << 20
			res, err := ex.Run(ctx, sandbox.Request{Code: gvisorProbe, Limits: l})
			if err != nil || res.Status != sandbox.StatusOK {
				t.Fatalf("probe: %v, %s (%s)\nstdout: %s\nstderr: %s", err, res.Status, res.Message, res.Stdout, res.Stderr)
			}
			t.Logf("a run under gVisor on %s: %s (startup %s)", g.name, res.Duration, res.Startup)
			var p struct {
				Klog, Version string
				Ifaces        []string
				Route         string
				Writes        map[string]string
				IDs           []any
				Caps          map[string]uint64
				NNP           int
				MemTotal      int64
			}
			if err := json.Unmarshal([]byte(res.Stdout), &p); err != nil {
				t.Fatalf("probe output: %v\n%s", err, res.Stdout)
			}
			// The code met gVisor: its kernel log is gVisor's, and its
			// kernel is not the host's.
			if !strings.Contains(p.Klog, "Starting gVisor") || p.Version == strings.TrimSpace(string(hostVersion)) {
				t.Errorf("not under gVisor: kernel log %q, /proc/version %q (host: %q)", firstLineOf(p.Klog), p.Version, strings.TrimSpace(string(hostVersion)))
			}
			if len(p.Ifaces) > 1 || (len(p.Ifaces) == 1 && p.Ifaces[0] != "lo") {
				t.Errorf("network interfaces %v", p.Ifaces)
			}
			if p.Route != "ENETUNREACH" && p.Route != "EHOSTUNREACH" {
				t.Errorf("connect: %q, want no route", p.Route)
			}
			// Nothing on the root file system is writable; /var/tmp (mode
			// 1777 in the image) proves it is the mount, not permissions.
			for path, got := range p.Writes {
				if got == "written" {
					t.Errorf("wrote %s", path)
				}
			}
			if p.Writes["/var/tmp/probe"] != "EROFS" {
				t.Errorf("writing /var/tmp: %s, want EROFS", p.Writes["/var/tmp/probe"])
			}
			if ids, _ := json.Marshal(p.IDs); string(ids) != "[65534,65534,65534,65534,[65534]]" {
				t.Errorf("uid, euid, gid, egid, groups = %s", ids)
			}
			for k, v := range p.Caps {
				if v != 0 {
					t.Errorf("%s = %x, want no capabilities", k, v)
				}
			}
			if p.NNP != 1 {
				t.Errorf("no_new_privs = %d", p.NNP)
			}
			// gVisor sizes its memory to the cgroup's limit.
			if p.MemTotal != l.Memory {
				t.Errorf("MemTotal %d, want the memory limit %d", p.MemTotal, l.Memory)
			}
			assertNoContainer(t, &engine{rt: g.rt}, res.RunID)

			// The memory limit kills.
			res, err = ex.Run(ctx, sandbox.Request{Code: "print('allocating', flush=True)\ndata = 'x' * (1 << 30)\nprint('allocated')", Limits: l})
			if err != nil || res.Status != sandbox.StatusMemory || strings.Contains(res.Stdout, "allocated\n") {
				t.Errorf("1 GiB in 256 MiB: %v, %s (%s), stdout %q", err, res.Status, res.Message, res.Stdout)
			}
			// The pids limit holds, counted by gVisor's kernel: its tasks are
			// not the host's, so the host's pids cgroup could not see them.
			lp := limits()
			lp.Pids = 32
			res, err = ex.Run(ctx, sandbox.Request{Code: `
import threading
stop = threading.Event()
n = 0
try:
    while n < 1000:
        threading.Thread(target=stop.wait).start()
        n += 1
except RuntimeError as e:
    print("threads", n, e)
stop.set()
`, Limits: lp})
			if err != nil || res.Status != sandbox.StatusOK || !strings.Contains(res.Stdout, "can't start new thread") {
				t.Fatalf("threads past pids=32: %v, %s (%s), stdout %q", err, res.Status, res.Message, res.Stdout)
			}
			var threads int
			if _, err := fmt.Sscan(strings.TrimPrefix(res.Stdout, "threads "), &threads); err != nil || threads >= 32 || threads < 16 {
				t.Errorf("started %d threads with pids=32 (%q)", threads, res.Stdout)
			}

			// bridge doctor --oci-runtime runsc proves the same on this engine.
			out, errOut, code := bridgeCLI(t, []string{envFor(g.cand)}, "", "doctor", "--runtime", g.cand.Engine, "--oci-runtime", "runsc", "--json")
			var rep doctor.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("doctor --json: %v\n%s\n%s", err, out, errOut)
			}
			var er *doctor.EngineReport
			for i := range rep.Engines {
				if rep.Engines[i].Socket == g.cand.URI {
					er = &rep.Engines[i]
				}
			}
			if er == nil || !er.Usable || code != 0 {
				t.Fatalf("doctor --oci-runtime runsc: exit %d, report for %s: %+v\n%s", code, g.cand.URI, er, out)
			}
			for _, c := range er.Checks {
				if !c.OK {
					t.Errorf("doctor check %s: %+v", c.Name, c)
				}
				if c.Name == "kernel" && !strings.Contains(c.Detail, "gVisor") {
					t.Errorf("doctor kernel check: %+v", c)
				}
			}
		})
	}

	// Fail closed: the rootful Podman service runs runc, and Podman cannot
	// choose a runtime per container, so no code runs there under runsc.
	for _, e := range testSuite.engines {
		if e.name != "podman" {
			continue
		}
		t.Run("podman refuses", func(t *testing.T) {
			_, err := sandbox.NewExecutor(context.Background(), e.rt, sandbox.ExecutorOptions{
				Image: imageName(), OCIRuntime: sandbox.OCIRuntimeRunsc, Logger: quiet(),
			})
			if !errors.Is(err, sandbox.ErrOCIRuntime) || !strings.Contains(err.Error(), "podman-runsc.sock") {
				t.Fatalf("NewExecutor with runsc on a runc service: %v, want ErrOCIRuntime saying what to set up", err)
			}
			// The CLI says so too, and runs nothing.
			out, errOut, code := bridgeCLI(t, engineEnv(e), "print('ran')", "run", "--runtime", "podman", "--oci-runtime", "runsc", "-")
			if code != 125 || !strings.Contains(errOut, "OCI runtime not available") || out != "" {
				t.Fatalf("bridge run --oci-runtime runsc on %s: exit %d\n%s", e.cand.URI, code, errOut)
			}
		})
	}
}

// BenchmarkRunGVisor measures what gVisor costs a run: BenchmarkRun's
// "pass" under runc and under runsc, side by side on each engine that runs
// both (on Podman, runc is the rootful service and runsc its own service).
// docs/performance.md and docs/security.md report it.
func BenchmarkRunGVisor(b *testing.B) {
	runcOf := map[string]sandbox.Runtime{}
	for _, e := range testSuite.engines {
		runcOf[e.name] = e.rt
	}
	for _, g := range gvisorEngines(b) {
		engine := strings.TrimSuffix(g.name, "-runsc")
		for _, c := range []struct {
			runtime string
			rt      sandbox.Runtime
		}{{sandbox.OCIRuntimeRunc, runcOf[engine]}, {sandbox.OCIRuntimeRunsc, g.rt}} {
			b.Run(engine+"/"+c.runtime, func(b *testing.B) {
				ex, err := sandbox.NewExecutor(context.Background(), c.rt, sandbox.ExecutorOptions{
					Image: imageName(), OCIRuntime: c.runtime, Logger: quiet(),
				})
				if err != nil {
					b.Skip(err)
				}
				var startup int64
				for b.Loop() {
					res, err := ex.Run(context.Background(), sandbox.Request{Code: "pass", Limits: limits()})
					if err != nil || res.Status != sandbox.StatusOK {
						b.Fatalf("status %s %v: %s", res.Status, err, strings.TrimSpace(res.Stderr))
					}
					startup += res.Startup.Microseconds()
				}
				b.ReportMetric(float64(startup)/float64(b.N)/1000, "startup-ms/op")
			})
		}
	}
}

// envFor points the CLI at the candidate's socket.
func envFor(c detect.Candidate) string {
	if c.Engine == sandbox.EngineDocker {
		return "DOCKER_HOST=" + c.URI
	}
	return "CONTAINER_HOST=" + c.URI
}
