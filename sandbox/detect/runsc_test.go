//go:build !bridge_no_docker && !bridge_no_podman && !bridge_no_kubernetes

// The runsc engine as a build with every engine has it (its images
// engine: Docker or Podman).
package detect

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
)

func TestRunscCandidates(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	list := func(cs []Candidate) string {
		var s []string
		for _, c := range cs {
			if c.Engine != sandbox.EngineRunsc || !strings.Contains(c.Why, "images from "+c.Images) {
				t.Errorf("%+v", c)
			}
			s = append(s, c.Images+"="+c.URI)
		}
		return strings.Join(s, " ")
	}
	for _, tt := range []struct {
		getenv func(string) string
		want   string
	}{
		{env(), "podman=unix:///run/podman/podman.sock docker=unix:///var/run/docker.sock"},
		// A socket the operator named comes first.
		{env("DOCKER_HOST", "unix:///d.sock"), "docker=unix:///d.sock podman=unix:///run/podman/podman.sock"},
		{env("DOCKER_HOST", "unix:///d.sock", "CONTAINER_HOST", "unix:///p.sock", "XDG_RUNTIME_DIR", "/run/user/0"),
			"podman=unix:///p.sock docker=unix:///d.sock"},
	} {
		cs, err := Candidates(sandbox.EngineRunsc, tt.getenv)
		if err != nil {
			t.Fatal(err)
		}
		if got := list(cs); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
	// auto never picks runsc.
	cs, _ := Candidates(sandbox.EngineAuto, env("DOCKER_HOST", "unix:///d.sock"))
	for _, c := range cs {
		if c.Engine == sandbox.EngineRunsc || c.Images != "" {
			t.Errorf("auto tries %+v", c)
		}
	}
}

func TestRunscNotRoot(t *testing.T) {
	c := Candidate{Engine: sandbox.EngineRunsc, URI: "unix:///var/run/docker.sock", Images: sandbox.EngineDocker}
	_, err := openRunsc(context.Background(), c, runscHost{euid: 1000, getenv: os.Getenv, inits: defaultInits()})
	if !errors.Is(err, sandbox.ErrEngineDenied) || !errors.Is(err, sandbox.ErrEngineUnreachable) {
		t.Fatalf("%v: want ErrEngineDenied and ErrEngineUnreachable", err)
	}
	for _, want := range []string{"needs root", "run the bridge as root", "oci_runtime: runsc"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	// No init on the host: said before anything is opened.
	_, err = openRunsc(context.Background(), c, runscHost{euid: 0, getenv: os.Getenv, inits: []string{"/nonexistent/tini-static"}})
	if err == nil || !strings.Contains(err.Error(), "apt-get install tini") {
		t.Errorf("no init: %v", err)
	}
}

func TestFindInit(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "init.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "docker-init")
	if err := os.Symlink(script, link); err != nil {
		t.Fatal(err)
	}
	if got := findInit([]string{filepath.Join(dir, "missing"), script, link}); got != "" {
		t.Errorf("findInit took %q, not a static executable", got)
	}
	// A dynamic executable (the shell, on most hosts) is passed over.
	if sh, err := exec.LookPath("sh"); err == nil {
		if got := findInit([]string{sh}); got != "" {
			t.Logf("%s is static here", got)
		}
	}
	for _, p := range defaultInits() {
		if got := findInit([]string{p}); got != "" {
			t.Logf("%s: static init %s", p, got)
			if !filepath.IsAbs(got) {
				t.Errorf("%s: %q", p, got)
			}
			if fi, err := os.Lstat(got); err != nil || fi.Mode()&os.ModeSymlink != 0 {
				t.Errorf("%s: %q is a link (%v)", p, got, err)
			}
		}
	}
}

func TestRunscDir(t *testing.T) {
	state := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_STATE_HOME" {
			return state
		}
		return ""
	}
	dir, err := runscDir(getenv)
	if err != nil || dir != filepath.Join(state, "bridge", "runsc") {
		t.Fatalf("%q %v", dir, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%v %v", fi.Mode(), err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := runscDir(getenv); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Errorf("a folder open to others: %v", err)
	}
	if os.Geteuid() == 0 {
		// Only root can give a folder away.
		if err := os.Chmod(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := runscDir(getenv); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("a folder of another user: %v", err)
		}
	}
	if d := RunscDir(func(string) string { return "" }); d != "/var/lib/bridge/runsc" {
		t.Errorf("RunscDir: %s", d)
	}
}

// TestRunscOpen opens the runsc engine over Docker's socket, when this
// host has them and the test runs as root: the runsc Client, with Info of
// gVisor.
func TestRunscOpen(t *testing.T) {
	sock := "/var/run/docker.sock"
	if os.Geteuid() != 0 || runscCommand() == "runsc" || findInit(defaultInits()) == "" {
		t.Skip("needs root, runsc and a static init")
	}
	if _, err := os.Stat(sock); err != nil {
		t.Skip("no Docker socket")
	}
	state := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_STATE_HOME" {
			return state
		}
		return ""
	}
	c := Candidate{Engine: sandbox.EngineRunsc, URI: "unix://" + sock, Images: sandbox.EngineDocker}
	rt, err := openRunsc(context.Background(), c, runscHost{euid: 0, getenv: getenv, inits: defaultInits()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	info, err := rt.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", info)
	if rt.Name() != sandbox.EngineRunsc || info.Name != sandbox.EngineRunsc || info.OCIRuntime != sandbox.OCIRuntimeRunsc || info.Rootless || info.Version == "" {
		t.Errorf("%s: %+v", rt.Name(), info)
	}
}
