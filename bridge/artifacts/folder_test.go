package artifacts

import (
	"bytes"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/bridge-mcp/bridge/sandbox"
)

// TestFolderCollector: bridge run --outputs keeps every file in the folder
// named, under its safe name, never outside it, never over a file or
// through a symbolic link there, within max_files and max_bytes_stored.
func TestFolderCollector(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "out", "new") // missing: created
	outside := filepath.Join(parent, "secret")
	if err := os.WriteFile(outside, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Already there: a file of the user's and a symbolic link out.
	if err := os.WriteFile(filepath.Join(dir, "taken.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	l := DefaultLimits()
	l.MaxFiles = 7
	l.MaxBytesStored = 3 << 20
	l.MaxBytesInline = 10 // does not apply: nothing goes inline
	c := NewFolderCollector("r1", l, f)
	if fl := c.FileLimits(); fl.MaxFiles != 7 || fl.MaxFileBytes != 3<<20 || fl.MaxBytes != 3<<20 {
		t.Errorf("file limits %+v", fl)
	}
	big := bytes.Repeat([]byte("x"), 2<<20)
	send(t, c,
		file{name: "plot.png", data: png(5000)},
		file{name: "../../secret", data: []byte("escaped")},
		file{name: "sub/../../x.csv", data: []byte("a,b\n")},
		file{name: "taken.txt", data: []byte("theirs")},
		file{name: "link.txt", data: []byte("through")},
		file{name: "big.bin", data: big},
		file{name: "big2.bin", data: big}, // past max_bytes_stored
		file{name: "more.txt", data: []byte("m")},
		file{name: "last.txt", data: []byte("l")}, // past max_files
	)
	list, unlisted := c.Artifacts()
	if unlisted != 0 {
		t.Errorf("unlisted %d", unlisted)
	}
	got := map[string]Artifact{}
	for _, a := range list {
		got[a.Name] = a
		if a.Inlined || len(a.Data) > 0 {
			t.Errorf("%s was held in memory", a.Name)
		}
	}
	kept := map[string]string{ // the code's name → the name kept
		"plot.png":        "plot.png",
		"../../secret":    "secret",
		"sub/../../x.csv": "sub_x.csv",
		"taken.txt":       "taken (2).txt",
		"link.txt":        "link (2).txt",
		"big.bin":         "big.bin",
	}
	for name, want := range kept {
		a := got[name]
		if !a.Returned() {
			t.Errorf("%s not kept: %s", name, a.Note)
			continue
		}
		u, err := url.Parse(a.URI)
		if err != nil || u.Scheme != "file" || u.Path != filepath.Join(dir, want) {
			t.Errorf("%s kept at %s, want %s", name, a.URI, filepath.Join(dir, want))
		}
	}
	for _, name := range []string{"big2.bin", "last.txt"} {
		if a := got[name]; a.Returned() || a.Note == "" {
			t.Errorf("%s: returned %v, note %q", name, a.Returned(), a.Note)
		}
	}
	if !strings.Contains(got["big2.bin"].Note, "artifacts.max_bytes_stored") || !strings.Contains(got["last.txt"].Note, "artifacts.max_files") {
		t.Errorf("notes: %q, %q", got["big2.bin"].Note, got["last.txt"].Note)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep me" {
		t.Errorf("the file outside the folder was changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "taken.txt")); string(b) != "mine" {
		t.Errorf("the user's file was replaced: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "plot.png")); !bytes.Equal(b, png(5000)) {
		t.Error("plot.png differs")
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{"big.bin", "link (2).txt", "link.txt", "more.txt", "plot.png", "secret", "sub_x.csv", "taken (2).txt", "taken.txt"}
	if !slices.Equal(names, want) {
		t.Errorf("the folder holds %q, want %q (no temporary file left)", names, want)
	}
}

// TestFolderCutFile: a file that does not arrive whole leaves nothing.
func TestFolderCutFile(t *testing.T) {
	dir := t.TempDir()
	f, err := OpenFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := NewFolderCollector("r1", DefaultLimits(), f)
	send(t, c, file{name: "cut.csv", data: []byte("a,b"), size: 10, end: &sandbox.FileCutError{Sent: 3, Size: 10, Why: "ended"}})
	list, _ := c.Artifacts()
	if len(list) != 1 || list[0].Returned() {
		t.Errorf("list %+v", list)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}

func TestOpenFolderNotADir(t *testing.T) {
	p := filepath.Join(t.TempDir(), "file")
	os.WriteFile(p, nil, 0o644)
	if _, err := OpenFolder(p); err == nil || !strings.Contains(err.Error(), "name a folder") {
		t.Errorf("err %v", err)
	}
}

// On a filesystem without hard links (link fails with EPERM), linkFree
// renames the temporary file instead, still never replacing a file.
func TestLinkFreeWithoutHardLinks(t *testing.T) {
	dir := t.TempDir()
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	noLinks := func(int, string, int, string, int) error { return unix.EPERM }
	if err := os.WriteFile(filepath.Join(dir, "plot.png"), []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-x"), []byte("second"), 0o600); err != nil {
		t.Fatal(err)
	}
	name, err := linkFree(dfd, ".tmp-x", "plot.png", dir, noLinks)
	if err != nil || name != "plot (2).png" {
		t.Fatalf("linkFree = %q, %v; want plot (2).png", name, err)
	}
	for file, want := range map[string]string{"plot.png": "first", "plot (2).png": "second"} {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", file, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-x")); !os.IsNotExist(err) {
		t.Errorf("the temporary file is still there: %v", err)
	}
}
