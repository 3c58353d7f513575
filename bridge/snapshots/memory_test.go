package snapshots

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/bridge-mcp/bridge/policy"
)

// memFiles is a checkpoint as the engine would write it: a path under
// memory/ to its content (a path ending in "/" is an empty folder).
type memFiles map[string]string

// writeMem writes files under the folder dir.
func writeMem(t testing.TB, dir string, files memFiles) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// createMem starts a memory snapshot with files.tar data and memory
// files, not yet committed.
func createMem(t testing.TB, s *Store, owner, label, data string, files memFiles) *Writer {
	t.Helper()
	w, err := s.Create(owner, label, Meta{Kind: KindMemory, Engine: "docker", OCIRuntime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, data); err != nil {
		t.Fatal(err)
	}
	dir, err := w.MemoryDir()
	if err != nil {
		t.Fatal(err)
	}
	writeMem(t, dir, files)
	return w
}

// saveMem saves a memory snapshot, one second after the last save.
func (f *fixture) saveMem(t testing.TB, owner, label, data string, files memFiles) Saved {
	t.Helper()
	f.clk.Add(time.Second)
	saved, err := createMem(t, f.s, owner, label, data, files).Commit()
	if err != nil {
		t.Fatalf("saving %s/%s: %v", owner, label, err)
	}
	return saved
}

// readTree is the regular files under dir, by path, with their content.
func readTree(t testing.TB, dir string) memFiles {
	t.Helper()
	out := memFiles{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var checkpoint = memFiles{"checkpoint.img": strings.Repeat("m", 1000), "pages.img": "0123456789", "sub/deeper/meta.img": "abc", "empty/": ""}

func TestMemorySaveOpen(t *testing.T) {
	f := open(t, nil)
	w := createMem(t, f.s, "local", "warm", "tar", checkpoint)
	dir, _ := w.MemoryDir()
	if again, err := w.MemoryDir(); err != nil || again != dir || !filepath.IsAbs(dir) {
		t.Errorf("MemoryDir again: %q %v, first %q", again, err, dir)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("memory folder: %v %v", st, err)
	}
	f.clk.Add(time.Second)
	saved, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if saved.Size != 3 || saved.MemoryBytes != 1013 || saved.Kind != KindMemory {
		t.Errorf("saved %+v", saved.Entry)
	}
	if _, err := w.MemoryDir(); err == nil {
		t.Error("MemoryDir after Commit")
	}
	e, path, release, err := f.s.OpenMemory("local", "warm")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if !reflect.DeepEqual(e, saved.Entry) || path != filepath.Join(f.s.Dir(), ownerDirName("local"), "warm", memoryName) {
		t.Errorf("OpenMemory: %+v %q\nwant %+v", e, path, saved.Entry)
	}
	want := memFiles{"checkpoint.img": checkpoint["checkpoint.img"], "pages.img": "0123456789", "sub/deeper/meta.img": "abc"}
	if got := readTree(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("memory folder holds %v", got)
	}
	if st, err := os.Stat(filepath.Join(path, "empty")); err != nil || !st.IsDir() {
		t.Errorf("empty folder: %v", err)
	}
	ge, data := f.get(t, "local", "warm")
	if !ge.Created.Equal(e.Created) || data != "tar" {
		t.Errorf("Get: %+v %q", ge, data)
	}
	release()
	release()

	var d map[string]any
	raw, _ := os.ReadFile(filepath.Join(f.s.Dir(), ownerDirName("local"), "warm", metaName))
	if err := json.Unmarshal(raw, &d); err != nil || d["memory_bytes"] != 1013.0 || d["size"] != 3.0 {
		t.Errorf("meta.json: %s %v", raw, err)
	}
	s2, err := Open(Options{Dir: f.dir, SweepEvery: -1, Now: f.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if es, err := s2.List("local"); err != nil || len(es) != 1 || !reflect.DeepEqual(es[0], saved.Entry) {
		t.Errorf("read back: %+v %v", es, err)
	}
}

func TestMemoryRefusals(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "cold", "tar")
	w, err := f.s.Create("local", "x", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.MemoryDir(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "kind memory") {
		t.Errorf("MemoryDir of a files snapshot: %v", err)
	}
	w.Abort()
	_, _, _, err = f.s.OpenMemory("local", "cold")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "holds no memory") {
		t.Errorf("OpenMemory of a files snapshot: %v", err)
	}
	for _, label := range []string{"missing", "../x"} {
		if _, _, _, err := f.s.OpenMemory("local", label); err == nil {
			t.Errorf("OpenMemory %q: no error", label)
		}
	}
	if _, _, _, err := f.s.OpenMemory("bob", "cold"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another owner's: %v", err)
	}
	// A memory snapshot the engine wrote nothing for.
	w, err = f.s.Create("local", "empty", Meta{Kind: KindMemory})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); err == nil || !strings.Contains(err.Error(), "MemoryDir") {
		t.Errorf("commit without memory: %v", err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"cold"}) {
		t.Errorf("kept %v", got)
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
	f.saveMem(t, "local", "warm", "", checkpoint)
	f.clk.Add(DefaultTTL)
	if _, _, _, err := f.s.OpenMemory("local", "warm"); !errors.Is(err, ErrExpired) {
		t.Errorf("expired: %v", err)
	}
}

// Anything but regular files and folders in memory/ fails the commit,
// leaves nothing, and what a link points to is untouched.
func TestMemorySpecialFilesRefused(t *testing.T) {
	f := open(t, nil)
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, "keep me")
	cases := map[string]struct {
		make func(dir string) error
		want string
	}{
		"symlink":        {func(dir string) error { return os.Symlink(outside, filepath.Join(dir, "pages.img")) }, "symbolic link"},
		"nested symlink": {func(dir string) error { return os.Symlink(filepath.Dir(outside), filepath.Join(dir, "sub", "d")) }, "sub/d in the memory folder is a symbolic link"},
		"fifo":           {func(dir string) error { return unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600) }, "fifo"},
		"socket":         {func(dir string) error { return unix.Mknod(filepath.Join(dir, "sock"), unix.S_IFSOCK|0o600, 0) }, "socket"},
		"memory is a link": {func(dir string) error {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			return os.Symlink(filepath.Dir(outside), dir)
		}, "must stay a folder"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			w := createMem(t, f.s, "local", "bad", "tar", memFiles{"ok.img": "x", "sub/": ""})
			dir, _ := w.MemoryDir()
			if err := c.make(dir); err != nil {
				w.Abort()
				t.Fatal(err)
			}
			if _, err := w.Commit(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("commit: %v, want %q", err, c.want)
			}
			if got := f.list(t, "local"); len(got) != 0 {
				t.Errorf("kept %v", got)
			}
			if got := f.leftovers(t, "local"); len(got) != 0 {
				t.Errorf("left %v", got)
			}
			if data, err := os.ReadFile(outside); err != nil || string(data) != "keep me" {
				t.Errorf("the link's target: %q %v", data, err)
			}
		})
	}
}

// The owner's bound counts files.tar and memory/ together.
func TestMemoryBudget(t *testing.T) {
	f := open(t, func(o *Options) { o.MaxBytes = 10_000 })
	big := strings.Repeat("m", 3000)
	f.saveMem(t, "local", "a", "tar", memFiles{"p.img": big})
	f.saveMem(t, "local", "b", "tar", memFiles{"p.img": big})
	f.save(t, "local", "c", strings.Repeat("t", 3000))
	f.evs.take()
	saved := f.saveMem(t, "local", "d", "tar", memFiles{"p.img": big})
	if got := labels(saved.Evicted); !slices.Equal(got, []string{"a"}) {
		t.Errorf("evicted %v, want a (3003+3003+3000+3003 > 10000)", got)
	}
	if got := f.evs.take(); !slices.Equal(got, []string{"evicted local/a", "saved local/d"}) {
		t.Errorf("events %v", got)
	}
	// Over the bound alone: refused, nothing evicted, nothing left.
	w := createMem(t, f.s, "local", "e", "tar", memFiles{"p.img": strings.Repeat("m", 9998)})
	if _, err := w.Commit(); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("too large: %v", err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("kept %v", got)
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
	if got := f.evs.take(); len(got) != 0 {
		t.Errorf("events %v", got)
	}
}

// heldFixture saves a memory snapshot "a" and holds it.
func heldFixture(t *testing.T, change func(*Options)) (*fixture, Entry, string, func()) {
	t.Helper()
	f := open(t, change)
	f.saveMem(t, "local", "a", "tar-a", checkpoint)
	e, path, release, err := f.s.OpenMemory("local", "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return f, e, path, release
}

// whole checks that the reader's folder is as saved.
func whole(t *testing.T, path string) {
	t.Helper()
	want := memFiles{"checkpoint.img": checkpoint["checkpoint.img"], "pages.img": "0123456789", "sub/deeper/meta.img": "abc"}
	if got := readTree(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("the reader's memory folder holds %v", got)
	}
}

// waits runs op, checks it has not returned while the snapshot is held,
// releases it, and returns op's error.
func waits(t *testing.T, path string, release func(), op func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		t.Fatalf("returned while the snapshot was held: %v", err)
	case <-time.After(150 * time.Millisecond):
	}
	whole(t, path)
	release()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after release")
	}
	return nil
}

func TestMemoryHeldRemove(t *testing.T) {
	f, _, path, release := heldFixture(t, nil)
	if err := waits(t, path, release, func() error { return f.s.Remove("local", "a") }); err != nil {
		t.Fatal(err)
	}
	if got := f.list(t, "local"); len(got) != 0 {
		t.Errorf("kept %v", got)
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

func TestMemoryHeldTimesOut(t *testing.T) {
	f, e, path, _ := heldFixture(t, func(o *Options) { o.WaitHeld = 100 * time.Millisecond })
	if err := f.s.Remove("local", "a"); err == nil || !strings.Contains(err.Error(), "being restored") {
		t.Errorf("Remove of a held snapshot: %v", err)
	}
	f.clk.Add(time.Second)
	if _, err := save(f.s, "local", "a", "new"); err == nil || !strings.Contains(err.Error(), "being restored") {
		t.Errorf("replacing a held snapshot: %v", err)
	}
	whole(t, path)
	if es, err := f.s.List("local"); err != nil || len(es) != 1 || !es[0].Created.Equal(e.Created) {
		t.Errorf("after: %+v %v", es, err)
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

func TestMemoryHeldReplace(t *testing.T) {
	f, e, path, release := heldFixture(t, nil)
	var saved Saved
	err := waits(t, path, release, func() error {
		f.clk.Add(time.Second)
		var err error
		saved, err = createMem(t, f.s, "local", "a", "tar-b", memFiles{"new.img": "n"}).Commit()
		return err
	})
	if err != nil || !saved.Replaced || saved.MemoryBytes != 1 {
		t.Fatalf("replace: %+v %v", saved, err)
	}
	e2, path2, release2, err := f.s.OpenMemory("local", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer release2()
	if e2.Created.Equal(e.Created) || !reflect.DeepEqual(readTree(t, path2), memFiles{"new.img": "n"}) {
		t.Errorf("the new snapshot: %+v %v", e2, readTree(t, path2))
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

func TestMemoryHeldEvict(t *testing.T) {
	f, _, path, release := heldFixture(t, func(o *Options) { o.MaxCount = 1 })
	var saved Saved
	err := waits(t, path, release, func() error {
		var err error
		saved, err = save(f.s, "local", "b", "tar")
		return err
	})
	if err != nil || !slices.Equal(labels(saved.Evicted), []string{"a"}) {
		t.Fatalf("save: %+v %v", saved, err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("kept %v", got)
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

// Prune, the sweep and a save's expiry skip a held snapshot, and remove
// it once released.
func TestMemoryHeldExpired(t *testing.T) {
	f, _, path, release := heldFixture(t, nil)
	f.clk.Add(DefaultTTL)
	if removed, err := f.s.Prune(); err != nil || len(removed) != 0 {
		t.Errorf("Prune of a held snapshot: %v %v", labels(removed), err)
	}
	f.save(t, "local", "b", "tar")
	whole(t, path)
	release()
	if removed, err := f.s.Prune(); err != nil || !slices.Equal(labels(removed), []string{"a"}) {
		t.Errorf("Prune after release: %v %v", labels(removed), err)
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
}

// Every removal takes memory/ whole, nested folders too, and never
// follows a link in it.
func TestMemoryRemovalLeavesNothing(t *testing.T) {
	f := open(t, nil)
	outside := t.TempDir()
	write(t, filepath.Join(outside, "keep"), "keep me")
	nested := memFiles{"a/b/c/d/e.img": "e", "a/x.img": "x", "z/": "", "top.img": "t"}
	linked := func(w *Writer) {
		dir, _ := w.MemoryDir()
		if err := os.Symlink(outside, filepath.Join(dir, "a", "link")); err != nil {
			t.Fatal(err)
		}
	}
	// Abort, with a link the engine might have left.
	w := createMem(t, f.s, "local", "x", "tar", nested)
	linked(w)
	w.Abort()
	// Remove, replace, evict.
	f.saveMem(t, "local", "r", "tar", nested)
	if err := f.s.Remove("local", "r"); err != nil {
		t.Fatal(err)
	}
	f.saveMem(t, "local", "a", "tar", nested)
	f.saveMem(t, "local", "a", "tar", nested)
	f.s.maxCount = 1
	f.saveMem(t, "local", "b", "tar", nested)
	// Prune: a retired folder and an abandoned temporary one.
	odir := filepath.Join(f.dir, ownerDirName("local"))
	writeMem(t, filepath.Join(odir, tmpPrefix+"dead", memoryName), nested)
	writeMem(t, filepath.Join(odir, oldPrefix+"dead", memoryName), nested)
	if err := os.Symlink(outside, filepath.Join(odir, oldPrefix+"dead", memoryName, "a", "b", "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Prune(); err != nil {
		t.Fatal(err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("kept %v", got)
	}
	if got := f.leftovers(t, "local"); len(got) != 0 {
		t.Errorf("left %v", got)
	}
	if data, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(data) != "keep me" {
		t.Errorf("a link's target: %q %v", data, err)
	}
}

// meta.json and memory/ are checked when read back.
func TestMemoryTampered(t *testing.T) {
	f := open(t, nil)
	snap := filepath.Join(f.dir, ownerDirName("local"))
	for _, c := range []struct {
		name string
		edit func(dir string)
		list bool // still listed (checked only by OpenMemory)
	}{
		{"memory grew", func(dir string) { write(t, filepath.Join(dir, memoryName, "pages.img"), "01234567890") }, true},
		{"memory link", func(dir string) { os.Symlink("/", filepath.Join(dir, memoryName, "root")) }, true},
		{"memory gone", func(dir string) { os.RemoveAll(filepath.Join(dir, memoryName)) }, false},
		{"negative", func(dir string) { editMeta(t, dir, func(m map[string]any) { m["memory_bytes"] = -1 }) }, false},
		{"files with memory", func(dir string) { editMeta(t, dir, func(m map[string]any) { m["kind"] = KindFiles }) }, false},
	} {
		f.saveMem(t, "local", "m", "tar", checkpoint)
		c.edit(filepath.Join(snap, "m"))
		if got := f.list(t, "local"); (len(got) == 1) != c.list {
			t.Errorf("%s: listed %v", c.name, got)
		}
		if _, _, _, err := f.s.OpenMemory("local", "m"); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: OpenMemory %v", c.name, err)
		}
		if err := f.s.Remove("local", "m"); err != nil {
			t.Fatal(err)
		}
	}
}

// The audit and `bridge snapshots list --json` carry the memory's bytes.
func TestMemoryRecord(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := policy.OpenAuditor(policy.Audit{File: file}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	f := open(t, func(o *Options) { o.OnEvent = Audit(a) })
	saved := f.saveMem(t, "local", "warm", "tar", memFiles{"p.img": "12345"})
	a.Close()
	data, _ := os.ReadFile(file)
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil || rec["kind"] != KindMemory || rec["bytes"] != 3.0 || rec["memory_bytes"] != 5.0 {
		t.Errorf("record %s %v", data, err)
	}
	out, _ := json.Marshal(saved.Entry)
	if !strings.Contains(string(out), `"size":3,"memory_bytes":5,`) {
		t.Errorf("JSON %s", out)
	}
}
