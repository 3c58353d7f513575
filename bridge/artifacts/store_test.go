package artifacts

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// clock is a settable clock for a Store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

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

// openTestStore opens a Store in a new folder; changes counts OnChange.
func openTestStore(t *testing.T, opts StoreOptions) (s *Store, changes *atomic.Int32) {
	t.Helper()
	changes = new(atomic.Int32)
	if opts.Dir == "" {
		opts.Dir = filepath.Join(t.TempDir(), "artifacts")
	}
	if opts.OnChange == nil {
		opts.OnChange = func() { changes.Add(1) }
	}
	s, err := OpenStore(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, changes
}

// put stores data as name for run, as a Collector would.
func put(s *Store, run, name string, data []byte) (Entry, error) {
	w, err := s.begin(run, name, int64(len(data)))
	if err != nil {
		return Entry{}, err
	}
	for p := data; len(p) > 0; {
		n := min(len(p), 1000)
		if _, err := w.Write(p[:n]); err != nil {
			return Entry{}, err
		}
		p = p[n:]
	}
	mime, kind, _ := Classify(name, data)
	return w.commit(mime, kind)
}

func mustPut(t *testing.T, s *Store, run, name, data string) Entry {
	t.Helper()
	e, err := put(s, run, name, []byte(data))
	if err != nil {
		t.Fatalf("storing %s for %s: %v", name, run, err)
	}
	return e
}

// read opens uri in s and reads it all.
func read(s *Store, uri string) (Entry, string, error) {
	e, r, err := s.Open(uri)
	if err != nil {
		return e, "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return e, string(b), err
}

// filesIn lists the regular files and links under dir, relative to it.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOpenStoreFolder(t *testing.T) {
	base := t.TempDir()
	// Missing: created, 0700, parents too.
	dir := filepath.Join(base, "a", "b")
	s, err := OpenStore(StoreOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Errorf("created folder: %v, %v", fi.Mode(), err)
	}
	// A symbolic link to a good folder is followed (there only).
	link := filepath.Join(base, "link")
	os.Symlink(dir, link)
	if s, err := OpenStore(StoreOptions{Dir: link}); err != nil {
		t.Errorf("through a link: %v", err)
	} else {
		s.Close()
	}

	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o770)
	world := filepath.Join(base, "world")
	os.Mkdir(world, 0o700)
	os.Chmod(world, os.ModeSticky|0o777) // like /tmp
	for _, tt := range []struct {
		dir, want string
	}{
		{"", "not an absolute path"},
		{"relative/dir", "not an absolute path"},
		{file, "not a directory"},
		{filepath.Join(file, "sub"), "not a directory"},
		{open, "writable by its group or others (mode 0770): chmod 700"},
		{world, "writable by its group or others (mode 1777)"},
	} {
		if s, err := OpenStore(StoreOptions{Dir: tt.dir}); err == nil {
			s.Close()
			t.Errorf("OpenStore(%q) worked; want an error with %q", tt.dir, tt.want)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("OpenStore(%q): %v; want %q", tt.dir, err, tt.want)
		}
	}
	if _, err := OpenStore(StoreOptions{Dir: dir, Expiry: -time.Second}); err == nil {
		t.Error("a negative expiry was taken")
	}
}

func TestOpenStoreRefusesOthersFolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a folder away")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	os.Mkdir(dir, 0o700)
	if err := os.Chown(dir, 1, 1); err != nil {
		t.Fatal(err)
	}
	if s, err := OpenStore(StoreOptions{Dir: dir}); err == nil {
		s.Close()
		t.Error("a folder of uid 1 was taken")
	} else if !strings.Contains(err.Error(), "belongs to uid 1, not to this user") {
		t.Errorf("error %v", err)
	}
}

func TestOpenStoreRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	old := clk.Now().Add(-2 * time.Hour)
	mk := func(name string, mtime time.Time) {
		p := filepath.Join(dir, name)
		os.MkdirAll(p, 0o700)
		os.WriteFile(filepath.Join(p, "f.csv"), []byte("x"), 0o600)
		os.Chtimes(p, mtime, mtime)
	}
	mk("run-old1", old)
	mk("run-fresh", clk.Now().Add(-time.Minute))
	mk("notarun", old)
	mk("run-UPPER", old)
	mk("run-", old)
	target := filepath.Join(t.TempDir(), "target")
	mk2 := filepath.Join(target)
	os.Mkdir(mk2, 0o700)
	os.WriteFile(filepath.Join(target, "keep"), []byte("x"), 0o600)
	os.Symlink(target, filepath.Join(dir, "run-link"))
	os.WriteFile(filepath.Join(dir, "run-file"), []byte("x"), 0o600)

	openTestStore(t, StoreOptions{Dir: dir, Now: clk.Now, Expiry: time.Hour})
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	want := []string{"notarun", "run-", "run-UPPER", "run-file", "run-fresh", "run-link"}
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if _, err := os.Stat(filepath.Join(target, "keep")); err != nil {
		t.Errorf("a link's target was touched: %v", err)
	}
}

func TestStoreKeepsFiles(t *testing.T) {
	clk := newClock()
	s, changes := openTestStore(t, StoreOptions{Now: clk.Now, Expiry: time.Hour})
	e := mustPut(t, s, "run1", "plots/a.csv", "a,b\n1,2\n")
	want := Entry{URI: "bridge://runs/run1/plots_a.csv", Run: "run1", Name: "plots_a.csv", MIME: "text/csv", Kind: Text, Size: 8,
		Created: clk.Now(), Expires: clk.Now().Add(time.Hour)}
	if e != want {
		t.Errorf("entry %+v, want %+v", e, want)
	}
	// The same name again, and one that sanitises to it: never replaced.
	e2 := mustPut(t, s, "run1", "plots/a.csv", "second")
	e3 := mustPut(t, s, "run1", "plots_a.csv", "third")
	if e2.Name != "plots_a (2).csv" || e3.Name != "plots_a (3).csv" || e2.URI != "bridge://runs/run1/plots_a%20%282%29.csv" {
		t.Errorf("names %q, %q (%s)", e2.Name, e3.Name, e2.URI)
	}
	mustPut(t, s, "run2", "img.png", pngSig)
	if got := changes.Load(); got != 4 {
		t.Errorf("OnChange called %d times, want 4", got)
	}

	list := s.List()
	var uris []string
	for _, e := range list {
		uris = append(uris, e.URI)
	}
	if wantURIs := []string{e.URI, e2.URI, e3.URI, "bridge://runs/run2/img.png"}; !slices.Equal(uris, wantURIs) {
		t.Errorf("List: %q, want %q", uris, wantURIs)
	}
	for uri, data := range map[string]string{e.URI: "a,b\n1,2\n", e2.URI: "second", e3.URI: "third"} {
		if got, body, err := read(s, uri); err != nil || body != data || got.URI != uri {
			t.Errorf("Open(%s) = %+v, %q, %v", uri, got, body, err)
		}
	}
	// On disk: modes, and no temporary file left.
	runDir := filepath.Join(s.dir, "run-run1")
	if fi, err := os.Stat(runDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("run folder: %v %v", fi.Mode(), err)
	}
	files := filesIn(t, s.dir)
	if want := []string{"run-run1/plots_a (2).csv", "run-run1/plots_a (3).csv", "run-run1/plots_a.csv", "run-run2/img.png"}; !slices.Equal(files, want) {
		t.Errorf("files %q, want %q", files, want)
	}
	fi, _ := os.Stat(filepath.Join(runDir, "plots_a.csv"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v", fi.Mode())
	}

	for _, uri := range []string{"bridge://runs/run1/nope.csv", "bridge://runs/run9/plots_a.csv"} {
		if _, _, err := s.Open(uri); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "run the code again") {
			t.Errorf("Open(%s): %v, want ErrNotFound", uri, err)
		}
	}
	for _, uri := range []string{"bridge://runs/run1/..%2Frun2%2Fimg.png", "bridge://runs/run1/%2e%2e", "file:///etc/passwd"} {
		if _, _, err := s.Open(uri); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not a file of this bridge") {
			t.Errorf("Open(%s): %v, want ErrNotFound", uri, err)
		}
	}
}

func TestStoreExpires(t *testing.T) {
	clk := newClock()
	s, changes := openTestStore(t, StoreOptions{Now: clk.Now, Expiry: time.Hour})
	a := mustPut(t, s, "r1", "a.txt", "a")
	clk.Add(30 * time.Minute)
	b := mustPut(t, s, "r2", "b.txt", "b")
	clk.Add(30 * time.Minute) // a expires now
	n := changes.Load()
	if list := s.List(); len(list) != 1 || list[0].URI != b.URI {
		t.Errorf("List after a's expiry: %+v", list)
	}
	if changes.Load() != n+1 {
		t.Error("an expiry did not call OnChange")
	}
	_, _, err := s.Open(a.URI)
	if !errors.Is(err, ErrExpired) || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "expired 1h after it was made (artifacts.expiry)") {
		t.Errorf("Open of an expired file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "run-r1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the emptied run folder is still there: %v", err)
	}
	clk.Add(30 * time.Minute)
	if _, _, err := s.Open(b.URI); !errors.Is(err, ErrExpired) {
		t.Errorf("Open of b after its expiry: %v", err)
	}
	if files := filesIn(t, s.dir); len(files) != 0 {
		t.Errorf("files left: %q", files)
	}
	// A file made again under the same name is found again.
	mustPut(t, s, "r1", "a.txt", "again")
	if _, body, err := read(s, a.URI); err != nil || body != "again" {
		t.Errorf("Open of a file made again: %q, %v", body, err)
	}
}

// TestStoreExpiryTimer: files expire with no call to the Store, and
// OnChange says so.
func TestStoreExpiryTimer(t *testing.T) {
	changed := make(chan struct{}, 10)
	s, _ := openTestStore(t, StoreOptions{Expiry: 50 * time.Millisecond, OnChange: func() { changed <- struct{}{} }})
	mustPut(t, s, "r1", "a.txt", "a")
	<-changed // stored
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("the file did not expire")
	}
	if files := filesIn(t, s.dir); len(files) != 0 {
		t.Errorf("files left: %q", files)
	}
}

func TestStoreMaxBytesKept(t *testing.T) {
	clk := newClock()
	s, _ := openTestStore(t, StoreOptions{Now: clk.Now, MaxBytesKept: 100})
	a := mustPut(t, s, "r1", "a", strings.Repeat("a", 40))
	clk.Add(time.Second)
	b := mustPut(t, s, "r2", "b", strings.Repeat("b", 40))
	clk.Add(time.Second)
	c := mustPut(t, s, "r3", "c", strings.Repeat("c", 40)) // a goes
	if _, _, err := s.Open(a.URI); !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "make room for newer files (artifacts.max_bytes_kept)") {
		t.Errorf("Open of a file removed for room: %v", err)
	}
	for _, e := range []Entry{b, c} {
		if _, _, err := read(s, e.URI); err != nil {
			t.Errorf("Open(%s): %v", e.URI, err)
		}
	}
	// A run's own files are not removed for it.
	mustPut(t, s, "r3", "c2", strings.Repeat("c", 40)) // b goes
	if _, err := put(s, "r3", "c3", []byte(strings.Repeat("c", 40))); err == nil || !strings.Contains(err.Error(), "the host folder is full") {
		t.Errorf("a run filling the folder with its own files: %v", err)
	}
	if _, err := put(s, "r4", "huge", make([]byte, 101)); err == nil || !strings.Contains(err.Error(), "over the 100 bytes the host folder keeps in all (artifacts.max_bytes_kept)") {
		t.Errorf("a file over max_bytes_kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "run-r4")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a run folder is left for nothing: %v", err)
	}
	if s.kept != 80 || s.reserved != 0 {
		t.Errorf("kept %d, reserved %d", s.kept, s.reserved)
	}
}

func TestStoreClose(t *testing.T) {
	s, _ := openTestStore(t, StoreOptions{})
	a := mustPut(t, s, "r1", "a.txt", "a")
	w, err := s.begin("r2", "inflight.bin", 10) // being written
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("12345"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if files := filesIn(t, s.dir); len(files) != 0 {
		t.Errorf("files left after Close: %q", files)
	}
	w.Write([]byte("67890"))
	if _, err := w.commit("x", Blob); err == nil {
		t.Error("a file was kept after Close")
	}
	if _, _, err := s.Open(a.URI); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open after Close: %v", err)
	}
	if len(s.List()) != 0 {
		t.Error("List after Close is not empty")
	}
	if _, err := s.begin("r3", "x", 1); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("begin after Close: %v", err)
	}
	if files := filesIn(t, s.dir); len(files) != 0 {
		t.Errorf("files left: %q", files)
	}
}

func TestStoreWriteFailures(t *testing.T) {
	s, _ := openTestStore(t, StoreOptions{})
	// More than announced.
	w, _ := s.begin("r1", "a", 3)
	if _, err := w.Write([]byte("1234")); err == nil {
		t.Error("4 bytes of 3 were taken")
	}
	// Fewer than announced.
	w2, _ := s.begin("r1", "b", 3)
	w2.Write([]byte("12"))
	if _, err := w2.commit("x", Blob); err == nil {
		t.Error("2 bytes of 3 were kept")
	}
	// The disk fails (the file is closed under it).
	w3, _ := s.begin("r1", "c", 3)
	w3.f.Close()
	if _, err := w3.Write([]byte("1")); err == nil || !strings.Contains(err.Error(), "writing to artifacts.dir") {
		t.Errorf("a failed write: %v", err)
	}
	// Aborted.
	w4, _ := s.begin("r1", "d", 3)
	w4.abort()
	w4.abort()
	if files := filesIn(t, s.dir); len(files) != 0 {
		t.Errorf("files left: %q", files)
	}
	if s.reserved != 0 || len(s.runs) != 0 {
		t.Errorf("reserved %d, runs %v", s.reserved, s.runs)
	}
	if _, err := s.begin("Bad-Run", "a", 1); err == nil {
		t.Error("a bad run id was taken")
	}
	if _, err := s.begin("r1", "../..", 1); err == nil {
		t.Error("a name with nothing left was taken")
	}
}

// TestStoreHostileNames: whatever the names, every file lands in its run's
// folder, and nothing outside the store changes.
func TestStoreHostileNames(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o700)
	os.WriteFile(filepath.Join(outside, "passwd"), []byte("secret"), 0o600)
	s, _ := openTestStore(t, StoreOptions{Dir: filepath.Join(base, "store")})
	names := []string{
		"../../etc/passwd", "../outside/passwd", "/etc/passwd", "..", ".", "...", ".hidden", "a/../../b", "a\x00b", "\x00",
		"a\nb", "\x1b[2J", "-rf", "~", "evil\u202egnp.png", "\xff\xfe", strings.Repeat("a", 4096), strings.Repeat("../", 1500) + "x",
		strings.Repeat("x/", 2000) + "y", strings.Repeat("é", 4096) + ".png", "con", "nul", ".tmp-0000", "run-x", "a\\..\\..\\b",
		".tmp-000000000000000000000000",
	}
	for i, name := range names {
		e, err := put(s, "r1", name, []byte(fmt.Sprint(i)))
		if err != nil {
			if _, serr := SanitiseName(name); serr == nil {
				t.Errorf("storing %.40q: %v", name, err)
			}
			continue
		}
		p := filepath.Join(s.dir, "run-r1", e.Name)
		if filepath.Dir(p) != filepath.Join(s.dir, "run-r1") {
			t.Errorf("%.40q stored as %q: outside the run folder", name, e.Name)
		}
		if strings.HasPrefix(e.Name, ".") {
			t.Errorf("%.40q stored as %q: hidden", name, e.Name)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != fmt.Sprint(i) {
			t.Errorf("%.40q stored as %q: %q, %v", name, e.Name, b, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "passwd")); string(b) != "secret" {
		t.Error("a file outside the store changed")
	}
	if files := filesIn(t, outside); len(files) != 1 {
		t.Errorf("outside: %q", files)
	}
	for _, f := range filesIn(t, s.dir) {
		if filepath.Dir(f) != "run-r1" {
			t.Errorf("a file at %q", f)
		}
	}
}

// TestStorePlantedLinks: a concurrent actor with access to the folder
// plants symbolic links or swaps files; nothing is followed, nothing
// outside is written or served.
func TestStorePlantedLinks(t *testing.T) {
	base := t.TempDir()
	secret := filepath.Join(base, "secret")
	os.WriteFile(secret, []byte("secret"), 0o600)
	otherDir := filepath.Join(base, "other")
	os.Mkdir(otherDir, 0o700)
	s, _ := openTestStore(t, StoreOptions{Dir: filepath.Join(base, "store")})
	run := filepath.Join(s.dir, "run-r1")

	// The file's name taken by a link before it is linked: it gets another.
	w, err := s.begin("r1", "a.csv", 1)
	if err != nil {
		t.Fatal(err)
	}
	os.Symlink(secret, filepath.Join(run, "a.csv"))
	w.Write([]byte("x"))
	e, err := w.commit("text/csv", Text)
	if err != nil || e.Name != "a (2).csv" {
		t.Errorf("commit past a planted link: %+v, %v", e, err)
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret" {
		t.Error("the link's target was written")
	}

	// Swapped for another regular file of the same size (the first kept
	// aside, so that its inode is not reused): not served.
	os.Rename(filepath.Join(run, "a (2).csv"), filepath.Join(base, "aside"))
	os.WriteFile(filepath.Join(run, "a (2).csv"), []byte("y"), 0o600)
	if _, body, err := read(s, e.URI); err == nil || !strings.Contains(err.Error(), "changed on the host") {
		t.Errorf("a swapped file was served: %q, %v", body, err)
	}
	// Swapped for a link to a secret: not followed.
	os.Remove(filepath.Join(run, "a (2).csv"))
	os.Symlink(secret, filepath.Join(run, "a (2).csv"))
	if _, body, err := read(s, e.URI); err == nil || body != "" {
		t.Errorf("a planted link was followed: %q, %v", body, err)
	}
	// A FIFO in its place: not opened (that would block).
	b := mustPut(t, s, "r1", "b.txt", "b")
	os.Remove(filepath.Join(run, "b.txt"))
	if err := mkfifo(filepath.Join(run, "b.txt")); err == nil {
		if _, _, err := s.Open(b.URI); err == nil {
			t.Error("a FIFO was served")
		}
	}

	// The run folder swapped for a link to another folder with the file.
	c := mustPut(t, s, "r2", "c.txt", "c")
	os.WriteFile(filepath.Join(otherDir, "c.txt"), []byte("c"), 0o600)
	os.RemoveAll(filepath.Join(s.dir, "run-r2"))
	os.Symlink(otherDir, filepath.Join(s.dir, "run-r2"))
	if _, _, err := s.Open(c.URI); err == nil {
		t.Error("a file through a linked run folder was served")
	}
	// A run folder planted before the run stores anything: not used.
	os.Symlink(otherDir, filepath.Join(s.dir, "run-r3"))
	if _, err := put(s, "r3", "d.txt", []byte("d")); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("storing into a planted run folder: %v", err)
	}
	if files := filesIn(t, otherDir); !slices.Equal(files, []string{"c.txt"}) {
		t.Errorf("written outside: %q", files)
	}
}

// TestStoreConcurrent: runs storing, listing, reading and expiring at
// once (for the race detector).
func TestStoreConcurrent(t *testing.T) {
	clk := newClock()
	s, _ := openTestStore(t, StoreOptions{Now: clk.Now, Expiry: time.Minute, MaxBytesKept: 20 << 10})
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Go(func() {
			run := fmt.Sprintf("run%d", r)
			for i := range 40 {
				e, err := put(s, run, fmt.Sprintf("f%d.txt", i%5), []byte(strings.Repeat("x", 1000)))
				if err != nil {
					continue
				}
				if _, _, err := read(s, e.URI); err != nil && !errors.Is(err, ErrExpired) {
					t.Errorf("Open(%s): %v", e.URI, err)
				}
				s.List()
				clk.Add(time.Second)
			}
		})
	}
	wg.Wait()
	var total int64
	for _, e := range s.List() {
		total += e.Size
	}
	if total > 20<<10 || total != s.kept {
		t.Errorf("kept %d bytes (counted %d), max %d", total, s.kept, 20<<10)
	}
}

func mkfifo(p string) error { return unix.Mkfifo(p, 0o600) }
