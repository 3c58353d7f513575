package runsc

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/sandbox"
)

// cliImages exports images through the docker (or podman) command: for
// the smoke test only; sandbox/detect will give an Exporter over the
// engine's API.
type cliImages struct{ cli string }

func (e cliImages) Name() string { return e.cli }

func (e cliImages) ImageInfo(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	out, err := exec.CommandContext(ctx, e.cli, "image", "inspect", "-f", "{{.Id}}", ref).Output()
	if err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("%w: %s: %v", sandbox.ErrImageNotFound, ref, err)
	}
	return sandbox.ImageInfo{ID: strings.TrimSpace(string(out))}, nil
}

func (e cliImages) BuildImage(context.Context, sandbox.BuildOptions) error {
	return errors.New("not in the smoke test")
}

func (e cliImages) Export(ctx context.Context, ref string, w io.Writer) ([]string, error) {
	out, err := exec.CommandContext(ctx, e.cli, "image", "inspect", "-f", "{{json .Config.Env}}", ref).Output()
	if err != nil {
		return nil, err
	}
	var env []string
	if err := json.Unmarshal(out, &env); err != nil {
		return nil, err
	}
	id, err := exec.CommandContext(ctx, e.cli, "create", ref).Output()
	if err != nil {
		return nil, err
	}
	defer exec.Command(e.cli, "rm", "-f", strings.TrimSpace(string(id))).Run()
	cmd := exec.CommandContext(ctx, e.cli, "export", strings.TrimSpace(string(id)))
	cmd.Stdout = w
	return env, cmd.Run()
}

// smokeRun is one sandbox's run folder and relay listener.
type smokeRun struct {
	id, dir, token string
	ln             net.Listener
}

func newSmokeRun(t *testing.T, name string) *smokeRun {
	t.Helper()
	dir, err := os.MkdirTemp("", "bridge-runsc-smoke-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "relay.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(filepath.Join(dir, "relay.sock"), 0o666); err != nil {
		t.Fatal(err)
	}
	return &smokeRun{id: "bridge-smoke-" + name, dir: dir, token: "token-" + name, ln: ln}
}

// accept takes the runner's connection and hello.
func (r *smokeRun) accept(t *testing.T) (net.Conn, *relay.Decoder, *relay.Hello) {
	t.Helper()
	_ = r.ln.(*net.UnixListener).SetDeadline(time.Now().Add(30 * time.Second))
	conn, err := r.ln.Accept()
	if err != nil {
		t.Fatalf("%s: the runner did not connect: %v", r.id, err)
	}
	dec := relay.NewDecoder(conn, 0)
	m, err := dec.Decode()
	if err != nil || m.Hello == nil || m.Hello.Token != r.token {
		t.Fatalf("%s: hello %+v, %v", r.id, m.Hello, err)
	}
	return conn, dec, m.Hello
}

// call runs code as a session's call and returns its stdout.
func call(t *testing.T, conn net.Conn, dec *relay.Decoder, code string) string {
	t.Helper()
	err := relay.NewEncoder(conn).Exec(relay.Exec{Code: code, OutputLimit: 1 << 16, Session: true, Files: relay.FileLimits{}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for {
		m, err := dec.Decode()
		if err != nil {
			t.Fatalf("during a call: %v", err)
		}
		switch m.Type {
		case relay.TypeStdout, relay.TypeStderr:
			out.WriteString(m.Output.Data)
		case relay.TypeExit:
			if m.Exit.Status != "ok" {
				t.Fatalf("call failed: %+v %s", m.Exit.Error, out.String())
			}
			return out.String()
		}
	}
}

// newSmoke is the Client of a smoke test and the runner image's file
// system, this tree's runner copied over the image's. Only with
// BRIDGE_RUNSC_SMOKE set to the runner image's name, as root, where runsc
// and docker are.
func newSmoke(t *testing.T) *smoke {
	image := os.Getenv("BRIDGE_RUNSC_SMOKE")
	if image == "" {
		t.Skip("set BRIDGE_RUNSC_SMOKE to the runner image (as root, with runsc and docker) to run runsc for real")
	}
	ctx := context.Background()
	work, err := os.MkdirTemp("", "bridge-runsc-engine-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	c, err := New(ctx, Options{Dir: work, Init: "/usr/bin/tini-static", CgroupParent: "/bridge-smoke", Images: cliImages{"docker"},
		OCISeccomp: os.Getenv("BRIDGE_RUNSC_SMOKE_OCI_SECCOMP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup("/sys/fs/cgroup", "/bridge-smoke") }) // last: after the sandboxes'
	start := time.Now()
	rootfs, _, _, err := c.rootfs(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exported %s in %s", image, time.Since(start).Round(time.Millisecond))
	err = filepath.Walk("../../images/runner", func(p string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel("../../images/runner", p)
		if err != nil || fi.IsDir() || !strings.HasSuffix(p, ".py") || strings.HasPrefix(filepath.Base(p), "test_") {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(rootfs, "opt/bridge", rel), b, 0o644)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sm := &smoke{c: c, work: work, limits: sandbox.DefaultLimits()}
	sm.spec = func(r *smokeRun) sandbox.ContainerSpec {
		s := sandbox.NewSpec(strings.TrimPrefix(r.id, "bridge-run-"), image, r.dir, r.token, sm.limits)
		s.Name = r.id
		s.ForGVisor()
		return s
	}
	return sm
}

// start creates and starts sandbox name and returns its runner's
// connection once it said hello.
func (sm *smoke) start(t *testing.T, name string) (string, net.Conn, *relay.Decoder) {
	t.Helper()
	ctx := context.Background()
	r := newSmokeRun(t, name)
	id, err := sm.c.Create(ctx, sm.spec(r))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sm.c.Remove(context.Background(), id) })
	t.Cleanup(func() { showLogs(t, sm.c, id) }) // before the removal
	start := time.Now()
	if err := sm.c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	conn, dec, hello := r.accept(t)
	t.Logf("started and connected in %s: %+v", time.Since(start).Round(time.Millisecond), *hello)
	if hello.Parks != 16 || hello.Resumed {
		t.Fatalf("hello %+v", *hello)
	}
	return id, conn, dec
}

// TestSmoke: a session's call, a park, a checkpoint, two restores side by
// side that carry on from the same state, and a restored one snapshotted
// and restored again.
func TestSmoke(t *testing.T) {
	sm := newSmoke(t)
	id, conn, dec := sm.start(t, "first")
	// BRIDGE_RUNSC_SMOKE_MB: that many MiB of random bytes held by the session.
	mb := cmp.Or(os.Getenv("BRIDGE_RUNSC_SMOKE_MB"), "0")
	code := "import os, sys\nx = 41\ndata = os.urandom(" + mb + " << 20)\nopen('/tmp/f', 'w').write('first')\nprint(sys.version_info[:2], len(data))"
	t.Logf("first call: %s", strings.TrimSpace(call(t, conn, dec, code)))
	snap := filepath.Join(sm.work, "snap")
	sm.snapshot(t, conn, dec, id, snap)

	// Two restores side by side, each from the checkpoint's state, with
	// its own memory and /tmp.
	second, secondDec := sm.restore(t, "second", snap, 3)
	defer second.Close()
	fork, forkDec := sm.restore(t, "fork", snap, 3)
	defer fork.Close()
	if out := call(t, second, secondDec, "x += 1\nopen('/tmp/f', 'w').write('second')\nprint(x, len(data), open('/tmp/f').read())"); out != "42 "+strconv.Itoa(mbBytes(mb))+" second\n" {
		t.Fatalf("second: the session's state: %q", out)
	}
	if out := call(t, fork, forkDec, "x += 1\nprint(x, open('/tmp/f').read())"); out != "42 first\n" {
		t.Fatalf("fork: the session's state: %q", out)
	}
	// A restored sandbox snapshotted again: the chain goes on, a spare less.
	snap2 := filepath.Join(sm.work, "snap2")
	sm.snapshot(t, second, secondDec, "bridge-smoke-second", snap2)
	third, thirdDec := sm.restore(t, "third", snap2, 2)
	defer third.Close()
	if out := call(t, third, thirdDec, "x += 1\nprint(x, open('/tmp/f').read())"); out != "43 second\n" {
		t.Fatalf("third: the session's state: %q", out)
	}
}

// smoke is what TestSmoke's steps share.
type smoke struct {
	c      *Client
	work   string
	limits sandbox.Limits
	spec   func(*smokeRun) sandbox.ContainerSpec
}

// snapshot parks the runner on conn, checkpoints sandbox id into snap and
// removes it.
func (sm *smoke) snapshot(t *testing.T, conn net.Conn, dec *relay.Decoder, id, snap string) {
	t.Helper()
	ctx := context.Background()
	if err := relay.NewEncoder(conn).Park(); err != nil {
		t.Fatal(err)
	}
	if m, err := dec.Decode(); err != nil || m.Type != relay.TypeParked {
		t.Fatalf("park answered %+v, %v", m, err)
	}
	if _, err := dec.Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("after parked: %v", err)
	}
	conn.Close()
	start := time.Now()
	if err := sm.c.Checkpoint(ctx, id, snap); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: checkpointed in %s: %s", id, time.Since(start).Round(time.Millisecond), du(snap))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := sm.c.Wait(wctx, id)
	cancel()
	t.Logf("%s: the checkpointed sandbox's end, as Wait reports it: %+v, %v", id, st, err)
	if err := sm.c.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// restore starts sandbox name from snap in a run folder of its own, wakes
// it, and returns its runner's connection once it said a resumed hello
// with parks left.
func (sm *smoke) restore(t *testing.T, name, snap string, parks int) (net.Conn, *relay.Decoder) {
	t.Helper()
	ctx := context.Background()
	r := newSmokeRun(t, name)
	if err := WriteToken(r.dir, r.token); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sm.c.Restore(ctx, r.id, sm.spec(r), snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sm.c.Remove(context.Background(), r.id) })
	t.Cleanup(func() { showLogs(t, sm.c, r.id) })
	restored := time.Since(start)
	if err := sm.c.Wake(ctx, r.id); err != nil {
		t.Fatal(err)
	}
	conn, dec, hello := r.accept(t)
	t.Logf("%s: restored in %s, resumed in %s: %+v", name, restored.Round(time.Millisecond), (time.Since(start) - restored).Round(time.Millisecond), *hello)
	if !hello.Resumed || hello.Parks != parks {
		t.Fatalf("hello %+v, want resumed with %d parks", *hello, parks)
	}
	return conn, dec
}

// TestSmokeMemoryLimit: code past its memory limit ends the sandbox, and
// Wait says how.
func TestSmokeMemoryLimit(t *testing.T) {
	sm := newSmoke(t)
	sm.limits.Memory = 128 << 20
	id, conn, dec := sm.start(t, "oom")
	defer conn.Close()
	err := relay.NewEncoder(conn).Exec(relay.Exec{Code: "b = bytearray(400 << 20)\nprint('survived')", OutputLimit: 1 << 16, Session: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := dec.Decode()
		if err != nil {
			t.Logf("the connection ended: %v", err)
			break
		}
		if m.Type == relay.TypeExit {
			t.Fatalf("the code ran past its memory limit: %+v", m.Exit)
		}
	}
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := sm.c.Wait(wctx, id)
	t.Logf("Wait: %+v, %v", st, err)
	if err != nil || !st.OOMKilled {
		t.Fatalf("not reported as killed for its memory: %+v, %v", st, err)
	}
}

// TestSmokeRestoredLimits: a restored sandbox is held to its memory limit
// as the one it came from (its own cgroup, from the restore's bundle).
func TestSmokeRestoredLimits(t *testing.T) {
	sm := newSmoke(t)
	sm.limits.Memory = 128 << 20
	id, conn, dec := sm.start(t, "limits")
	if out := call(t, conn, dec, "x = 1\nprint(x)"); out != "1\n" {
		t.Fatalf("first call: %q", out)
	}
	snap := filepath.Join(sm.work, "snap")
	sm.snapshot(t, conn, dec, id, snap)
	restored, rdec := sm.restore(t, "limits-restored", snap, 3)
	defer restored.Close()
	cg := filepath.Join("/sys/fs/cgroup/memory", sm.c.opts.CgroupParent, "bridge-smoke-limits-restored", "memory.limit_in_bytes")
	if b, err := os.ReadFile(cg); err == nil {
		t.Logf("the restored sandbox's cgroup: memory.limit_in_bytes %s", strings.TrimSpace(string(b)))
	}
	err := relay.NewEncoder(restored).Exec(relay.Exec{Code: "b = bytearray(400 << 20)\nprint('survived')", OutputLimit: 1 << 16, Session: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := rdec.Decode()
		if err != nil {
			break
		}
		if m.Type == relay.TypeExit {
			t.Fatalf("the restored code ran past its memory limit: %+v", m.Exit)
		}
	}
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if st, err := sm.c.Wait(wctx, "bridge-smoke-limits-restored"); err != nil || !st.OOMKilled {
		t.Fatalf("not reported as killed for its memory: %+v, %v", st, err)
	}
}

// TestSmokeKill: Kill ends a sandbox whose code runs (a call's timeout),
// and Wait says it was killed, not for its memory.
func TestSmokeKill(t *testing.T) {
	sm := newSmoke(t)
	id, conn, dec := sm.start(t, "kill")
	defer conn.Close()
	err := relay.NewEncoder(conn).Exec(relay.Exec{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", OutputLimit: 1 << 16, Session: true})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := dec.Decode(); err != nil || m.Type != relay.TypeStdout {
		t.Fatalf("%+v, %v", m, err)
	}
	start := time.Now()
	if err := sm.c.Kill(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := sm.c.Wait(wctx, id)
	t.Logf("killed, then Wait after %s: %+v, %v", time.Since(start).Round(time.Millisecond), st, err)
	if err != nil || st.ExitCode != 137 || st.OOMKilled {
		t.Fatalf("Wait after Kill: %+v, %v", st, err)
	}
	if err := sm.c.Kill(context.Background(), id); err != nil {
		t.Fatalf("killing an ended sandbox: %v", err)
	}
}

// TestSmokeThreadsAndChildren: a thread and a child process the code
// left running between calls come back with a restored sandbox, and go on.
func TestSmokeThreadsAndChildren(t *testing.T) {
	sm := newSmoke(t)
	id, conn, dec := sm.start(t, "threads")
	code := "import subprocess, threading, time\n" +
		"ticks = [0]\n" +
		"def tick():\n    while True:\n        ticks[0] += 1\n        time.sleep(0.01)\n" +
		"threading.Thread(target=tick, daemon=True).start()\n" +
		"child = subprocess.Popen(['sleep', '600'])\n" +
		"time.sleep(0.2)\nprint(ticks[0] > 0, child.poll())"
	if out := call(t, conn, dec, code); out != "True None\n" {
		t.Fatalf("first call: %q", out)
	}
	snap := filepath.Join(sm.work, "snap")
	sm.snapshot(t, conn, dec, id, snap)
	restored, rdec := sm.restore(t, "threads-restored", snap, 3)
	defer restored.Close()
	out := call(t, restored, rdec, "before = ticks[0]\ntime.sleep(0.3)\nprint(ticks[0] > before, child.poll())")
	if out != "True None\n" {
		t.Fatalf("after the restore, the thread ticks and the child lives: %q", out)
	}
}

func mbBytes(mb string) int {
	n, _ := strconv.Atoi(mb)
	return n << 20
}

// showLogs logs sandbox id's own output when the test failed.
func showLogs(t *testing.T, c *Client, id string) {
	if t.Failed() {
		logs, _ := c.Logs(context.Background(), id, 8192)
		t.Logf("%s's output:\n%s", id, logs)
	}
}

func du(dir string) string {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n += fi.Size()
		}
		return nil
	})
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
