package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/sandbox"
)

// feed sends files to s as the relay would; a file with a reason is
// skipped.
func feed(s sandbox.Sink, files ...struct {
	name, data string
	skip       sandbox.SkipReason
}) {
	for _, f := range files {
		info := sandbox.FileInfo{Name: f.name, Size: int64(len(f.data))}
		if f.skip != "" {
			s.Skipped(info, f.skip)
			continue
		}
		w := s.File(info)
		w.Write([]byte(f.data))
		w.End(nil)
	}
}

type sent = struct {
	name, data string
	skip       sandbox.SkipReason
}

// TestRunFilesKept: with --outputs, each file goes to the folder and
// stderr says where, and which were not kept and why.
func TestRunFilesKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	var out strings.Builder
	rf, err := newRunFiles(dir, "r1", artifacts.DefaultLimits(), func(_, data string) { out.WriteString(data) })
	if err != nil {
		t.Fatal(err)
	}
	defer rf.close()
	if fl := rf.limits(); fl.MaxFiles != 20 || fl.MaxFileBytes != 256<<20 {
		t.Errorf("limits %+v: want the policy's max_files and max_bytes_stored", fl)
	}
	s := rf.sink()
	s.Output("stdout", "hello\n")
	feed(s, sent{"plot.png", "\x89PNG\r\n\x1a\nxyz", ""}, sent{`..\..\evil.txt`, "e", ""}, sent{"l", "", sandbox.SkipSymlink})
	var msg strings.Builder
	rf.report(&msg, 2)
	for _, want := range []string{
		"bridge: kept /tmp/outputs/plot.png as " + filepath.Join(dir, "plot.png") + " (image/png, 11 bytes)",
		`bridge: kept /tmp/outputs/..\..\evil.txt as ` + filepath.Join(dir, "evil.txt"),
		"bridge: not kept: /tmp/outputs/l (0 bytes): a symbolic link: never followed",
		"bridge: not kept: 2 more files in /tmp/outputs",
	} {
		if !strings.Contains(msg.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, msg.String())
		}
	}
	if out.String() != "hello\n" {
		t.Errorf("output %q", out.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "plot.png")); err != nil || string(b) != "\x89PNG\r\n\x1a\nxyz" {
		t.Errorf("plot.png: %q, %v", b, err)
	}
}

// TestRunFilesNotKept: without --outputs, the files are not kept, and
// stderr says how many and how to keep them.
func TestRunFilesNotKept(t *testing.T) {
	rf, err := newRunFiles("", "r1", artifacts.DefaultLimits(), func(string, string) {})
	if err != nil {
		t.Fatal(err)
	}
	if fl := rf.limits(); fl.MaxFiles == 0 || fl.MaxFileBytes != 0 {
		t.Errorf("limits %+v: want files named, no byte sent", fl)
	}
	feed(rf.sink(), sent{"empty.txt", "", ""}, sent{"a.png", "x", sandbox.SkipTooLarge})
	var msg strings.Builder
	rf.report(&msg, 1)
	if want := "bridge: 3 files in /tmp/outputs were not kept: pass --outputs DIR to keep them\n"; msg.String() != want {
		t.Errorf("stderr %q, want %q", msg.String(), want)
	}
	msg.Reset()
	rf, _ = newRunFiles("", "r1", artifacts.DefaultLimits(), func(string, string) {})
	rf.report(&msg, 0)
	if msg.Len() != 0 {
		t.Errorf("no file, yet %q", msg.String())
	}
}

func TestRunFilesBadFolder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, nil, 0o644)
	if _, err := newRunFiles(p, "r1", artifacts.DefaultLimits(), nil); err == nil || !strings.Contains(err.Error(), "--outputs") {
		t.Errorf("err %v", err)
	}
}
