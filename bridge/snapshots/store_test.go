package snapshots

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/bridge-mcp/bridge/policy"
)

// clock is a settable clock for a Store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// events collects a Store's events.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

// take returns the events so far as "action owner/label", and forgets
// them.
func (e *events) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.evs {
		out = append(out, ev.Action+" "+ev.Entry.Owner+"/"+ev.Entry.Label)
	}
	e.evs = nil
	return out
}

type fixture struct {
	s    *Store
	dir  string
	clk  *clock
	evs  *events
	logs *logBuffer
}

// logBuffer is a log's output, safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// open opens a Store in a new folder with a settable clock and no
// background sweep; change adjusts the options.
func open(t testing.TB, change func(*Options)) *fixture {
	t.Helper()
	f := &fixture{dir: filepath.Join(t.TempDir(), "snapshots"), clk: newClock(), evs: &events{}, logs: &logBuffer{}}
	opts := Options{Dir: f.dir, SweepEvery: -1, Now: f.clk.Now, OnEvent: f.evs.add, Logger: zerolog.New(f.logs)}
	if change != nil {
		change(&opts)
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.s = s
	t.Cleanup(func() { s.Close() })
	return f
}

// save saves data as owner's label, one second after the last save.
func (f *fixture) save(t testing.TB, owner, label, data string) Saved {
	t.Helper()
	f.clk.Add(time.Second)
	saved, err := save(f.s, owner, label, data)
	if err != nil {
		t.Fatalf("saving %s/%s: %v", owner, label, err)
	}
	return saved
}

func save(s *Store, owner, label, data string) (Saved, error) {
	w, err := s.Create(owner, label, Meta{Image: "runner:1", Engine: "docker", OCIRuntime: "runc", Extra: map[string]string{"session": "s1"}})
	if err != nil {
		return Saved{}, err
	}
	if _, err := io.Copy(w, strings.NewReader(data)); err != nil {
		return Saved{}, err
	}
	return w.Commit()
}

// get reads owner's label whole.
func (f *fixture) get(t testing.TB, owner, label string) (Entry, string) {
	t.Helper()
	e, r, err := f.s.Get(owner, label)
	if err != nil {
		t.Fatalf("Get %s/%s: %v", owner, label, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return e, string(data)
}

func labels(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Label)
	}
	return out
}

func (f *fixture) list(t testing.TB, owner string) []string {
	t.Helper()
	es, err := f.s.List(owner)
	if err != nil {
		t.Fatal(err)
	}
	return labels(es)
}

// leftovers are the names in owner's folder that are not snapshots.
func (f *fixture) leftovers(t testing.TB, owner string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(f.dir, ownerDirName(owner)))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if CheckLabel(e.Name()) != nil {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestSaveGetList(t *testing.T) {
	f := open(t, nil)
	saved := f.save(t, "local", "before-join", "tar bytes")
	if saved.Replaced || len(saved.Evicted) != 0 {
		t.Errorf("first save: %+v", saved)
	}
	want := Entry{Owner: "local", Label: "before-join", Size: 9, Created: f.clk.Now(), Expires: f.clk.Now().Add(DefaultTTL),
		Meta: Meta{Kind: KindFiles, Image: "runner:1", Engine: "docker", OCIRuntime: "runc", Extra: map[string]string{"session": "s1"}}}
	if !reflect.DeepEqual(saved.Entry, want) {
		t.Errorf("saved\n%+v\nwant\n%+v", saved.Entry, want)
	}
	e, data := f.get(t, "local", "before-join")
	if data != "tar bytes" || !reflect.DeepEqual(e, want) {
		t.Errorf("Get: %q %+v", data, e)
	}
	es, err := f.s.List("local")
	if err != nil || len(es) != 1 || !reflect.DeepEqual(es[0], want) {
		t.Errorf("List: %v %+v", err, es)
	}
	all, err := f.s.ListAll()
	if err != nil || len(all) != 1 || !reflect.DeepEqual(all[0], want) {
		t.Errorf("ListAll: %v %+v", err, all)
	}
	if got := f.evs.take(); !slices.Equal(got, []string{"saved local/before-join"}) {
		t.Errorf("events: %v", got)
	}
	// The files are private, and nothing else is left.
	for _, p := range []string{f.dir, filepath.Join(f.dir, ownerDirName("local")), filepath.Join(f.dir, ownerDirName("local"), "before-join")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", p, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(f.dir, ownerDirName("local"), "before-join", filesName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("files.tar: %v", err)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
	// An empty snapshot is one too.
	f.save(t, "local", "empty", "")
	if _, data := f.get(t, "local", "empty"); data != "" {
		t.Errorf("empty: %q", data)
	}
}

// A save replaces a label only on Commit: until then, the old one is
// read whole; a reader of the old one keeps it after.
func TestReplaceOnCommit(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "a", "one")
	w, err := f.s.Create("local", "a", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("two, longer")); err != nil {
		t.Fatal(err)
	}
	if _, data := f.get(t, "local", "a"); data != "one" {
		t.Errorf("before commit: %q", data)
	}
	_, r, err := f.s.Get("local", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f.clk.Add(time.Second)
	saved, err := w.Commit()
	if err != nil || !saved.Replaced || saved.Kind != KindFiles {
		t.Fatalf("commit: %+v %v", saved, err)
	}
	if _, data := f.get(t, "local", "a"); data != "two, longer" {
		t.Errorf("after commit: %q", data)
	}
	if old, err := io.ReadAll(r); err != nil || string(old) != "one" {
		t.Errorf("the reader of the old one: %q %v", old, err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("list: %v", got)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
	if _, err := w.Commit(); err == nil {
		t.Error("a second commit succeeded")
	}
	w.Abort() // after commit: nothing
	if _, data := f.get(t, "local", "a"); data != "two, longer" {
		t.Errorf("after abort of a committed writer: %q", data)
	}
}

func TestAbort(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "a", "one")
	w, err := f.s.Create("local", "a", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("two"))
	w.Abort()
	w.Abort()
	if _, err := w.Commit(); err == nil {
		t.Error("commit after abort succeeded")
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("write after abort succeeded")
	}
	if _, data := f.get(t, "local", "a"); data != "one" {
		t.Errorf("after abort: %q", data)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
}

// Another owner's label is not found, with the very error of a label no
// one has; no call of one owner reaches another's snapshots.
func TestAnotherOwnersLabel(t *testing.T) {
	f := open(t, nil)
	f.save(t, "alice", "x", "alice's")
	f.save(t, "carol", "y", "carol's")
	_, _, errBob := f.s.Get("bob", "x")
	_, _, errCarol := f.s.Get("carol", "x") // carol has a folder, without x
	_, _, errNone := f.s.Get("alice", "nope")
	for _, err := range []error{errBob, errCarol, errNone} {
		if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrExpired) {
			t.Errorf("Get of another's label: %v", err)
		}
	}
	if errBob.Error() != errCarol.Error() || errBob.Error() != strings.Replace(errNone.Error(), "nope", "x", 1) {
		t.Errorf("the errors differ:\n%v\n%v\n%v", errBob, errCarol, errNone)
	}
	if err := f.s.Remove("bob", "x"); !errors.Is(err, ErrNotFound) || err.Error() != errBob.Error() {
		t.Errorf("Remove of another's label: %v", err)
	}
	if got := f.list(t, "bob"); len(got) != 0 {
		t.Errorf("bob lists %v", got)
	}
	if _, data := f.get(t, "alice", "x"); data != "alice's" {
		t.Errorf("alice's x: %q", data)
	}
	// bob saving x makes his own.
	f.save(t, "bob", "x", "bob's")
	if _, data := f.get(t, "alice", "x"); data != "alice's" {
		t.Errorf("alice's x after bob's save: %q", data)
	}
	if _, data := f.get(t, "bob", "x"); data != "bob's" {
		t.Errorf("bob's x: %q", data)
	}
}

// Any principal name is safe: it is hashed into the folder's name.
func TestOwnerNames(t *testing.T) {
	f := open(t, nil)
	for _, owner := range []string{"../../etc", "/abs", "a/b", "über ✓", ".", "o-" + strings.Repeat("0", 64), strings.Repeat("x", MaxOwnerBytes)} {
		f.save(t, owner, "l", owner)
		if e, data := f.get(t, owner, "l"); data != owner || e.Owner != owner {
			t.Errorf("%q: %q %q", owner, data, e.Owner)
		}
	}
	ents, _ := os.ReadDir(f.dir)
	for _, e := range ents {
		if e.Name() != lockName && !isOwnerDirName(e.Name()) {
			t.Errorf("folder %q in the store", e.Name())
		}
	}
	all, err := f.s.ListAll()
	if err != nil || len(all) != 7 {
		t.Errorf("ListAll: %d %v", len(all), err)
	}
	for _, owner := range []string{"", "a\x00b", "a\nb", "\x1b[2K", string([]byte{0xff}), strings.Repeat("x", MaxOwnerBytes+1)} {
		if _, err := f.s.Create(owner, "l", Meta{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Create for owner %q: %v", owner, err)
		}
		if _, _, err := f.s.Get(owner, "l"); !errors.Is(err, ErrInvalid) {
			t.Errorf("Get for owner %q: %v", owner, err)
		}
	}
}

func TestLabelsAndMeta(t *testing.T) {
	f := open(t, nil)
	for _, label := range []string{"", ".x", "..", "a/b", "-a", "_a", "a b", strings.Repeat("a", 65), "é"} {
		if _, err := f.s.Create("local", label, Meta{}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "1 to 64 letters") {
			t.Errorf("label %q: %v", label, err)
		}
		if _, _, err := f.s.Get("local", label); !errors.Is(err, ErrInvalid) {
			t.Errorf("Get of label %q: %v", label, err)
		}
	}
	for _, label := range []string{"a", "A.b-c_d", "0", strings.Repeat("a", 64)} {
		f.save(t, "local", label, "x")
	}
	big := map[string]string{}
	for i := range MaxExtra + 1 {
		big[fmt.Sprint("k", i)] = "v"
	}
	for _, m := range []Meta{{Kind: "disk"}, {Image: strings.Repeat("i", MaxImageBytes+1)}, {Engine: "dock\ner"}, {OCIRuntime: strings.Repeat("r", 65)},
		{Extra: big}, {Extra: map[string]string{"a b": "v"}}, {Extra: map[string]string{"k": strings.Repeat("v", MaxExtraValue+1)}}, {Extra: map[string]string{"k": "\x1b"}}} {
		if _, err := f.s.Create("local", "m", m); !errors.Is(err, ErrInvalid) {
			t.Errorf("Meta %+v: %v", m, err)
		}
	}
	w, err := f.s.Create("local", "mem", Meta{Kind: KindMemory})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.MemoryDir(); err != nil {
		t.Fatal(err)
	}
	if saved, err := w.Commit(); err != nil || saved.Kind != KindMemory {
		t.Errorf("memory kind: %+v %v", saved, err)
	}
}

// Past MaxBytes a write fails, nothing is kept, and nothing is evicted.
func TestTooLarge(t *testing.T) {
	f := open(t, func(o *Options) { o.MaxBytes = 100 })
	f.save(t, "local", "a", strings.Repeat("a", 90))
	w, err := f.s.Create("local", "b", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Write(make([]byte, 60)); n != 60 || err != nil {
		t.Fatal(n, err)
	}
	n, err := w.Write(make([]byte, 41))
	if n != 0 || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "snapshots.max_bytes") {
		t.Errorf("write past the bound: %d %v", n, err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrTooLarge) {
		t.Errorf("write after: %v", err)
	}
	if _, err := w.Commit(); !errors.Is(err, ErrTooLarge) {
		t.Errorf("commit after: %v", err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("list: %v", got)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
	// Exactly the bound is kept (evicting a).
	saved := f.save(t, "local", "b", strings.Repeat("b", 100))
	if !slices.Equal(labels(saved.Evicted), []string{"a"}) {
		t.Errorf("evicted: %+v", saved.Evicted)
	}
}

// Past MaxCount or MaxBytes, a commit evicts the owner's oldest; another
// owner's are never touched; replacing a label does not count twice.
func TestEvictOldest(t *testing.T) {
	f := open(t, func(o *Options) { o.MaxCount = 3; o.MaxBytes = 100 })
	f.save(t, "other", "o1", strings.Repeat("o", 100))
	for _, l := range []string{"a", "b", "c"} {
		f.save(t, "local", l, "xx")
	}
	f.evs.take()
	saved := f.save(t, "local", "d", "xx")
	if got := labels(saved.Evicted); !slices.Equal(got, []string{"a"}) {
		t.Errorf("evicted %v", got)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("list %v", got)
	}
	if got := f.evs.take(); !slices.Equal(got, []string{"evicted local/a", "saved local/d"}) {
		t.Errorf("events %v", got)
	}
	saved = f.save(t, "local", "b", "xx") // a replacement: 3 still
	if !saved.Replaced || len(saved.Evicted) != 0 {
		t.Errorf("replace: %+v", saved)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"c", "d", "b"}) {
		t.Errorf("list %v", got)
	}
	saved = f.save(t, "local", "big", strings.Repeat("x", 97)) // bytes: c and d must go
	if got := labels(saved.Evicted); !slices.Equal(got, []string{"c", "d"}) {
		t.Errorf("evicted for bytes %v", got)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"b", "big"}) {
		t.Errorf("list %v", got)
	}
	if got := f.list(t, "other"); !slices.Equal(got, []string{"o1"}) {
		t.Errorf("other's: %v", got)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
}

// A snapshot past the TTL is not found, not listed, not counted, and
// removed by Prune or by the owner's next commit.
func TestTTL(t *testing.T) {
	f := open(t, func(o *Options) { o.TTL = time.Hour; o.MaxCount = 2 })
	f.save(t, "local", "a", "a")
	f.save(t, "local", "b", "b")
	f.save(t, "other", "c", "c")
	f.evs.take()
	f.clk.Add(59 * time.Minute)
	f.get(t, "local", "a")
	f.clk.Add(time.Minute - 2*time.Second) // a is an hour old, b an hour less a second
	_, _, err := f.s.Get("local", "a")
	if !errors.Is(err, ErrExpired) || !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "snapshots.ttl") {
		t.Errorf("Get of an expired one: %v", err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("list %v", got)
	}
	saved := f.save(t, "local", "d", "d") // b expires now too: none evicted
	if len(saved.Evicted) != 0 {
		t.Errorf("evicted %+v", saved.Evicted)
	}
	if got := f.evs.take(); !slices.Equal(got, []string{"expired local/a", "expired local/b", "saved local/d"}) {
		t.Errorf("events %v", got)
	}
	f.clk.Add(time.Second) // c is an hour old
	removed, err := f.s.Prune()
	if err != nil || !slices.Equal(labels(removed), []string{"c"}) {
		t.Errorf("Prune: %v %v", labels(removed), err)
	}
	if got := f.evs.take(); !slices.Equal(got, []string{"expired other/c"}) {
		t.Errorf("events %v", got)
	}
	for _, l := range []string{"a", "b"} {
		if _, err := os.Lstat(filepath.Join(f.dir, ownerDirName("local"), l)); !os.IsNotExist(err) {
			t.Errorf("%s still on disk: %v", l, err)
		}
	}
	// other's folder, empty now, goes at the next prune.
	f.s.Prune()
	if _, err := os.Lstat(filepath.Join(f.dir, ownerDirName("other"))); !os.IsNotExist(err) {
		t.Errorf("empty owner folder: %v", err)
	}
}

func TestRemove(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "a", "a")
	f.save(t, "local", "b", "b")
	f.evs.take()
	if err := f.s.Remove("local", "a"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Remove("local", "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("list %v", got)
	}
	if got := f.evs.take(); !slices.Equal(got, []string{"removed local/a"}) {
		t.Errorf("events %v", got)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
}

// A folder changed by hand is read with suspicion: what is wrong is
// skipped (with a log line), never served, never a crash, and the rest is
// listed.
func TestTamperedMetadata(t *testing.T) {
	for _, c := range []struct {
		name   string
		tamper func(t *testing.T, f *fixture, snap string)
	}{
		{"garbage", func(t *testing.T, f *fixture, snap string) { write(t, filepath.Join(snap, metaName), "{not json") }},
		{"wrong type", func(t *testing.T, f *fixture, snap string) {
			editMeta(t, snap, func(d map[string]any) { d["size"] = "1" })
		}},
		{"owner of another folder", func(t *testing.T, f *fixture, snap string) {
			editMeta(t, snap, func(d map[string]any) { d["owner"] = "alice" })
		}},
		{"label of another folder", func(t *testing.T, f *fixture, snap string) {
			editMeta(t, snap, func(d map[string]any) { d["label"] = "b" })
		}},
		{"newer format", func(t *testing.T, f *fixture, snap string) { editMeta(t, snap, func(d map[string]any) { d["v"] = 2 }) }},
		{"no time", func(t *testing.T, f *fixture, snap string) {
			editMeta(t, snap, func(d map[string]any) { delete(d, "created") })
		}},
		{"bad kind", func(t *testing.T, f *fixture, snap string) {
			editMeta(t, snap, func(d map[string]any) { d["kind"] = "x" })
		}},
		{"control characters", func(t *testing.T, f *fixture, snap string) {
			editMeta(t, snap, func(d map[string]any) { d["image"] = "\x1b[2K" })
		}},
		{"huge", func(t *testing.T, f *fixture, snap string) {
			editMeta(t, snap, func(d map[string]any) { d["pad"] = strings.Repeat("x", maxMetaBytes) })
		}},
		{"size", func(t *testing.T, f *fixture, snap string) { write(t, filepath.Join(snap, filesName), "longer data") }},
		{"no data", func(t *testing.T, f *fixture, snap string) { os.Remove(filepath.Join(snap, filesName)) }},
		{"meta a symlink", func(t *testing.T, f *fixture, snap string) {
			other := filepath.Join(t.TempDir(), "m.json")
			os.Rename(filepath.Join(snap, metaName), other)
			os.Symlink(other, filepath.Join(snap, metaName))
		}},
		{"data a symlink", func(t *testing.T, f *fixture, snap string) {
			other := filepath.Join(t.TempDir(), "d")
			os.Rename(filepath.Join(snap, filesName), other)
			os.Symlink(other, filepath.Join(snap, filesName))
		}},
		{"data a fifo", func(t *testing.T, f *fixture, snap string) {
			os.Remove(filepath.Join(snap, filesName))
			if err := unix.Mkfifo(filepath.Join(snap, filesName), 0o600); err != nil {
				t.Skip(err)
			}
		}},
		{"the snapshot a symlink to another owner's", func(t *testing.T, f *fixture, snap string) {
			os.RemoveAll(snap)
			os.Symlink(filepath.Join(f.dir, ownerDirName("alice"), "a"), snap)
		}},
		{"the snapshot a file", func(t *testing.T, f *fixture, snap string) {
			os.RemoveAll(snap)
			write(t, snap, "x")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := open(t, nil)
			f.save(t, "alice", "a", "alice's")
			f.save(t, "local", "a", "local's")
			f.save(t, "local", "ok", "fine")
			c.tamper(t, f, filepath.Join(f.dir, ownerDirName("local"), "a"))
			f.logs.Reset()
			if got := f.list(t, "local"); !slices.Equal(got, []string{"ok"}) {
				t.Errorf("list %v", got)
			}
			if !strings.Contains(f.logs.String(), "snapshots:") {
				t.Errorf("no log line: %q", f.logs.String())
			}
			if _, _, err := f.s.Get("local", "a"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get: %v", err)
			}
			all, err := f.s.ListAll()
			if err != nil || len(all) != 2 {
				t.Errorf("ListAll: %+v %v", all, err)
			}
			if _, err := f.s.Prune(); err != nil {
				t.Errorf("Prune: %v", err)
			}
			// A save replaces it; so does a remove remove it.
			f.save(t, "local", "a", "new")
			if _, data := f.get(t, "local", "a"); data != "new" {
				t.Errorf("after a save: %q", data)
			}
			c.tamper(t, f, filepath.Join(f.dir, ownerDirName("local"), "a"))
			if err := f.s.Remove("local", "a"); err != nil {
				t.Errorf("Remove of a damaged one: %v", err)
			}
			if _, data := f.get(t, "alice", "a"); data != "alice's" {
				t.Errorf("alice's: %q", data)
			}
		})
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// editMeta changes the snapshot's meta.json as JSON.
func editMeta(t *testing.T, snap string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(snap, metaName)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	edit(d)
	data, _ = json.Marshal(d)
	write(t, p, string(data))
}

// Symbolic links in the store's folder are never followed.
func TestSymlinks(t *testing.T) {
	f := open(t, nil)
	f.save(t, "alice", "a", "alice's")
	elsewhere := t.TempDir()
	// An owner's folder that is a link: nothing is written through it,
	// nothing read.
	if err := os.Symlink(elsewhere, filepath.Join(f.dir, ownerDirName("bob"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Create("bob", "a", Meta{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Create through a link: %v", err)
	}
	if _, _, err := f.s.Get("bob", "a"); err == nil {
		t.Error("Get through a link succeeded")
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("written through the link: %v", ents)
	}
	// The owner's folder a link to alice's: not alice's snapshots.
	os.Remove(filepath.Join(f.dir, ownerDirName("bob")))
	os.Symlink(filepath.Join(f.dir, ownerDirName("alice")), filepath.Join(f.dir, ownerDirName("bob")))
	if _, _, err := f.s.Get("bob", "a"); err == nil {
		t.Error("bob reads alice's through a link")
	}
	if es, _ := f.s.List("bob"); len(es) != 0 {
		t.Errorf("bob lists %v", es)
	}
	if all, err := f.s.ListAll(); err != nil || len(all) != 1 {
		t.Errorf("ListAll: %+v %v", all, err)
	}
	// The lock file a link: refused.
	os.Remove(filepath.Join(f.dir, lockName))
	target := filepath.Join(elsewhere, "lock")
	os.Symlink(target, filepath.Join(f.dir, lockName))
	if _, err := f.s.List("alice"); err == nil {
		t.Error("List with the lock file a link succeeded")
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("the link's target was created: %v", err)
	}
}

// Of writers of one label at once, each commit replaces the one before:
// one of them is kept, whole, and nothing else is left.
func TestConcurrentCreateOneLabel(t *testing.T) {
	f := open(t, nil)
	// A second store on the same folder, as a second bridge.
	s2, err := Open(Options{Dir: f.dir, SweepEvery: -1, Now: f.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := f.s
			if i%2 == 1 {
				s = s2
			}
			data := strings.Repeat(fmt.Sprint(i%10), 10000+i)
			_, err := save(s, "local", "same", data)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	e, data := f.get(t, "local", "same")
	i := int(e.Size) - 10000
	if i < 0 || i >= n || data != strings.Repeat(fmt.Sprint(i%10), 10000+i) {
		t.Errorf("kept %d bytes, not one writer's whole", len(data))
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"same"}) {
		t.Errorf("list %v", got)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
}

// Two stores on one folder (two bridges of one user) keep the bounds
// between them, and each sees the other's snapshots.
func TestTwoStoresShareFolder(t *testing.T) {
	f := open(t, func(o *Options) { o.MaxCount = 5 })
	s2, err := Open(Options{Dir: f.dir, SweepEvery: -1, MaxCount: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	f.save(t, "local", "from1", "1")
	if _, r, err := s2.Get("local", "from1"); err != nil {
		t.Errorf("the other store: %v", err)
	} else {
		r.Close()
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := f.s
			if i%2 == 1 {
				s = s2
			}
			if _, err := save(s, "local", fmt.Sprint("l", i), "x"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := f.list(t, "local"); len(got) != 5 {
		t.Errorf("%d kept, want 5: %v", len(got), got)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
}

// The store is its folder: a new one (after a restart) finds every
// snapshot.
func TestReopen(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "a", "kept")
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Dir: f.dir, SweepEvery: -1, Now: f.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, r, err := s.Get("local", "a")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if data, _ := io.ReadAll(r); string(data) != "kept" {
		t.Errorf("%q", data)
	}
}

// What writers that died left is removed by Prune; a writer still writing
// is not disturbed.
func TestPruneLeftovers(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "a", "a")
	w, err := f.s.Create("local", "b", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("being written"))
	odir := filepath.Join(f.dir, ownerDirName("local"))
	dead := filepath.Join(odir, tmpPrefix+"dead")
	os.Mkdir(dead, 0o700)
	write(t, filepath.Join(dead, filesName), "half")
	os.Mkdir(filepath.Join(odir, oldPrefix+"x"), 0o700)
	write(t, filepath.Join(odir, oldPrefix+"x", filesName), "old")
	os.Mkdir(filepath.Join(f.dir, ownerDirName("gone")), 0o700)
	// Prune from another store, as another bridge would.
	s2, err := Open(Options{Dir: f.dir, SweepEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Prune(); err != nil {
		t.Fatal(err)
	}
	if l := f.leftovers(t, "local"); len(l) != 1 || !strings.HasPrefix(l[0], tmpPrefix) || l[0] == tmpPrefix+"dead" {
		t.Errorf("leftovers: %v", l)
	}
	if _, err := os.Lstat(filepath.Join(f.dir, ownerDirName("gone"))); !os.IsNotExist(err) {
		t.Errorf("empty owner folder: %v", err)
	}
	if saved, err := w.Commit(); err != nil || saved.Size != 13 {
		t.Errorf("the writer after Prune: %+v %v", saved, err)
	}
	if got := f.list(t, "local"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("list %v", got)
	}
}

// The background sweep removes expired snapshots without a call.
func TestSweep(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "a", "a")
	f.s.Close()
	clk := newClock()
	clk.Add(30 * 24 * time.Hour)
	swept := make(chan Event, 1)
	s, err := Open(Options{Dir: f.dir, SweepEvery: time.Hour, Now: clk.Now, OnEvent: func(e Event) { swept <- e }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case e := <-swept:
		if e.Action != ActionExpired || e.Entry.Label != "a" {
			t.Errorf("%+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no sweep")
	}
}

func TestClosed(t *testing.T) {
	f := open(t, nil)
	f.save(t, "local", "a", "a")
	w, err := f.s.Create("local", "b", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("b"))
	f.s.Close()
	if _, err := w.Commit(); !errors.Is(err, ErrClosed) {
		t.Errorf("commit after close: %v", err)
	}
	if l := f.leftovers(t, "local"); len(l) != 0 {
		t.Errorf("leftovers: %v", l)
	}
	if _, _, err := f.s.Get("local", "a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Get: %v", err)
	}
	if _, err := f.s.Create("local", "c", Meta{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Create: %v", err)
	}
	if err := f.s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	write(t, file, "x")
	shared := filepath.Join(dir, "shared")
	os.Mkdir(shared, 0o700)
	os.Chmod(shared, 0o770)
	for _, c := range []struct{ dir, want string }{
		{"", "not an absolute path"}, {"rel/dir", "not an absolute path"},
		{file, "not a directory"}, {shared, "writable by its group or others"},
	} {
		if s, err := Open(Options{Dir: c.dir, SweepEvery: -1}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q): %v", c.dir, err)
			if s != nil {
				s.Close()
			}
		}
	}
	if _, err := Open(Options{Dir: dir, MaxCount: -1}); err == nil {
		t.Error("a negative bound was taken")
	}
}

// The entries' JSON is what `bridge snapshots list --json` prints.
func TestEntryJSON(t *testing.T) {
	e := Entry{Owner: "local", Label: "a", Meta: Meta{Kind: KindFiles, Engine: "docker"}, Size: 3,
		Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Expires: time.Date(2026, 1, 8, 0, 0, 0, 0, time.UTC)}
	data, _ := json.Marshal(e)
	want := `{"owner":"local","label":"a","kind":"files","engine":"docker","size":3,"created":"2026-01-01T00:00:00Z","expires":"2026-01-08T00:00:00Z"}`
	if string(data) != want {
		t.Errorf("%s\nwant\n%s", data, want)
	}
}

// Audit writes each event as a snapshot record, without content.
func TestAudit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := policy.OpenAuditor(policy.Audit{File: file}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	f := open(t, func(o *Options) { o.OnEvent = Audit(a); o.MaxCount = 1 })
	f.save(t, "local", "a", "secret content")
	f.save(t, "local", "b", "secret content")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || strings.Contains(string(data), "secret") {
		t.Fatalf("records:\n%s", data)
	}
	var rec map[string]any
	json.Unmarshal([]byte(lines[1]), &rec)
	if rec["event"] != "snapshot" || rec["action"] != "evicted" || rec["client"] != "local" || rec["label"] != "a" || rec["bytes"] != 14.0 || rec["kind"] != "files" {
		t.Errorf("evicted: %v", rec)
	}
}
