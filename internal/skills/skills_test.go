package skills

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func newStore(t *testing.T, lim Limits) *Store {
	t.Helper()
	st, err := Open(filepath.Join(t.TempDir(), "skills"), lim)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// files are the names in the store's folder, temporary files included.
func files(t *testing.T, st *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(st.Dir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestSaveGetListRemove(t *testing.T) {
	st := newStore(t, DefaultLimits())
	s := Skill{Name: "top_repos", Description: "the n most starred", Signature: "(n=5)", Servers: []string{"github"}, Source: "def top_repos(n=5):\n    return n\n"}
	if _, err := st.Save(s, false); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get("top_repos")
	if err != nil || got.Source != s.Source || got.Signature != "(n=5)" || got.Saved.IsZero() || got.Servers[0] != "github" {
		t.Fatalf("Get: %+v %v", got, err)
	}
	if _, err := st.Save(s, false); !errors.Is(err, ErrExists) {
		t.Errorf("second save without overwrite: %v", err)
	}
	s.Source = "def top_repos(n=10):\n    return n\n"
	if replaced, err := st.Save(s, true); err != nil || !replaced {
		t.Fatalf("overwrite: replaced %v, %v", replaced, err)
	}
	if got, _ := st.Get("top_repos"); !strings.Contains(got.Source, "n=10") {
		t.Errorf("overwrite did not replace: %q", got.Source)
	}
	list, err := st.List()
	if err != nil || len(list) != 1 || list[0].Name != "top_repos" || list[0].Source != "" {
		t.Errorf("List: %+v %v", list, err)
	}
	if err := st.Remove("top_repos"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get("top_repos"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Remove: %v", err)
	}
	if err := st.Remove("top_repos"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove: %v", err)
	}
	if f := files(t, st); len(f) != 0 {
		t.Errorf("files left: %v", f)
	}
}

// Every bad save is refused with a clear error and writes nothing.
func TestSaveRefusals(t *testing.T) {
	st := newStore(t, Limits{MaxCount: 2, MaxBytes: 100})
	ok := "def f():\n    pass\n"
	for _, c := range []struct {
		s    Skill
		want string
	}{
		{Skill{Name: "", Source: ok}, "needs a name"},
		{Skill{Name: "../x", Source: ok}, "not valid"},
		{Skill{Name: "X", Source: ok}, "not valid"},
		{Skill{Name: "_private", Source: ok}, "not valid"},
		{Skill{Name: strings.Repeat("a", 300), Source: ok}, "not valid"},
		{Skill{Name: "os", Source: ok}, "taken by Python"},
		{Skill{Name: "json", Source: ok}, "taken by Python"},
		{Skill{Name: "mcp_tools", Source: ok}, "mcp_tools"},
		{Skill{Name: "lambda", Source: ok}, "taken by Python"},
		{Skill{Name: "big", Source: strings.Repeat("#", 101)}, "over the 100"},
		{Skill{Name: "empty", Source: "  \n"}, "empty"},
		{Skill{Name: "nul", Source: "x = 1\x00"}, "control character"},
		{Skill{Name: "esc", Source: "x = 1  # \x1b[2K\x1b[1A hidden\n"}, "control character"},
		{Skill{Name: "bad_utf8", Source: "x = '\xff'\n"}, "not UTF-8 text"},
		// Trojan Source: bidi controls reorder what a reviewer sees; zero-
		// width and tag characters hide text from them.
		{Skill{Name: "bidi_rlo", Source: "access = 'user\u202e \u2066# admin\u2069 \u2066'\n"}, "invisible or bidi"},
		{Skill{Name: "bidi_lri", Source: "x = 1  # \u2066hidden\u2069\n"}, "invisible or bidi"},
		{Skill{Name: "zero_width", Source: "x\u200b = 1\n"}, "invisible or bidi"},
		{Skill{Name: "tags", Source: "x = 1  # \U000e0049\U000e0067\n"}, "invisible or bidi"},
		{Skill{Name: "variation", Source: "x = 1  # a\U000e0100\U000e0101\ufe0f\n"}, "invisible or bidi"},
		{Skill{Name: "desc_bidi", Source: ok, Description: "sends mail\u202e"}, "description"},
		{Skill{Name: "sig_zw", Source: ok, Signature: "(to,\u200b body)"}, "signature"},
		{Skill{Name: "desc_esc", Source: ok, Description: "fine\x1b[2K"}, "description"},
		{Skill{Name: "srv_esc", Source: ok, Servers: []string{"a\x1bb"}}, "server"},
		{Skill{Name: "desc", Source: ok, Description: strings.Repeat("d", 2000)}, "description"},
		{Skill{Name: "sig", Source: ok, Signature: "(" + strings.Repeat("a, ", 200) + ")"}, "signature"},
		{Skill{Name: "srv", Source: ok, Servers: []string{""}}, "server"},
	} {
		_, err := st.Save(c.s, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Save(%.40q): %v, want an error with %q", c.s.Name, err, c.want)
		}
	}
	if f := files(t, st); len(f) != 0 {
		t.Errorf("refused saves wrote %v", f)
	}
	// The count cap; overwriting one that exists is still allowed.
	for _, n := range []string{"a1", "a2"} {
		if _, err := st.Save(Skill{Name: n, Source: ok}, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Save(Skill{Name: "a3", Source: ok}, false); err == nil || !strings.Contains(err.Error(), "skills.max_count") {
		t.Errorf("third skill under a cap of 2: %v", err)
	}
	if _, err := st.Save(Skill{Name: "a2", Source: ok + "# v2\n"}, true); err != nil {
		t.Errorf("overwrite at the cap: %v", err)
	}
}

// Two processes saving the same name at once: one wins, the other is told
// the name exists, and the file is whole. Here, many goroutines with a
// store each, as separate processes would have.
func TestConcurrentSavesOneWins(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "skills")
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := Open(dir, DefaultLimits())
			if err == nil {
				_, err = st.Save(Skill{Name: "same", Source: strings.Repeat("x = 1\n", 2000) + "# writer " + string(rune('a'+i)) + "\n"}, false)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrExists):
			t.Errorf("a losing save: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d saves won, want exactly 1", won)
	}
	st, _ := Open(dir, DefaultLimits())
	s, err := st.Get("same")
	if err != nil || !strings.HasPrefix(s.Source, "x = 1\n") || !strings.Contains(s.Source, "# writer ") {
		t.Fatalf("the winner's file: %v", err)
	}
	if f := files(t, st); len(f) != 1 {
		t.Errorf("files: %v, want only the skill", f)
	}
}

// The standard library's names here are those of the runner's Python
// (3.11), as python3 on this machine lists them.
func TestStdlibNamesMatchPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 not found")
		}
		t.Skip("python3 not found")
	}
	out, err := exec.Command(py, "-c", "import sys\nif sys.version_info[:2] != (3, 11): print('SKIP', sys.version)\nelse: print(' '.join(sorted(n for n in sys.stdlib_module_names if not n.startswith('_') and n == n.lower())))").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(string(out), "SKIP") {
		t.Skipf("python3 is not 3.11: %s", out)
	}
	want := strings.Fields(string(out))
	got := strings.Fields(stdlibModules)
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("stdlibModules differ from python3's:\n got %v\nwant %v", got, want)
	}
}

// A folder that does not exist yet reads as empty; the first save makes
// it, for this user only.
func TestFolderMadeOnFirstSave(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "skills")
	st, err := Open(dir, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if list, err := st.List(); err != nil || len(list) != 0 {
		t.Fatalf("List of a missing folder: %v, %v", list, err)
	}
	if _, err := st.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading made the folder: %v", err)
	}
	if replaced, err := st.Save(Skill{Name: "first", Source: "x = 1\n"}, false); err != nil || replaced {
		t.Fatalf("Save: %v, %v", replaced, err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("folder: %v, %v", fi, err)
	}
	if _, err := st.Save(Skill{Name: "big", Source: strings.Repeat("#", 70<<10)}, false); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: %v", err)
	}
	if _, err := Open("relative/skills", DefaultLimits()); err == nil {
		t.Error("a relative folder was accepted")
	}
}

// A file at a skill's name that is not a regular file is refused, not
// followed or read.
func TestGetRefusesOddFiles(t *testing.T) {
	st := newStore(t, DefaultLimits())
	if _, err := st.Save(Skill{Name: "real", Source: "x = 1\n"}, false); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(st.path("real"), st.path("link")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get("link"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Get of a symlink: %v", err)
	}
	if err := syscall.Mkfifo(st.path("fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get("fifo"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Get of a FIFO: %v", err)
	}
	if _, err := st.Save(Skill{Name: "x1", Source: "\tx = 1\r\n\f"}, false); err != nil {
		t.Errorf("tabs, CR and form feeds are fine: %v", err)
	}
	if err := CheckName("../x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("CheckName's error does not wrap ErrInvalid: %v", err)
	}
}

// The folder is checked as artifacts.dir is: a folder another user owns,
// or one its group or others may write, is refused; a file someone left
// there is not read as a skill if it is not the user's.
func TestFolderChecked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "skills")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	st, err := Open(dir, DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Save(Skill{Name: "x1", Source: "x = 1\n"}, false); err == nil || !strings.Contains(err.Error(), "writable by its group or others (mode 0777)") {
		t.Errorf("Save into a 0777 folder: %v", err)
	}
	if _, err := st.List(); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("List of a 0777 folder: %v", err)
	}
	if _, err := st.Get("x1"); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("Get from a 0777 folder: %v", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Save(Skill{Name: "x1", Source: "x = 1\n"}, false); err != nil {
		t.Errorf("Save into a 0700 folder: %v", err)
	}
}

// The built-ins here are those of the runner's Python (3.11), as python3
// on this machine lists them.
func TestBuiltinNamesMatchPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 not found")
		}
		t.Skip("python3 not found")
	}
	out, err := exec.Command(py, "-c", "import sys, builtins\nif sys.version_info[:2] != (3, 11): print('SKIP', sys.version)\nelse: print(' '.join(sorted(n for n in dir(builtins) if not n.startswith('_') and n == n.lower())))").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(string(out), "SKIP") {
		t.Skipf("python3 is not 3.11: %s", out)
	}
	if got, want := strings.Join(strings.Fields(builtinNames), " "), strings.TrimSpace(string(out)); got != want {
		t.Errorf("builtinNames differ from python3's:\n got %v\nwant %v", got, want)
	}
}

// Names that would shadow a built-in or an installed package are refused.
func TestCheckNameRefusesShadows(t *testing.T) {
	for _, name := range []string{"print", "len", "open", "numpy", "pandas", "matplotlib", "display", "json", "skills"} {
		if err := CheckNewName(name); err == nil {
			t.Errorf("CheckNewName(%q) = nil, want it refused", name)
		}
		if err := CheckName(name); err != nil {
			t.Errorf("CheckName(%q) = %v: a skill saved under it before cannot be read or removed", name, err)
		}
	}
	for _, name := range []string{"monthly_report", "fetch_orders", "printer"} {
		if err := CheckNewName(name); err != nil {
			t.Errorf("CheckNewName(%q) = %v, want it allowed", name, err)
		}
	}
}

// A skill an older bridge saved under a name reserved since (format) is
// still listed, read and removed: only saving checks the reserved names.
func TestSkillUnderANameReservedSince(t *testing.T) {
	st := newStore(t, DefaultLimits())
	if _, err := st.Save(Skill{Name: "fmt_old", Source: "def f():\n    return 1\n"}, false); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(st.Dir(), "fmt_old"+fileSuffix)
	data, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `"fmt_old"`, `"format"`, 1))
	if err := os.WriteFile(filepath.Join(st.Dir(), "format"+fileSuffix), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	if s, err := st.Get("format"); err != nil || s.Name != "format" {
		t.Fatalf("Get(format) = %+v, %v", s, err)
	}
	if list, err := st.List(); err != nil || len(list) != 1 || list[0].Name != "format" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if _, err := st.Save(Skill{Name: "format", Source: "x = 1\n"}, true); err == nil {
		t.Fatal("a new save under a reserved name was accepted")
	}
	if err := st.Remove("format"); err != nil {
		t.Fatalf("Remove(format): %v", err)
	}
}
