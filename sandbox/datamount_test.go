package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestLimitsValidateDataMounts(t *testing.T) {
	ok := []DataMount{{Host: "/srv/sales", Path: "/data/sales"}, {Host: "/srv/x", Path: "/data/ab"}, {Host: "/srv/y", Path: "/data/a"}}
	l := DefaultLimits()
	l.Mounts = ok
	if err := l.Validate(); err != nil {
		t.Fatalf("valid mounts: %v", err)
	}
	for _, c := range []struct {
		name string
		ms   []DataMount
		want string
	}{
		{"relative host", []DataMount{{Host: "srv", Path: "/data/x"}}, `host folder "srv" must be an absolute, clean path`},
		{"unclean host", []DataMount{{Host: "/srv/../etc", Path: "/data/x"}}, "must be an absolute, clean path"},
		{"root host", []DataMount{{Host: "/", Path: "/data/x"}}, "other than /"},
		{"data itself", []DataMount{{Host: "/srv", Path: "/data"}}, `container path "/data" must be a clean path under /data/`},
		{"outside data", []DataMount{{Host: "/srv", Path: "/etc"}}, "under /data/"},
		{"unclean path", []DataMount{{Host: "/srv", Path: "/data/x/../../etc"}}, "under /data/"},
		{"comma", []DataMount{{Host: "/srv", Path: "/data/a,b"}}, "a comma or a colon"},
		{"colon", []DataMount{{Host: "/srv", Path: "/data/a:ro"}}, "a comma or a colon"},
		{"comma in host", []DataMount{{Host: "/srv/a,b", Path: "/data/x"}}, "a comma or a colon"},
		{"colon in host", []DataMount{{Host: "/srv/a:b", Path: "/data/x"}}, "a comma or a colon"},
		{"duplicate", []DataMount{{Host: "/a", Path: "/data/x"}, {Host: "/b", Path: "/data/x"}}, "mounts at /data/x and /data/x overlap"},
		{"nested", []DataMount{{Host: "/a", Path: "/data/x"}, {Host: "/b", Path: "/data/x/y"}}, "mounts at /data/x and /data/x/y overlap"},
		{"nested, outer last", []DataMount{{Host: "/a", Path: "/data/x/y"}, {Host: "/b", Path: "/data/x"}}, "overlap"},
	} {
		l := DefaultLimits()
		l.Mounts = c.ms
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestNewSpecDataMounts(t *testing.T) {
	l := DefaultLimits()
	l.Mounts = []DataMount{{Host: "/srv/sales", Path: "/data/sales"}}
	s := NewSpec("r", "i", "/d", "t", l)
	if !reflect.DeepEqual(s.DataMounts, l.Mounts) {
		t.Fatalf("DataMounts = %+v", s.DataMounts)
	}
	s.DataMounts[0].Path = "/data/changed"
	if l.Mounts[0].Path != "/data/sales" {
		t.Error("the spec's data mounts alias the limits'")
	}
	if s := NewSpec("r", "i", "/d", "t", DefaultLimits()); s.DataMounts != nil {
		t.Errorf("no mounts: %+v", s.DataMounts)
	}
}

func TestCheckDataMountHosts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckDataMountHosts([]DataMount{{Host: dir, Path: "/data/x"}}); err != nil {
		t.Errorf("a folder: %v", err)
	}
	if err := CheckDataMountHosts([]DataMount{{Host: dir + "/gone", Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "the host folder no longer exists: recreate it, or remove the mount from the policy") {
		t.Errorf("missing: %v", err)
	}
	if err := CheckDataMountHosts([]DataMount{{Host: file, Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "no longer a folder") {
		t.Errorf("a file: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	if err := CheckDataMountHosts([]DataMount{{Host: link, Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "the path now leads through a symlink to /") {
		t.Errorf("a folder swapped for a symlink: %v", err)
	}
	// A FIFO made after the policy was read: no container.
	if err := os.Mkdir(filepath.Join(dir, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "in", "q"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := CheckDataMountHosts([]DataMount{{Host: dir, Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "now holds 1 FIFO(s) ("+dir+"/in/q)") {
		t.Errorf("a FIFO: %v", err)
	}
}

// BenchmarkMountsChanged is what the pool's take path adds per ready
// container: a stat per data mount.
func BenchmarkMountsChanged(b *testing.B) {
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("mounts=%d", n), func(b *testing.B) {
			var ms []DataMount
			for k := range n {
				d := filepath.Join(b.TempDir(), fmt.Sprintf("d%d", k))
				if err := os.Mkdir(d, 0o755); err != nil {
					b.Fatal(err)
				}
				ms = append(ms, DataMount{Host: d, Path: fmt.Sprintf("/data/d%d", k)})
			}
			c := &Container{limits: Limits{Mounts: ms}, mounted: statDataMounts(ms)}
			b.ResetTimer()
			for range b.N {
				if h := c.mountsChanged(); h != "" {
					b.Fatal(h)
				}
			}
		})
	}
}
