package paths

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestRunRoot(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1234")
	if got := RunRoot(); got != "/run/user/1234/bridge" {
		t.Errorf("RunRoot() = %q with XDG_RUNTIME_DIR set", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", "/var/tmp/x")
	if got, want := RunRoot(), filepath.Join("/var/tmp/x", fmt.Sprintf("bridge-%d", os.Getuid())); got != want {
		t.Errorf("RunRoot() = %q, want %q", got, want)
	}
}

func TestSpecial(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "a", "b", "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "a", "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.WriteFile(filepath.Join(dir, "a", "data.csv"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A symbolic link to a folder with a FIFO is not followed.
	other := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(other, "elsewhere"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	s := Special(dir, 1000)
	if !s.Complete || s.NFIFOs != 1 || s.NSockets != 1 || s.FIFOs[0] != filepath.Join(dir, "a", "b", "fifo") || s.Sockets[0] != filepath.Join(dir, "a", "sock") {
		t.Errorf("Special = %+v", s)
	}
	if s := Special(dir, 3); s.Complete || s.Scanned != 3 {
		t.Errorf("bounded: %+v", s)
	}
}
