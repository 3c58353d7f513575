package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

func TestAccessExplain(t *testing.T) {
	docker := socketAccess{known: true, uid: 0, gid: 105, owner: "root", group: "docker", perm: 0o660, self: 1001}
	tests := []struct {
		name      string
		a         socketAccess
		engine    string
		who, hint []string
		not       string
	}{
		{"docker group", docker, EngineDocker,
			[]string{"root:docker, mode 0660"},
			[]string{"add yourself to the `docker` group (`sudo usermod -aG docker $USER`, then log in again)",
				"or use rootless Podman (`systemctl --user enable --now podman.socket`)"}, "start"},
		{"added but not logged in again", func() socketAccess { a := docker; a.member = true; return a }(), EngineDocker,
			nil, []string{"added to the `docker` group after this session began: log in again", "newgrp docker"}, "usermod"},
		{"root only", socketAccess{known: true, owner: "root", group: "root", perm: 0o600, self: 1001}, EnginePodman,
			[]string{"root:root, mode 0600: root only"},
			[]string{"use rootless Podman (`systemctl --user enable --now podman.socket`), or run the bridge as root"}, "group"},
		{"group root is no way in", socketAccess{known: true, owner: "root", group: "root", perm: 0o660, self: 1001}, EnginePodman,
			[]string{"root only"}, []string{"run the bridge as root"}, "group"},
		{"another user's rootless socket", socketAccess{known: true, uid: 1000, gid: 1000, owner: "alice", group: "alice", perm: 0o600, self: 1001}, EnginePodman,
			[]string{"alice:alice, mode 0600: alice's only"}, []string{"use rootless Podman", "run the bridge as alice"}, "as root"},
		{"own socket closed", socketAccess{known: true, uid: 1001, gid: 1001, owner: "me", group: "me", perm: 0o000, self: 1001}, EnginePodman,
			nil, []string{"chmod u+rw /s.sock"}, "rootless"},
		{"mode allows: a security module", func() socketAccess { a := docker; a.member, a.inSession = true, true; return a }(), EngineDocker,
			nil, []string{"security module"}, "usermod"},
		{"directory closed, docker", socketAccess{self: 1001}, EngineDocker,
			nil, []string{"add yourself to the `docker` group", "rootless Podman"}, ""},
		{"directory closed, podman", socketAccess{self: 1001}, EnginePodman,
			nil, []string{"run the bridge as a user who may open /s.sock", "rootless Podman"}, "docker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			who, hint := tt.a.explain(tt.engine, "/s.sock")
			for _, w := range tt.who {
				if !strings.Contains(who, w) {
					t.Errorf("who %q does not say %q", who, w)
				}
			}
			for _, w := range tt.hint {
				if !strings.Contains(hint, w) {
					t.Errorf("hint %q does not say %q", hint, w)
				}
			}
			if tt.not != "" && strings.Contains(hint, tt.not) {
				t.Errorf("hint %q says %q", hint, tt.not)
			}
		})
	}
}

// deniedEnv names the sockets TestEngineSocketDenied's child may not use.
const deniedEnv = "BRIDGE_TEST_DENIED_SOCKETS"

// TestEngineSocketDenied connects both clients to sockets this user may not
// use, for real: root passes every file permission, so as root the test
// runs itself again as nobody.
func TestEngineSocketDenied(t *testing.T) {
	socks := os.Getenv(deniedEnv)
	if socks == "" {
		socks = deniedSockets(t)
		if os.Getuid() == 0 {
			runAsNobody(t, "^TestEngineSocketDenied$", deniedEnv+"="+socks)
			return
		}
	}
	sock, hidden, _ := strings.Cut(socks, ":")
	ctx := context.Background()
	for _, engine := range []string{EngineDocker, EnginePodman} {
		for _, path := range []string{sock, hidden} {
			why := "/socket-mode"
			if path == hidden {
				why = "/directory-mode"
			}
			t.Run(engine+why, func(t *testing.T) {
				rt, err := Connect(ctx, Candidate{Engine: engine, URI: "unix://" + path, Why: "test"})
				if err == nil {
					rt.Close()
					t.Fatal("connected")
				}
				checkDenied(t, err, engine, path)
			})
		}
		// The client alone, without Connect's look at the path first.
		t.Run(engine+"/client", func(t *testing.T) {
			var err error
			if engine == EngineDocker {
				_, err = NewDocker(ctx, "unix://"+sock)
			} else {
				_, err = NewPodman(ctx, "unix://"+sock)
			}
			checkDenied(t, err, engine, sock)
			if !errors.Is(err, fs.ErrPermission) {
				t.Errorf("the client's errno is lost: %v", err)
			}
		})
	}
	// With a socket missing and one denied, the denial leads, not
	// "start the engine".
	cands := []Candidate{
		{EnginePodman, "unix://" + filepath.Join(filepath.Dir(sock), "missing.sock"), "rootless Podman socket"},
		{EngineDocker, "unix://" + sock, "$DOCKER_HOST"},
	}
	_, err := openFirst(ctx, cands, "", zerolog.New(io.Discard))
	if !errors.Is(err, ErrEngineDenied) || !errors.Is(err, ErrEngineUnreachable) {
		t.Fatalf("openFirst: %v, want ErrEngineDenied and ErrEngineUnreachable", err)
	}
	var ae *AccessError
	if !errors.As(err, &ae) || ae.Socket != sock {
		t.Errorf("openFirst's error wraps no AccessError for %s", sock)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "permission denied on the container engine socket: tried") ||
		!strings.Contains(msg, "missing.sock") || !strings.Contains(msg, "you are not allowed to use this Docker engine") {
		t.Errorf("openFirst: %s", msg)
	}
	// Without a denial, the engine is only unreachable.
	_, err = openFirst(ctx, cands[:1], "", zerolog.New(io.Discard))
	if errors.Is(err, ErrEngineDenied) || !errors.Is(err, ErrEngineUnreachable) ||
		!strings.HasPrefix(err.Error(), "container engine unreachable: tried") {
		t.Errorf("openFirst with no denial: %v", err)
	}
}

func checkDenied(t *testing.T, err error, engine, path string) {
	t.Helper()
	var ae *AccessError
	if !errors.As(err, &ae) {
		t.Fatalf("%v: not an AccessError", err)
	}
	if !errors.Is(err, ErrEngineDenied) || !errors.Is(err, ErrEngineUnreachable) {
		t.Errorf("%v: want ErrEngineDenied and ErrEngineUnreachable", err)
	}
	want := "permission denied on " + path + ": you are not allowed to use this " + engineTitle(engine) + " engine"
	if ae.Engine != engine || ae.Socket != path || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %q, want it to begin %q", err, want)
	}
	// Starting the engine would not help: it runs, but not for us.
	if msg := err.Error(); ae.Hint == "" || strings.Contains(msg, "start dockerd") || strings.Contains(msg, "system service") {
		t.Errorf("hint %q of %q", ae.Hint, err)
	}
}

// deniedSockets makes two listening sockets that nobody but their owner
// (root) may use, and returns "SOCKET:HIDDEN": the first is closed to
// others by its mode, the second by its directory's.
func deniedSockets(t *testing.T) string {
	t.Helper()
	// Short paths: a unix socket's is at most 107 bytes.
	open, err := os.MkdirTemp("", "bt-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	closed := filepath.Join(open, "closed")
	if err := os.Mkdir(closed, 0o755); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, dir := range []string{open, closed} {
		p := filepath.Join(dir, "engine.sock")
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		// Root's child is another user: the mode of a root-only socket
		// shuts it out. Else shut out the owner, as root cannot be.
		mode := os.FileMode(0o600)
		if os.Getuid() != 0 {
			mode = 0
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	// A directory without search permission hides the socket in it: from
	// nobody when root's, from its owner too when not.
	closedMode := os.FileMode(0o700)
	if os.Getuid() != 0 {
		closedMode = 0o600
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, closedMode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(closed, 0o755) })
	return strings.Join(paths, ":")
}

// runAsNobody runs the test binary's tests matching run as the user nobody,
// with env added, and fails t if they fail. The binary is copied where
// nobody may run it.
func runAsNobody(t *testing.T, run string, env ...string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "bt-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", run, "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=" + os.TempDir()}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil || !strings.Contains(string(out), "--- PASS: "+strings.Trim(run, "^$")) {
		t.Fatalf("as nobody: %v", err)
	}
}
