package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/docker"
)

// mountProbe runs inside the sandbox and reports, as JSON, what the code
// can do with the mounted folder /data/sales.
const mountProbe = `import errno, json, os, subprocess
out = {}
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
out["csv"] = open("/data/sales/sales.csv").read()
out["list"] = sorted(os.listdir("/data/sales"))
out["write"] = err(lambda: open("/data/sales/sales.csv", "a").close())
out["create"] = err(lambda: open("/data/sales/new.csv", "w").close())
out["delete"] = err(lambda: os.remove("/data/sales/sales.csv"))
out["mkdir"] = err(lambda: os.mkdir("/data/sales/d"))
out["exec_script"] = err(lambda: subprocess.run(["/data/sales/tool.sh"], check=True))
out["exec_binary"] = err(lambda: subprocess.run(["/data/sales/true"], check=True))
out["script_mode"] = oct(os.stat("/data/sales/tool.sh").st_mode & 0o777)
out["other"] = open("/data/other/note.txt").read()
opts = {}
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4].startswith("/data/"):
        opts[f[4]] = sorted(set(f[5].split(",")) & {"ro", "rw", "nosuid", "nodev", "noexec"})
out["mounts"] = opts
print(json.dumps(out))
`

// mountedFolder makes a folder the sandbox's user can read (and the
// engine reach): a CSV, a 0755 shell script and a 0755 copy of a real
// binary, and a second folder with a note. The first folder (0777) and the
// CSV (0666) are writable by anyone on the host, so that only the mount
// stops a write. t.TempDir's folders are 0700: they are opened to others.
func mountedFolder(t *testing.T) (string, string) {
	t.Helper()
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sales, other := filepath.Join(base, "sales"), filepath.Join(base, "other")
	for d, mode := range map[string]os.FileMode{sales: 0o777, other: 0o755} {
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]struct {
		data string
		mode os.FileMode
	}{
		"sales/sales.csv": {"region,amount\nnorth,12\nsouth,30\n", 0o666},
		"sales/tool.sh":   {"#!/bin/sh\necho ran\n", 0o755},
		"sales/true":      {string(bin), 0o755},
		"other/note.txt":  {"second mount\n", 0o644},
	} {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	return sales, other
}

// TestMountsReadOnlyNoExec: a policy's mounts are readable from inside the
// sandbox, and neither writable (EROFS) nor executable (EACCES), through
// `bridge run --policy FILE`; nothing of them is left behind. Rootless
// Podman runs it as the unprivileged user (make integration-rootless).
func TestMountsReadOnlyNoExec(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		sales, other := mountedFolder(t)
		policyFile := filepath.Join(t.TempDir(), "policy.yaml")
		pol := "version: 1\n" + sandboxSection(e) + "mounts:\n  - host: " + sales + "\n  - host: " + other + "\n    path: /data/other\n"
		if err := os.WriteFile(policyFile, []byte(pol), 0o644); err != nil {
			t.Fatal(err)
		}
		before := dataVolumes(t, e)
		stdout, stderr, code := bridgeCLI(t, engineEnv(e), mountProbe, "run", "--policy", policyFile, "--runtime", e.cand.Engine, "-")
		if code != 0 {
			t.Fatalf("bridge run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		var got struct {
			CSV, Write, Create, Delete, Mkdir, Other string
			List                                     []string
			ExecScript                               string              `json:"exec_script"`
			ExecBinary                               string              `json:"exec_binary"`
			ScriptMode                               string              `json:"script_mode"`
			Mounts                                   map[string][]string `json:"mounts"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("probe output %q: %v\nstderr:\n%s", stdout, err, stderr)
		}
		t.Logf("%s: %+v", e.name, got)
		want := []struct{ what, got, want string }{
			{"the CSV", got.CSV, "region,amount\nnorth,12\nsouth,30\n"},
			{"the folder's listing", strings.Join(got.List, " "), "sales.csv tool.sh true"},
			{"the second mount", got.Other, "second mount\n"},
			{"appending to the CSV", got.Write, "EROFS"},
			{"creating a file", got.Create, "EROFS"},
			{"deleting the CSV", got.Delete, "EROFS"},
			{"making a folder", got.Mkdir, "EROFS"},
			{"the script's mode", got.ScriptMode, "0o755"},
			{"running the 0755 script", got.ExecScript, "EACCES"},
			{"running the 0755 binary", got.ExecBinary, "EACCES"},
			{"/data/sales's options", strings.Join(got.Mounts["/data/sales"], ","), "nodev,noexec,nosuid,ro"},
			{"/data/other's options", strings.Join(got.Mounts["/data/other"], ","), "nodev,noexec,nosuid,ro"},
		}
		for _, w := range want {
			if w.got != w.want {
				t.Errorf("%s: %q, want %q", w.what, w.got, w.want)
			}
		}
		// The host's files are untouched.
		if b, err := os.ReadFile(filepath.Join(sales, "sales.csv")); err != nil || string(b) != "region,amount\nnorth,12\nsouth,30\n" {
			t.Errorf("the host's CSV: %q %v", b, err)
		}
		if after := dataVolumes(t, e); after > before {
			t.Errorf("%d data volumes left on %s after the run (%d before)", after, e.name, before)
		}
	})
}

// TestMountsRefusedAndReported: a forbidden or missing mount stops `bridge
// run` before any container, with the file's position; `policy check` and
// `doctor --policy` show the mounts and warn about one the code cannot read.
func TestMountsRefusedAndReported(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := []string{"XDG_CONFIG_HOME=" + dir}
	for _, c := range []struct{ host, want string }{
		{"/proc", ":3:11: mounts[0].host: /proc is the kernel's process file system"},
		{"/", ":3:11: mounts[0].host: / is the host's root folder"},
		{dir + "/missing", ":3:11: mounts[0].host: " + dir + "/missing does not exist"},
	} {
		file := write("bad.yaml", "version: 1\nmounts:\n  - host: "+c.host+"\n")
		_, stderr, code := bridgeCLI(t, env, "print(1)", "run", "--policy", file, "-")
		if code != 2 || !strings.Contains(stderr, file+c.want) {
			t.Errorf("run with a mount of %s: exit %d\n%s", c.host, code, stderr)
		}
	}
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	file := write("closed.yaml", "version: 1\nmounts:\n  - host: "+closed+"\n")
	stdout, stderr, code := bridgeCLI(t, env, "", "policy", "check", "--offline", file)
	if code != 0 || !strings.Contains(stdout, "mounts:\n  - host: \""+closed+"\"\n    path: \"/data/closed\"\n") ||
		!strings.Contains(stderr, file+":3:5: warning: mounts[0]: the code cannot read it: "+closed+" is mode 0700") ||
		!strings.Contains(stderr, "`chmod o+rx "+closed+"`") {
		t.Errorf("policy check of an unreadable mount: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	forEachEngine(t, func(t *testing.T, e *engine) {
		file := write("doctor-"+e.name+".yaml", "version: 1\n"+sandboxSection(e)+"mounts:\n  - host: "+closed+"\n")
		stdout, stderr, code := bridgeCLI(t, engineEnv(e), "", "doctor", "--policy", file)
		if code != 0 || !strings.Contains(stdout, "  "+closed+" → /data/closed: NOT readable by the sandbox's user: "+closed+" is mode 0700") {
			t.Errorf("doctor --policy: exit %d\n%s\n%s", code, stdout, stderr)
		}
	})
}

// TestMountsGVisor: on Docker a run with mounts under gVisor is refused
// before any code runs (the host's noexec would not hold there); through
// Podman's runsc service the mounts hold read-only and noexec.
func TestMountsGVisor(t *testing.T) {
	if rootless() {
		t.Skip("gVisor is set up for the rootful engines")
	}
	runsOn(t, gvisorRule())
	engines := os.Getenv("BRIDGE_GVISOR")
	if engines == "" {
		if ci() {
			t.Fatal("BRIDGE_GVISOR is not set: run integration/env/setup.sh")
		}
		t.Skip("no engine set up for gVisor (BRIDGE_GVISOR)")
	}
	sales, other := mountedFolder(t)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\nsandbox: {oci_runtime: runsc}\nmounts:\n  - host: " + sales + "\n  - {host: " + other + ", path: /data/other}\n"
	if err := os.WriteFile(policyFile, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(engines, "docker") {
		t.Run("docker", func(t *testing.T) {
			host := os.Getenv("DOCKER_HOST")
			if host == "" {
				host = docker.DefaultHost
			}
			_, stderr, code := bridgeCLI(t, []string{"DOCKER_HOST=" + host}, mountProbe, "run", "--policy", policyFile, "--runtime", "docker", "-")
			if code != 125 || !strings.Contains(stderr, "data mounts cannot be held noexec under gVisor on Docker") || !strings.Contains(stderr, "no code was run") {
				t.Errorf("exit %d\n%s", code, stderr)
			}
		})
	}
	if sock := os.Getenv("BRIDGE_PODMAN_RUNSC_SOCKET"); strings.Contains(engines, "podman") && sock != "" {
		t.Run("podman", func(t *testing.T) {
			stdout, stderr, code := bridgeCLI(t, []string{"CONTAINER_HOST=" + sock}, mountProbe, "run", "--policy", policyFile, "--runtime", "podman", "-")
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("%q: %v", stdout, err)
			}
			t.Logf("gVisor on podman: %v", got)
			for _, k := range []string{"write", "create", "delete", "mkdir"} {
				if got[k] != "EROFS" {
					t.Errorf("%s: %v, want EROFS", k, got[k])
				}
			}
			for _, k := range []string{"exec_script", "exec_binary"} {
				if got[k] != "EACCES" {
					t.Errorf("%s: %v, want EACCES", k, got[k])
				}
			}
			if got["csv"] != "region,amount\nnorth,12\nsouth,30\n" || got["other"] != "second mount\n" {
				t.Errorf("reads: %v %v", got["csv"], got["other"])
			}
		})
	}
}

// TestMountsVolumeReaped: on Docker a data mount is an anonymous volume;
// the reaper removes a dead bridge's container with its volumes.
func TestMountsVolumeReaped(t *testing.T) {
	forEngines(t, only("a data mount is a volume on Docker alone", kindDocker), func(t *testing.T, e *engine) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sales, _ := mountedFolder(t)
		runDir := t.TempDir()
		l := limits()
		l.Mounts = []sandbox.DataMount{{Host: sales, Path: "/data/sales"}}
		runID := "reap" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
		spec := sandbox.NewSpec(runID, images.Name(), runDir, "tok", l)
		// The owner of a dead bridge: a process of this host that has exited.
		spec.Labels[sandbox.LabelOwner] = deadOwner(t)
		id, err := e.rt.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer e.rt.Remove(context.Background(), id)
		if n := runVolumes(t, e, runID); n != 1 {
			t.Fatalf("%d volumes with the run's label, want 1 (else this test proves nothing)", n)
		}
		if _, err := sandbox.Reap(ctx, e.rt, t.TempDir(), zerolog.New(zerolog.NewTestWriter(t))); err != nil {
			t.Fatal(err)
		}
		assertNoContainer(t, e, runID)
		if n := runVolumes(t, e, runID); n != 0 {
			t.Errorf("%d volumes of the reaped container left", n)
		}
	})
}

// deadOwner is a LabelOwner value (HOST/BOOT/PIDNS/PID/START) naming a
// process of this host that no longer runs.
func deadOwner(t *testing.T) string {
	t.Helper()
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s/%s/%s/%d/1", host, strings.TrimSpace(string(boot)), ns, cmd.Process.Pid)
}

func dockerClient(t *testing.T, e *engine) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(e.cand.URI), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// dataVolumes counts the volumes that carry the bridge's label on e (0 on
// Podman, which mounts data without volumes).
func dataVolumes(t *testing.T, e *engine) int {
	return countVolumes(t, e, filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true")))
}

func runVolumes(t *testing.T, e *engine, runID string) int {
	return countVolumes(t, e, filters.NewArgs(filters.Arg("label", sandbox.LabelRunID+"="+runID)))
}

func countVolumes(t *testing.T, e *engine, f filters.Args) int {
	t.Helper()
	if e.cand.Engine != sandbox.EngineDocker {
		return 0
	}
	vs, err := dockerClient(t, e).VolumeList(context.Background(), volume.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return len(vs.Volumes)
}

// specialsCode tries the ways out that a read-only mount does not close:
// a unix stream socket and a datagram socket listening in the mounted
// folder, and a FIFO a host process reads (which appears after the policy
// was read).
const specialsCode = `import errno, json, os, socket
out = {}
def t(name, f):
    try:
        f()
        out[name] = "OK"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
def stream():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("/data/specials/stream.sock")
    s.sendall(b"from the sandbox")
def dgram():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"from the sandbox", "/data/specials/dgram.sock")
def fifo():
    fd = os.open("/data/specials/fifo", os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b"from the sandbox")
t("stream", stream)
t("dgram", dgram)
if os.path.exists("/data/specials/fifo"):
    t("fifo", fifo)
print(json.dumps(out, sort_keys=True))
`

// TestMountsSocketsAndFIFOs: a unix socket or a FIFO in a mounted folder is
// no way out (issue finding: a listening socket in a mounted folder got
// the code's bytes). Sockets, as users run the bridge (serve, pool on):
// the code can make no unix socket to reach them with. A FIFO: refused
// when the policy is read; one that appears later is refused when a
// container is made, and, where the kernel has Landlock, by the runner in
// a container made before it. The host side receives nothing.
func TestMountsSocketsAndFIFOs(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		base := t.TempDir()
		dir := filepath.Join(base, "specials")
		for _, d := range []string{filepath.Dir(base), base} {
			os.Chmod(d, 0o755)
		}
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(dir, 0o777)
		var got atomic.Int64 // bytes the host received
		ln, err := net.Listen("unix", filepath.Join(dir, "stream.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				n, _ := io.Copy(io.Discard, c)
				got.Add(max(n, 1))
				c.Close()
			}
		}()
		dg, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "dgram.sock"), Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer dg.Close()
		go func() {
			buf := make([]byte, 1024)
			for {
				n, _, err := dg.ReadFrom(buf)
				if err != nil {
					return
				}
				got.Add(int64(n))
			}
		}()
		for _, s := range []string{"stream.sock", "dgram.sock"} {
			os.Chmod(filepath.Join(dir, s), 0o777) // PostgreSQL's and X11's sockets are so
		}
		policyFile := filepath.Join(t.TempDir(), "policy.yaml")
		pol := "version: 1\n" + sandboxSection(e) + "mounts:\n  - host: " + dir + "\n"
		if err := os.WriteFile(policyFile, []byte(pol), 0o644); err != nil {
			t.Fatal(err)
		}
		cs, _, _ := connectHTTPArgs(t, e, nil, "--policy", policyFile)
		res, out := callRunPython(t, context.Background(), cs, specialsCode, nil)
		if out.Status != "ok" || strings.TrimSpace(out.Stdout) != `{"dgram": "EPERM", "stream": "EPERM"}` {
			t.Fatalf("the sockets: %+v %s", out, contentText(res))
		}

		// A FIFO appears, with a host process reading it.
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
		os.Chmod(fifo, 0o666)
		r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// The warm pool's ready containers were made before it: the runner
		// refuses it there (Landlock); a container made now is refused.
		for i := 0; i < 4; i++ {
			res, out := callRunPython(t, context.Background(), cs, specialsCode, nil)
			text := contentText(res)
			switch {
			case out.Status == "ok" && strings.Contains(out.Stdout, `"fifo": "EACCES"`):
			case out.Status != "ok" && strings.Contains(text, "now holds 1 FIFO(s) ("+fifo+")"):
			default:
				t.Errorf("run %d with a FIFO in the mount: %+v %s", i, out, text)
			}
		}
		buf := make([]byte, 64)
		if n, _ := r.Read(buf); n > 0 {
			got.Add(int64(n))
		}
		if n := got.Load(); n != 0 {
			t.Errorf("the host received %d bytes from the sandbox", n)
		}

		// A policy read with the FIFO there is refused.
		_, stderr, code := bridgeCLI(t, engineEnv(e), "print(1)\n", "run", "--policy", policyFile, "--runtime", e.cand.Engine, "-")
		if code == 0 || !strings.Contains(stderr, "holds 1 FIFO(s) ("+fifo+")") {
			t.Errorf("bridge run with a FIFO in a mount: exit %d, stderr:\n%s", code, stderr)
		}
	})
}
