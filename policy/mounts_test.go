package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// artifactsDir is p as artifacts.dir keeps it: symlinks of the part that
// exists resolved.
func artifactsDir(t *testing.T, p string) string {
	t.Helper()
	r, err := resolve(p, false)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// placesEnv makes a world of its own for the forbidden places: a home, an
// XDG_RUNTIME_DIR (so the run root is XDG_RUNTIME_DIR/bridge) and a data
// folder, under one temporary folder, which it returns with symlinks
// resolved.
func placesEnv(t *testing.T) string {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"home/datasets", "home/.local/share/containers/storage", "xdg/bridge/run-1", "xdg/podman", "data/sales", "data/a,b", "other/sales", "tmp", "sock"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(base, "data", "bad\xffname"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"root-link": "/", "good-link": "data/sales", "dangling": "nowhere", "bad-link": "data/bad\xffname", "x,y": "data/sales"} {
		if err := os.Symlink(target, filepath.Join(base, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "file.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", filepath.Join(base, "home"))
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(base, "xdg"))
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("DOCKER_HOST", "")
	t.Setenv("CONTAINER_HOST", "")
	return base
}

// The mounts a policy may list, where they appear, and what they resolve to.
func TestMountsAccepted(t *testing.T) {
	base := placesEnv(t)
	cases := []struct {
		name, src string
		want      []Mount
	}{
		{"default path", "mounts:\n  - host: " + base + "/data/sales\n",
			[]Mount{{Host: base + "/data/sales", Path: "/data/sales", Line: 3, Column: 5}}},
		{"given path, cleaned", "mounts:\n  - host: " + base + "/data/sales/\n    path: /data//in/./x/\n",
			[]Mount{{Host: base + "/data/sales", Path: "/data/in/x", Line: 3, Column: 5}}},
		{"~ expanded", "mounts:\n  - {host: ~/datasets}\n",
			[]Mount{{Host: base + "/home/datasets", Path: "/data/datasets", Line: 3, Column: 5}}},
		{"symlink resolved; default path from the name given", "mounts:\n  - host: " + base + "/good-link\n",
			[]Mount{{Host: base + "/data/sales", Path: "/data/good-link", Line: 3, Column: 5}}},
		{"two, siblings", "mounts:\n  - host: " + base + "/data/sales\n  - host: " + base + "/other/sales\n    path: /data/sales2\n",
			[]Mount{{Host: base + "/data/sales", Path: "/data/sales", Line: 3, Column: 5}, {Host: base + "/other/sales", Path: "/data/sales2", Line: 4, Column: 5}}},
		{"a name that shares a prefix is not nested", "mounts:\n  - {host: " + base + "/data/sales, path: /data/a}\n  - {host: " + base + "/other/sales, path: /data/ab}\n",
			[]Mount{{Host: base + "/data/sales", Path: "/data/a", Line: 3, Column: 5}, {Host: base + "/other/sales", Path: "/data/ab", Line: 4, Column: 5}}},
		{"empty list", "mounts: []\n", nil},
		{"null list", "mounts:\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse([]byte("version: 1\n"+c.src), "f.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Mounts, c.want) {
				t.Errorf("Mounts = %+v\nwant %+v", p.Mounts, c.want)
			}
			checkRoundTrip(t, p)
		})
	}
}

// Every refusal, with its position and its reason.
func TestMountsRefused(t *testing.T) {
	base := placesEnv(t)
	many := "mounts:\n"
	for i := range MaxMounts + 1 {
		many += fmt.Sprintf("  - {host: %s/data/sales, path: /data/m%d}\n", base, i)
	}
	cases := []struct {
		name, src string
		want      string // "line:col: message"
	}{
		{"root", "mounts:\n  - host: /\n", "3:11: mounts[0].host: / is the host's root folder: the code must not read it; mount only folders of data"},
		{"symlink to root", "mounts:\n  - host: " + base + "/root-link\n", "3:11: mounts[0].host: / is the host's root folder (" + base + "/root-link resolves to /: symlinks are followed): the code must not read it"},
		{"proc", "mounts:\n  - host: /proc\n", "3:11: mounts[0].host: /proc is the kernel's process file system"},
		{"under proc, through a symlink", "mounts:\n  - host: /proc/self\n", "3:11: mounts[0].host: /proc/"},
		{"sys", "mounts:\n  - host: /sys/kernel\n", "3:11: mounts[0].host: /sys/kernel is inside /sys, the kernel's sysfs"},
		{"dev", "mounts:\n  - host: /dev\n", "3:11: mounts[0].host: /dev is the host's devices"},
		{"under dev", "mounts:\n  - host: /dev/shm\n", "3:11: mounts[0].host: /dev/shm is inside /dev, the host's devices"},
		{"run", "mounts:\n  - host: /run\n", "3:11: mounts[0].host: /run is the folder of Docker's API socket"},
		{"var", "mounts:\n  - host: /var\n", "3:11: mounts[0].host: /var holds /var/run, the folder of Docker's API socket (/var/run/docker.sock)"},
		{"var lib", "mounts:\n  - host: /var/lib\n", "3:11: mounts[0].host: /var/lib holds /var/lib/docker, Docker's storage"},
		{"rootless storage", "mounts:\n  - host: ~/.local/share/containers/storage\n", "3:11: mounts[0].host: " + base + "/home/.local/share/containers/storage is inside " + base + "/home/.local/share/containers, rootless Podman's storage"},
		{"the home", "mounts:\n  - host: \"~\"\n", "3:11: mounts[0].host: " + base + "/home holds " + base + "/home/.local/share/containers, rootless Podman's storage"},
		{"run root", "mounts:\n  - host: " + base + "/xdg/bridge\n", "3:11: mounts[0].host: " + base + "/xdg/bridge is the bridge's run directories"},
		{"inside the run root", "mounts:\n  - host: " + base + "/xdg/bridge/run-1\n", "3:11: mounts[0].host: " + base + "/xdg/bridge/run-1 is inside " + base + "/xdg/bridge, the bridge's run directories"},
		{"holding the run root", "mounts:\n  - host: " + base + "/xdg\n", "3:11: mounts[0].host: " + base + "/xdg holds " + base + "/xdg/bridge, the bridge's run directories"},
		{"rootless podman socket", "mounts:\n  - host: " + base + "/xdg/podman\n", "3:11: mounts[0].host: " + base + "/xdg/podman is the folder of rootless Podman's API socket"},
		{"a FIFO inside", "mounts:\n  - host: " + fifoFolder(t) + "\n", "3:11: mounts[0].host: " + fifoFolder(t) + " holds 1 FIFO(s) (" + fifoFolder(t) + "/in/queue): code could write through one to whatever host process reads it"},
		{"missing", "mounts:\n  - host: " + base + "/nope\n", "3:11: mounts[0].host: " + base + "/nope does not exist: create it, or fix the path"},
		{"dangling symlink", "mounts:\n  - host: " + base + "/dangling\n", "3:11: mounts[0].host: " + base + "/dangling is a symlink to a path that does not exist"},
		{"a file", "mounts:\n  - host: " + base + "/file.txt\n", "3:11: mounts[0].host: " + base + "/file.txt is a file, not a folder: name the folder that holds it"},
		{"relative", "mounts:\n  - host: data/sales\n", `3:11: mounts[0].host: "data/sales" is a relative path: give an absolute path, or one starting with ~/`},
		{"empty", "mounts:\n  - host: \"\"\n", "3:11: mounts[0].host: an empty path"},
		{"~user", "mounts:\n  - host: ~root/x\n", `3:11: mounts[0].host: "~root/x": only ~ and ~/... (this user's home) are expanded, not ~user`},
		{"host a number", "mounts:\n  - host: 12\n", `3:11: mounts[0].host: want a string (quote it: "12"), got a number 12`},
		{"missing host", "mounts:\n  - path: /data/x\n", "3:5: mounts[0]: missing host: every mount names a host folder"},
		{"item a string", "mounts:\n  - /srv/x\n", `3:5: mounts[0]: want a mount (a mapping with host and optionally path, e.g. {host: /srv/data, path: /data/in}); for a plain folder write {host: "/srv/x"}, got a string "/srv/x"`},
		{"not a list", "mounts: {host: /srv}\n", "2:9: mounts: want a list of mounts, e.g. [{host: /srv/data}], got a mapping"},
		{"unknown key", "mounts:\n  - host: " + base + "/data/sales\n    paht: /data/x\n", `4:5: unknown key "paht" in mounts[0]; known keys: host, path; did you mean "path"?`},
		{"misplaced key", "mounts:\n  - host: " + base + "/data/sales\n    max_files: 3\n", `4:5: unknown key "max_files" in mounts[0]; known keys: host, path; "max_files" is a key of artifacts`},
		{"path relative", "mounts:\n  - {host: " + base + "/data/sales, path: data/x}\n", `3:` + fmt.Sprint(31+len(base)) + `: mounts[0].path: "data/x" is not an absolute path: mounts go under /data/`},
		{"path /data", "mounts:\n  - host: " + base + "/data/sales\n    path: /data/\n", "4:11: mounts[0].path: /data itself cannot be a mount: mounts go under it"},
		{"path dot dot", "mounts:\n  - host: " + base + "/data/sales\n    path: /data/../etc\n", `4:11: mounts[0].path: "/data/../etc" holds ".."`},
		{"path dot dot inside", "mounts:\n  - host: " + base + "/data/sales\n    path: /data/x/../y\n", `4:11: mounts[0].path: "/data/x/../y" holds ".."`},
		{"path outside", "mounts:\n  - host: " + base + "/data/sales\n    path: /etc/sales\n", "4:11: mounts[0].path: /etc/sales is outside /data/: every mount goes under /data/"},
		{"path a sibling of /data", "mounts:\n  - host: " + base + "/data/sales\n    path: /database\n", "4:11: mounts[0].path: /database is outside /data/"},
		{"path with a comma", "mounts:\n  - host: " + base + "/data/sales\n    path: \"/data/a,b\"\n", `4:11: mounts[0].path: "/data/a,b" holds a comma or a colon`},
		{"host with a comma", "mounts:\n  - host: " + base + "/data/a,b\n    path: /data/ab\n", "3:11: mounts[0].host: " + base + "/data/a,b holds a comma or a colon, which engines read as separators in a mount: rename the folder"},
		{"resolves to a name that is not UTF-8", "mounts:\n  - host: " + base + "/bad-link\n", "3:11: mounts[0].host: " + base + "/bad-link resolves to \"" + base + "/data/bad\\xffname\", which is not plain UTF-8 text"},
		{"default path from a symlink with a comma", "mounts:\n  - host: \"" + base + "/x,y\"\n", `3:5: mounts[0]: the default path /data/x,y: "/data/x,y" holds a comma or a colon, which engines read as separators: choose another name; give a path`},
		{"duplicate path", "mounts:\n  - {host: " + base + "/data/sales}\n  - {host: " + base + "/other/sales}\n", "4:5: mounts: two mounts at /data/sales (the other at line 3): give one of them another path"},
		{"duplicate given path", "mounts:\n  - {host: " + base + "/data/sales, path: /data/x}\n  - host: " + base + "/other/sales\n    path: /data/x/\n", "5:11: mounts: two mounts at /data/x (the other at line 3)"},
		{"nested", "mounts:\n  - {host: " + base + "/data/sales, path: /data/a}\n  - host: " + base + "/other/sales\n    path: /data/a/b\n", "5:11: mounts: /data/a/b is inside /data/a (the mounts at lines 3 and 4): mount paths may not nest"},
		{"nested, outer second", "mounts:\n  - {host: " + base + "/data/sales, path: /data/a/b}\n  - host: " + base + "/other/sales\n    path: /data/a\n", "5:11: mounts: /data/a/b is inside /data/a (the mounts at lines 3 and 4)"},
		{"too many", many, fmt.Sprintf("%d:5: mounts: %d mounts; a policy may list at most %d", MaxMounts+3, MaxMounts+1, MaxMounts)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte("version: 1\n"+c.src), "f.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", c.src)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "f.yaml:"+c.want) {
				t.Errorf("got\n%v\nwant f.yaml:%s", err, c.want)
			}
		})
	}
}

// The run root is bridge-UID in $TMPDIR without XDG_RUNTIME_DIR; engine
// sockets named by $DOCKER_HOST and $CONTAINER_HOST count too.
func TestMountsRefusedByEnvironment(t *testing.T) {
	base := placesEnv(t)
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", base+"/tmp")
	t.Setenv("DOCKER_HOST", "unix://"+base+"/sock/docker.sock")
	for host, want := range map[string]string{
		base + "/tmp":  fmt.Sprintf("%s/tmp holds %s/tmp/bridge-%d, the bridge's run directories", base, base, os.Getuid()),
		base + "/sock": base + "/sock is the folder of the engine socket $DOCKER_HOST",
	} {
		_, err := Parse([]byte("version: 1\nmounts:\n  - host: "+host+"\n"), "f.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", host, err, want)
		}
	}
	// The XDG podman folder is not forbidden without XDG_RUNTIME_DIR.
	if _, err := Parse([]byte("version: 1\nmounts:\n  - host: "+base+"/xdg/podman\n"), "f.yaml"); err != nil {
		t.Errorf("%v", err)
	}
}

func TestArtifactsDefaults(t *testing.T) {
	a := Default().Artifacts
	want := Artifacts{MaxFiles: 20, MaxBytesInline: 1 << 20, MaxBytesTotal: 4 << 20, ByReference: "large",
		MaxBytesStored: 256 << 20, MaxBytesKept: 1 << 30, MaxBytesRead: 8 << 20, Expiry: time.Hour}
	if a != want {
		t.Errorf("Default().Artifacts = %+v, want %+v", a, want)
	}
	if got := mustParse(t, "version: 1\nartifacts:\n").Artifacts; got != want {
		t.Errorf("an empty section: %+v", got)
	}
}

func TestArtifactsAccepted(t *testing.T) {
	base := placesEnv(t)
	cases := []struct {
		src  string
		want func(a *Artifacts)
	}{
		{"max_files: 0", func(a *Artifacts) { a.MaxFiles = 0 }},
		{"max_files: 1000", func(a *Artifacts) { a.MaxFiles = 1000 }},
		{"max_bytes_inline: 0", func(a *Artifacts) { a.MaxBytesInline = 0 }},
		{"{max_bytes_inline: 8Mi, max_bytes_total: 8Mi}", func(a *Artifacts) { a.MaxBytesInline, a.MaxBytesTotal = 8<<20, 8<<20 }},
		{"{max_bytes_inline: 0, max_bytes_total: 0}", func(a *Artifacts) { a.MaxBytesInline, a.MaxBytesTotal = 0, 0 }},
		{"max_bytes_total: 12Mi", func(a *Artifacts) { a.MaxBytesTotal = 12 << 20 }},
		{"dir: ~/art", func(a *Artifacts) { a.Dir = base + "/home/art" }},
		{"dir: " + base + "/good-link/new/deeper", func(a *Artifacts) { a.Dir = base + "/data/sales/new/deeper" }},
		{"{dir: " + base + "/data, by_reference: all}", func(a *Artifacts) { a.Dir, a.ByReference = base+"/data", "all" }},
		{"dir: \"\"", func(a *Artifacts) {}},
		{"{max_bytes_stored: 1Mi, max_bytes_kept: 1Mi}", func(a *Artifacts) { a.MaxBytesStored, a.MaxBytesKept = 1<<20, 1<<20 }},
		{"{max_bytes_stored: 64Gi, max_bytes_kept: 1Ti}", func(a *Artifacts) { a.MaxBytesStored, a.MaxBytesKept = 64<<30, 1<<40 }},
		{"expiry: 1m", func(a *Artifacts) { a.Expiry = time.Minute }},
		{"expiry: 720h", func(a *Artifacts) { a.Expiry = 720 * time.Hour }},
	}
	for _, c := range cases {
		src := c.src
		if !strings.HasPrefix(src, "{") {
			src = "{" + src + "}"
		}
		p, err := Parse([]byte("version: 1\nartifacts: "+src+"\n"), "f.yaml")
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		want := defaultArtifacts()
		c.want(&want)
		if p.Artifacts != want {
			t.Errorf("%s: %+v, want %+v", c.src, p.Artifacts, want)
		}
		checkRoundTrip(t, p)
	}
}

func TestArtifactsRefused(t *testing.T) {
	base := placesEnv(t)
	cases := []struct{ src, want string }{
		{"  max_files: -1\n", "3:14: artifacts.max_files: -1 is out of range: it must be 0 .. 1000"},
		{"  max_files: 1001\n", "3:14: artifacts.max_files: 1001 is out of range: it must be 0 .. 1000"},
		{"  max_files: \"3\"\n", `3:14: artifacts.max_files: want a whole number, got a string "3"`},
		{"  max_bytes_inline: 9Mi\n", "3:21: artifacts.max_bytes_inline: 9Mi is out of range: it must be 0 .. 8Mi"},
		{"  max_bytes_total: 13Mi\n", "3:20: artifacts.max_bytes_total: 13Mi is out of range: it must be 0 .. 12Mi"},
		{"  max_bytes_total: 4MB\n", `3:20: artifacts.max_bytes_total: invalid size "4MB": write 4Mi for 1024s or 4M for 1000s`},
		{"  max_bytes_stored: 512Ki\n", "3:21: artifacts.max_bytes_stored: 512Ki is out of range: it must be 1Mi .. 64Gi"},
		{"  max_bytes_stored: 65Gi\n", "3:21: artifacts.max_bytes_stored: 65Gi is out of range: it must be 1Mi .. 64Gi"},
		{"  max_bytes_kept: 512Ki\n", "3:19: artifacts.max_bytes_kept: 512Ki is out of range: the minimum is 1Mi"},
		{"  expiry: 30s\n", "3:11: artifacts.expiry: 30s is out of range: it must be 60s .. 720h (30 days)"},
		{"  expiry: 721h\n", "3:11: artifacts.expiry: 721h is out of range: it must be 60s .. 720h (30 days)"},
		{"  expiry: 30d\n", `3:11: artifacts.expiry: invalid duration "30d"`},
		{"  expiry: 60\n", "3:11: artifacts.expiry: want a duration such as 30s, 5m or 1h30m, got a number 60: add a unit, e.g. 60s"},
		{"  by_reference: some\n", `3:17: artifacts.by_reference: "some" is not one of large, all`},
		{"  by_reference: Large\n", `3:17: artifacts.by_reference: "Large" is not one of large, all; did you mean "large"?`},
		{"  by_reference: all\n", "3:17: artifacts.by_reference: all hands every file back by reference, which needs a folder to keep them in: set artifacts.dir, or use large"},
		{"  max_file: 3\n", `3:3: unknown key "max_file" in artifacts; known keys: max_files, max_bytes_inline, max_bytes_total, dir, by_reference, max_bytes_stored, max_bytes_kept, max_bytes_read, expiry; did you mean "max_files"?`},
		{"  host: /srv\n", `3:3: unknown key "host" in artifacts; known keys: max_files, max_bytes_inline, max_bytes_total, dir, by_reference, max_bytes_stored, max_bytes_kept, max_bytes_read, expiry; "host" is a key of mounts items`},
		// Cross-key rules, at the key the file sets (the later of two).
		{"  max_bytes_total: 512Ki\n", "3:20: artifacts.max_bytes_total (512Ki) is less than artifacts.max_bytes_inline (1Mi): the inline files of a result together must fit the largest one"},
		{"  max_bytes_inline: 5Mi\n", "3:21: artifacts.max_bytes_total (4Mi) is less than artifacts.max_bytes_inline (5Mi)"},
		{"  max_bytes_total: 2Mi\n  max_bytes_inline: 3Mi\n", "4:21: artifacts.max_bytes_total (2Mi) is less than artifacts.max_bytes_inline (3Mi)"},
		{"  max_bytes_kept: 128Mi\n", "3:19: artifacts.max_bytes_kept (128Mi) is less than artifacts.max_bytes_stored (256Mi): the folder must hold at least one run's files"},
		{"  max_bytes_stored: 2Gi\n", "3:21: artifacts.max_bytes_kept (1Gi) is less than artifacts.max_bytes_stored (2Gi)"},
		// dir.
		{"  dir: art\n", `3:8: artifacts.dir: "art" is a relative path: give an absolute path, or one starting with ~/`},
		{"  dir: /\n", "3:8: artifacts.dir: / is the host's root folder: give the bridge a folder of its own for the files"},
		{"  dir: /proc/x\n", "3:8: artifacts.dir: /proc/x is inside /proc"},
		{"  dir: " + base + "/xdg/bridge/art\n", "3:8: artifacts.dir: " + base + "/xdg/bridge/art is inside " + base + "/xdg/bridge, the bridge's run directories"},
		{"  dir: " + base + "/root-link/run/art\n", "3:8: artifacts.dir: /run/art is inside /run"},
		{"  dir: " + base + "/file.txt\n", "3:8: artifacts.dir: " + base + "/file.txt is a file, not a folder"},
		{"  dir: " + base + "/file.txt/x\n", "3:8: artifacts.dir: " + base + "/file.txt/x: "},
		{"  dir: " + base + "/dangling/x\n", "3:8: artifacts.dir: " + base + "/dangling is a symlink to a path that does not exist"},
		{"  dir: 3\n", `3:8: artifacts.dir: want a string (quote it: "3"), got a number 3`},
	}
	for _, c := range cases {
		_, err := Parse([]byte("version: 1\nartifacts:\n"+c.src), "f.yaml")
		if err == nil {
			t.Errorf("accepted:\n%s", c.src)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], "f.yaml:"+c.want) {
			t.Errorf("got\n%v\nwant f.yaml:%s", err, c.want)
		}
	}
	// A broken key does not bring its pair's rule with it.
	_, err := Parse([]byte("version: 1\nartifacts:\n  max_bytes_inline: 9Mi\n  max_bytes_total: 1Mi\n  by_reference: all\n  dir: x\n"), "f.yaml")
	if err == nil || len(err.(*ParseError).Problems) != 2 {
		t.Errorf("want the two range errors alone, got %v", err)
	}
}

// A reload whose mount is missing or forbidden is rejected like any
// invalid file: the policy in force stays, mounts and all.
func TestStoreReloadRefusesBadMount(t *testing.T) {
	base := placesEnv(t)
	file := filepath.Join(base, "policy.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("version: 1\nmounts:\n  - host: " + base + "/data/sales\n")
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	s, err := NewStore(p, file, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, bad := range []string{base + "/nope", "/proc", base + "/root-link"} {
		write("version: 1\nmounts:\n  - host: " + bad + "\n")
		if changed, err := s.ReloadNow(); changed || err == nil {
			t.Fatalf("%s: reload %v %v", bad, changed, err)
		}
		if m := s.Current().Policy.Mounts; s.Current().Gen != 1 || len(m) != 1 || m[0].Host != base+"/data/sales" {
			t.Fatalf("%s: the policy in force changed: %+v", bad, m)
		}
	}
	if !strings.Contains(logs.String(), "the policy in force stays") || !strings.Contains(logs.String(), "does not exist") {
		t.Errorf("log: %s", logs.String())
	}
	// A folder that goes away after the policy went in force fails the
	// next reload the same way; a good one goes in force at once.
	write("version: 1\nmounts:\n  - host: " + base + "/other/sales\n    path: /data/other\nartifacts:\n  dir: " + base + "/art\n")
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("good reload: %v %v", changed, err)
	}
	if m := s.Current().Policy.Mounts; len(m) != 1 || m[0].Path != "/data/other" {
		t.Fatalf("mounts after reload: %+v", m)
	}
	if !strings.Contains(logs.String(), "artifacts.dir changed; it takes effect when the bridge restarts") {
		t.Errorf("no restart warning for artifacts.dir: %s", logs.String())
	}
	if strings.Contains(logs.String(), "mounts changed") {
		t.Errorf("mounts take effect at once: %s", logs.String())
	}
}

func TestMountReadable(t *testing.T) {
	base := placesEnv(t)
	dir := filepath.Join(base, "data", "sales")
	m := Mount{Host: dir, Path: "/data/sales"}
	if err := os.WriteFile(filepath.Join(dir, "x.csv"), []byte("a,b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := m.Readable(); got != "" {
		t.Errorf("a 0755 folder of 0644 files: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret.csv"), []byte("a,b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := m.Readable(); !strings.Contains(got, "holds what the sandbox's user cannot read (secret.csv): `chmod -R o+rX "+dir+"`") {
		t.Errorf("a 0600 file: %q", got)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if got := m.Readable(); !strings.Contains(got, dir+" is mode 0750: the sandbox's user cannot list or enter it") || !strings.Contains(got, "`chmod o+rx "+dir+"`") {
		t.Errorf("a 0750 folder: %q", got)
	}
	if got := (Mount{Host: base + "/nope"}).Readable(); !strings.Contains(got, "no such file") {
		t.Errorf("a missing folder: %q", got)
	}
}

// fifoFolder is a folder holding a FIFO a level down (made once a test).
func fifoFolder(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "bridge-policy-fifo-"+strings.ReplaceAll(t.Name(), "/", "_"))
	if _, err := os.Stat(dir); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Join(dir, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := syscall.Mkfifo(filepath.Join(dir, "in", "queue"), 0o666); err != nil {
		t.Fatal(err)
	}
	return dir
}
