package kubernetes

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox/internal/nodefs"
	"golang.org/x/sys/unix"
)

// The node's mounts, for real: they need root (CAP_SYS_ADMIN).
func TestLinuxNodeMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	n := linuxNode{}
	base := t.TempDir()
	dir := filepath.Join(base, "run-1.node")
	tmp, data := filepath.Join(dir, "tmp"), filepath.Join(dir, "data-0")
	src := filepath.Join(base, "sales")
	for _, d := range []string{dir, tmp, data, src} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "a.csv"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.mountTmp(tmp, 1<<20); err != nil {
		t.Fatal(err)
	}
	defer n.unmount(tmp)
	if err := n.bindReadOnly(src, data); err != nil {
		t.Fatal(err)
	}
	defer n.unmount(data)
	for _, c := range []struct {
		dir  string
		want int64
	}{{tmp, unix.ST_NOEXEC | unix.ST_NOSUID | unix.ST_NODEV}, {data, unix.ST_RDONLY | unix.ST_NOEXEC | unix.ST_NOSUID | unix.ST_NODEV}} {
		var st unix.Statfs_t
		if err := unix.Statfs(c.dir, &st); err != nil {
			t.Fatal(err)
		}
		if st.Flags&c.want != c.want {
			t.Errorf("%s: flags %#x, want %#x set", c.dir, st.Flags, c.want)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "b"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing through the data mount: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "a.csv")); err != nil || string(b) != "x" {
		t.Errorf("reading through the data mount: %q %v", b, err)
	}
	// A tmpfs bigger than its size refuses the write.
	if err := os.WriteFile(filepath.Join(tmp, "big"), make([]byte, 2<<20), 0o644); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing past the tmpfs size: %v", err)
	}
	// A dead bridge's node folder: detached first, the user's file kept.
	if err := nodefs.RemoveDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "a.csv")); err != nil {
		t.Fatalf("the user's file went with the node folder: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("node folder left: %v", err)
	}
}
