package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/docker/docker/api/types/mount"
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

// Docker: an anonymous local volume that binds the folder with every
// option, nothing copied into it.
func TestDockerConfigDataMounts(t *testing.T) {
	spec, _ := testDockerSpec(t)
	spec.DataMounts = []DataMount{{Host: "/srv/sales", Path: "/data/sales"}, {Host: "/srv/x y", Path: "/data/in/x"}}
	_, hc := dockerConfig(spec)
	var got []mount.Mount
	for _, m := range hc.Mounts {
		if m.Type == mount.TypeVolume {
			got = append(got, m)
		}
	}
	if len(got) != 2 {
		t.Fatalf("volume mounts %+v", hc.Mounts)
	}
	for i, m := range got {
		dm := spec.DataMounts[i]
		vo := m.VolumeOptions
		switch {
		case m.Target != dm.Path || m.Source != "" || m.ReadOnly:
			// Docker 20.10 refuses ReadOnly on an anonymous volume; the
			// volume's own mount is read-only, and the container's copies it.
			t.Errorf("mount %+v for %+v: want an anonymous volume at %s", m, dm, dm.Path)
		case vo == nil || !vo.NoCopy || vo.DriverConfig == nil || vo.DriverConfig.Name != "local":
			t.Errorf("volume options %+v: want the local driver, nocopy", vo)
		case !reflect.DeepEqual(vo.DriverConfig.Options, map[string]string{"type": "none", "device": dm.Host, "o": "bind,ro,nosuid,nodev,noexec"}):
			t.Errorf("driver options %v", vo.DriverConfig.Options)
		case vo.Labels[LabelManaged] != "true" || vo.Labels[LabelRunID] != "run1":
			t.Errorf("volume labels %v", vo.Labels)
		}
	}
	// The relay's mount stays a bind mount.
	if hc.Mounts[0].Type != mount.TypeBind || hc.Mounts[0].Target != RelayDir {
		t.Errorf("first mount %+v", hc.Mounts[0])
	}
}

// Podman: a bind mount, not recursive, with every option.
func TestPodmanSpecDataMounts(t *testing.T) {
	cs, _ := testPodmanSpec(t)
	cs.DataMounts = []DataMount{{Host: "/srv/sales", Path: "/data/sales"}}
	s := podmanSpec(cs)
	m := podmanFindMount(t, s, "/data/sales")
	if m.Type != "bind" || m.Source != "/srv/sales" {
		t.Errorf("mount %+v", m)
	}
	for _, o := range []string{"bind", "ro", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(m.Options, o) {
			t.Errorf("options %v lack %s", m.Options, o)
		}
	}
	for _, o := range []string{"rbind", "rw", "exec", "suid", "dev"} {
		if slices.Contains(m.Options, o) {
			t.Errorf("options %v hold %s", m.Options, o)
		}
	}
	if err := s.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestCheckDataMountHosts(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkDataMountHosts([]DataMount{{Host: dir, Path: "/data/x"}}); err != nil {
		t.Errorf("a folder: %v", err)
	}
	if err := checkDataMountHosts([]DataMount{{Host: dir + "/gone", Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "the host folder no longer exists: recreate it, or remove the mount from the policy") {
		t.Errorf("missing: %v", err)
	}
	if err := checkDataMountHosts([]DataMount{{Host: file, Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "no longer a folder") {
		t.Errorf("a file: %v", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	if err := checkDataMountHosts([]DataMount{{Host: link, Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "the path now leads through a symlink to /") {
		t.Errorf("a folder swapped for a symlink: %v", err)
	}
	// A FIFO made after the policy was read: no container.
	if err := os.Mkdir(filepath.Join(dir, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "in", "q"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := checkDataMountHosts([]DataMount{{Host: dir, Path: "/data/x"}}); err == nil || !strings.Contains(err.Error(), "now holds 1 FIFO(s) ("+dir+"/in/q)") {
		t.Errorf("a FIFO: %v", err)
	}
}

func TestRefuseGVisorDataMounts(t *testing.T) {
	var removed []string
	remove := func(_ context.Context, id string) error { removed = append(removed, id); return nil }
	err := refuseGVisorDataMounts(context.Background(), remove, "create container c", "abc")
	if !errors.Is(err, ErrDataMountsGVisor) || !strings.Contains(err.Error(), "Run gVisor through Podman") || !slices.Equal(removed, []string{"abc"}) {
		t.Errorf("err %v, removed %v", err, removed)
	}
	removed = nil
	if err := refuseGVisorDataMounts(context.Background(), remove, "create container c", ""); !errors.Is(err, ErrDataMountsGVisor) || removed != nil {
		t.Errorf("before create: err %v, removed %v", err, removed)
	}
}

// Podman's Docker-compatible API drops a volume's driver options without a
// word: there, data mounts are binds with Podman's own options.
func TestPodmanCompatDataMounts(t *testing.T) {
	spec, _ := testDockerSpec(t)
	spec.DataMounts = []DataMount{{Host: "/srv/sales", Path: "/data/sales"}}
	_, hc := dockerConfig(spec)
	podmanCompatConfig(spec, hc)
	for _, m := range hc.Mounts {
		if m.Type == mount.TypeVolume {
			t.Errorf("a volume mount left: %+v", m)
		}
	}
	if len(hc.Mounts) != 1 || hc.Mounts[0].Target != RelayDir {
		t.Errorf("mounts %+v: want the relay's alone", hc.Mounts)
	}
	if !slices.Equal(hc.Binds, []string{"/srv/sales:/data/sales:bind,ro,nosuid,nodev,noexec"}) {
		t.Errorf("binds %q", hc.Binds)
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
