package runsc

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// fakeImages is an Exporter of one small image, counting its exports.
type fakeImages struct {
	exports atomic.Int32
	entries []tar.Header // with Size 0 and no body but for files, whose body is their name
	// exported is the ref of the last export; gone makes ImageInfo know
	// no image (removed since its export).
	exported atomic.Value
	gone     atomic.Bool
}

const fakeImageID = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func (f *fakeImages) Name() string { return "fake" }
func (f *fakeImages) ImageInfo(_ context.Context, ref string) (sandbox.ImageInfo, error) {
	if (ref != "bridge-runner:test" && ref != fakeImageID) || f.gone.Load() {
		return sandbox.ImageInfo{}, sandbox.ErrImageNotFound
	}
	return sandbox.ImageInfo{ID: fakeImageID}, nil
}
func (f *fakeImages) BuildImage(context.Context, sandbox.BuildOptions) error { return nil }
func (f *fakeImages) Export(_ context.Context, ref string, w io.Writer) ([]string, error) {
	f.exports.Add(1)
	f.exported.Store(ref)
	tw := tar.NewWriter(w)
	for _, h := range f.entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = h.Name
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return nil, err
		}
	}
	return []string{"PATH=/usr/bin:/bin", "HOME=/root"}, tw.Close()
}

var mtime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func image() *fakeImages {
	return &fakeImages{entries: []tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/lib/python3/os.py", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mtime},
		{Name: "usr/bin/su", Typeflag: tar.TypeReg, Mode: 0o4755, ModTime: mtime},
		{Name: "usr/bin/python", Typeflag: tar.TypeSymlink, Linkname: "/usr/bin/python3.11"},
		{Name: "usr/bin/os.py", Typeflag: tar.TypeLink, Linkname: "usr/lib/python3/os.py"},
		{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666},
		{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777},
	}}
}

// newTestClient is a Client over testdata/fake-runsc, and the file of
// the calls it records.
func newTestClient(t *testing.T, images Exporter) (*Client, string) {
	t.Helper()
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	t.Setenv("FAKE_RUNSC_LOG", calls)
	t.Setenv("FAKE_RUNSC_GONE", filepath.Join(dir, "gone"))
	if err := os.Mkdir(filepath.Join(dir, "gone"), 0o700); err != nil {
		t.Fatal(err)
	}
	fake, err := filepath.Abs("testdata/fake-runsc")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(context.Background(), Options{Command: []string{fake}, Dir: filepath.Join(dir, "engine"), Init: "/usr/bin/tini-static", Images: images})
	if err != nil {
		t.Fatal(err)
	}
	return c, calls
}

// takeCalls returns the calls recorded since the last take, with the
// engine's folder written as D.
func takeCalls(t *testing.T, c *Client, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	_ = os.Remove(file)
	return strings.Split(strings.TrimSpace(strings.ReplaceAll(string(b), c.opts.Dir, "D")), "\n")
}

func TestClientCommands(t *testing.T) {
	ctx := context.Background()
	images := image()
	c, calls := newTestClient(t, images)
	if got := takeCalls(t, c, calls); !slices.Equal(got, []string{"--root D/state --version"}) {
		t.Fatalf("New ran %q", got)
	}
	spec := testSpec(t)
	id, err := c.Create(ctx, spec)
	if err != nil || id != "bridge-run-run1" {
		t.Fatalf("Create: %q, %v", id, err)
	}
	if _, err := c.Create(ctx, spec); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("a second Create of one name: %v", err)
	}
	if err := c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx, id); err != nil || st != (sandbox.ExitState{}) {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
	want := []string{
		"--root D/state --network=none --host-uds=open run --bundle D/bundles/bridge-run-run1 -detach bridge-run-run1",
		"--root D/state wait bridge-run-run1",
	}
	if got := takeCalls(t, c, calls); !slices.Equal(got, want) {
		t.Fatalf("Start and Wait ran\n%q\nwant\n%q", got, want)
	}
	if logs, err := c.Logs(ctx, id, 100); err != nil || logs != "sandbox bridge-run-run1 started\n" {
		t.Fatalf("Logs: %q, %v", logs, err)
	}
	list, err := c.List(ctx, map[string]string{sandbox.LabelRunID: "run1"})
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].Labels[sandbox.LabelManaged] != "true" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	if list, _ := c.List(ctx, map[string]string{sandbox.LabelRunID: "run2"}); len(list) != 0 {
		t.Fatalf("List of another run: %+v", list)
	}

	// A checkpoint, restored as another sandbox and woken.
	snap := filepath.Join(t.TempDir(), "snap")
	if err := c.Checkpoint(ctx, id, snap); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(snap, checkpointImageFile)); err != nil || string(b) != fakeImageID {
		t.Fatalf("the checkpoint's image: %q, %v", b, err)
	}
	// The restore is on the checkpoint's image, from the cache, even when
	// the tag names nothing by then.
	c.opts.Images.(*fakeImages).gone.Store(true)
	fork := spec
	fork.Image = "bridge-runner:rebuilt"
	fork.Mounts = []sandbox.Mount{{Source: "/run/user/0/bridge/run2", Target: sandbox.RelayDir, ReadOnly: true}}
	if err := c.Restore(ctx, "bridge-run-run2", fork, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "bridge-run-run2"); err != nil { // the fake's sandbox ends at once
		t.Fatal(err)
	}
	if err := c.Wake(ctx, "bridge-run-run2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx, id); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"--root D/state checkpoint --image-path " + snap + " bridge-run-run1",
		"--root D/state --network=none --host-uds=open restore --image-path " + snap + " --bundle D/bundles/bridge-run-run2 -detach bridge-run-run2",
		"--root D/state wait bridge-run-run2",
		"--root D/state kill bridge-run-run2 USR1",
		"--root D/state kill --all bridge-run-run1 KILL",
	}
	if got := takeCalls(t, c, calls); !slices.Equal(got, want) {
		t.Fatalf("Checkpoint, Restore, Wake and Kill ran\n%q\nwant\n%q", got, want)
	}
	one, two := readConfig(t, c, id), readConfig(t, c, "bridge-run-run2")
	if one.Root.Path != two.Root.Path || one.Root.Path != filepath.Join(c.opts.Dir, "rootfs", fakeImageID[7:], "rootfs") {
		t.Errorf("restored root %q, checkpointed %q: a restore reopens the same paths", two.Root.Path, one.Root.Path)
	}
	if one.Linux.CgroupsPath == two.Linux.CgroupsPath {
		t.Errorf("the restored sandbox shares the cgroup %s", one.Linux.CgroupsPath)
	}
	if m, _ := mountAt(two, sandbox.RelayDir); m.Source != "/run/user/0/bridge/run2" {
		t.Errorf("the restored sandbox's run folder is %q", m.Source)
	}
	if !slices.Contains(two.Process.Env, EnvTokenFile+"="+TokenFile) {
		t.Errorf("the runner cannot park without %s: %q", EnvTokenFile, two.Process.Env)
	}
	if n := images.exports.Load(); n != 1 {
		t.Errorf("the image was exported %d times, want once", n)
	}

	// Removed: runsc's state, the bundle; a second time, nothing to do.
	if err := c.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.bundle(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle left: %v", err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("FAKE_RUNSC_GONE"), id), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, id); err != nil {
		t.Fatalf("removing a removed sandbox: %v", err)
	}
	if err := c.Kill(ctx, id); err != nil {
		t.Fatalf("killing a removed sandbox: %v", err)
	}
	want = []string{
		"--root D/state state bridge-run-run1",
		"--root D/state delete --force bridge-run-run1",
		"--root D/state state bridge-run-run1",
		"--root D/state kill --all bridge-run-run1 KILL",
		"--root D/state state bridge-run-run1",
	}
	if got := takeCalls(t, c, calls); !slices.Equal(got, want) {
		t.Fatalf("Remove ran\n%q\nwant\n%q", got, want)
	}
	if list, _ := c.List(ctx, nil); len(list) != 1 || list[0].ID != "bridge-run-run2" {
		t.Fatalf("List after Remove: %+v", list)
	}
}

func readConfig(t *testing.T, c *Client, id string) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.bundle(id), "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func TestClientStartFailsAndOOM(t *testing.T) {
	ctx := context.Background()
	c, _ := newTestClient(t, image())
	spec := testSpec(t)
	id, err := c.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_RUNSC_FAIL", "cgroup busy")
	if err := c.Start(ctx, id); err == nil || !strings.Contains(err.Error(), "cgroup busy") {
		t.Fatalf("a failed run: %v", err)
	}
	if _, err := c.Wait(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Wait on a sandbox that never ran: %v", err)
	}
	t.Setenv("FAKE_RUNSC_FAIL", "")
	t.Setenv("FAKE_RUNSC_EXIT", "137")
	if err := c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx, id); err != nil || st != (sandbox.ExitState{ExitCode: 137, OOMKilled: true, OOMGuessed: true}) {
		t.Fatalf("killed under a memory limit: %+v, %v", st, err)
	}
	// Killed by the host, runsc without a status: an OOM kill when the
	// sandbox's cgroup counted one, a guess when it cannot be read.
	t.Setenv("FAKE_RUNSC_EXIT", "")
	t.Setenv("FAKE_RUNSC_WAIT_GONE", "1")
	c.cgroupRoot = t.TempDir()
	for _, counted := range []bool{false, true} {
		if counted {
			writeFile(t, filepath.Join(c.cgroupRoot, "memory/bridge", id, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
		}
		if err := c.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		st, err := c.Wait(ctx, id)
		if want := (sandbox.ExitState{ExitCode: 137, OOMKilled: true, OOMGuessed: !counted}); err != nil || st != want {
			t.Fatalf("killed by the host (counted %v): %+v, %v; want %+v", counted, st, err, want)
		}
	}
	if _, err := c.Create(ctx, sandbox.ContainerSpec{Name: "../x", Image: "bridge-runner:test"}); err == nil || !strings.Contains(err.Error(), "names a sandbox by") {
		t.Fatalf("an id that is a path: %v", err)
	}
	other := spec
	other.Name, other.Image = "other", "missing:latest"
	if _, err := c.Create(ctx, other); !errors.Is(err, sandbox.ErrImageNotFound) {
		t.Fatalf("a missing image: %v", err)
	}
}

func TestRootfsExport(t *testing.T) {
	c, _ := newTestClient(t, image())
	dir, env, id, err := c.rootfs(context.Background(), "bridge-runner:test")
	if err != nil {
		t.Fatal(err)
	}
	if id != fakeImageID || c.opts.Images.(*fakeImages).exported.Load() != fakeImageID {
		t.Errorf("the rootfs of image %q, exported by %v: want both the id the tag names", id, c.opts.Images.(*fakeImages).exported.Load())
	}
	if !slices.Equal(env, []string{"PATH=/usr/bin:/bin", "HOME=/root"}) {
		t.Errorf("env %q", env)
	}
	st, err := os.Stat(filepath.Join(dir, "usr/lib/python3/os.py"))
	if err != nil || !st.ModTime().Equal(mtime) || st.Mode().Perm() != 0o644 {
		t.Fatalf("a file's time and mode are kept (bytecode is checked against them): %v %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "usr/bin/su")); err != nil || st.Mode()&os.ModeSetuid != 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("setuid kept: %v %v", st, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "usr/bin/python")); err != nil || l != "/usr/bin/python3.11" {
		t.Errorf("symlink %q %v", l, err)
	}
	a, _ := os.Stat(filepath.Join(dir, "usr/bin/os.py"))
	b, _ := os.Stat(filepath.Join(dir, "usr/lib/python3/os.py"))
	if a == nil || !os.SameFile(a, b) {
		t.Error("hard link not kept")
	}
	if _, err := os.Lstat(filepath.Join(dir, "dev/null")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a device was made: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "tmp")); err != nil || st.Mode()&os.ModeSticky == 0 {
		t.Errorf("/tmp lost its sticky bit: %v %v", st, err)
	}
	for _, p := range []string{"run/bridge", InitPath[1:]} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("mount point %s: %v", p, err)
		}
	}
}

func TestRootfsRefusesEscapes(t *testing.T) {
	for _, h := range []tar.Header{
		{Name: "../escaped", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "etc/x/../../../escaped", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "usr/lib/python3/os.py", Typeflag: tar.TypeLink, Linkname: "../../outside"},
	} {
		t.Run(h.Name, func(t *testing.T) {
			images := image()
			images.entries = append(images.entries, tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: ".."}, h)
			c, _ := newTestClient(t, images)
			if _, _, _, err := c.rootfs(context.Background(), "bridge-runner:test"); err == nil {
				t.Fatal("an entry outside the root file system was made")
			}
			if _, err := os.Stat(filepath.Join(c.opts.Dir, "rootfs", "escaped")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("escaped: %v", err)
			}
			left, _ := os.ReadDir(filepath.Join(c.opts.Dir, "rootfs"))
			if len(left) != 0 {
				t.Fatalf("a failed export left %v", left)
			}
		})
	}
}

func TestWriteToken(t *testing.T) {
	dir := t.TempDir()
	for _, tok := range []string{"first", "second"} {
		if err := WriteToken(dir, tok); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "token"))
		st, _ := os.Stat(filepath.Join(dir, "token"))
		if err != nil || string(b) != tok || st.Mode().Perm() != 0o444 {
			t.Fatalf("token %q, mode %v, %v", b, st.Mode(), err)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Fatalf("left %v", left)
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOOMKills(t *testing.T) {
	v1, v2 := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(v1, "memory/bridge/a/memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
	writeFile(t, filepath.Join(v2, "cgroup.controllers"), "cpu memory pids\n")
	writeFile(t, filepath.Join(v2, "bridge/a/memory.events"), "low 0\nhigh 0\nmax 9\noom 1\noom_kill 2\n")
	for _, tc := range []struct {
		root, cgroup string
		n            int
		ok           bool
	}{{v1, "/bridge/a", 3, true}, {v2, "/bridge/a", 2, true}, {v1, "/bridge/gone", 0, false}, {v2, "/bridge/gone", 0, false}} {
		if n, ok := oomKills(tc.root, tc.cgroup); n != tc.n || ok != tc.ok {
			t.Errorf("oomKills(%s, %s) = %d, %v; want %d, %v", tc.root, tc.cgroup, n, ok, tc.n, tc.ok)
		}
	}
}

func TestCgroupEnforcement(t *testing.T) {
	v2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, e := cgroupEnforcement(v2); v != "2" || !e.All() {
		t.Errorf("v2: %s %+v", v, e)
	}
	v1 := t.TempDir()
	for _, d := range []string{"memory", "cpu"} {
		_ = os.Mkdir(filepath.Join(v1, d), 0o700)
	}
	if v, e := cgroupEnforcement(v1); v != "1" || e.Pids || !e.Memory || !strings.Contains(e.Reason, "not mounted") {
		t.Errorf("v1 without pids: %s %+v", v, e)
	}
}
