//go:build !bridge_no_docker && !bridge_no_podman && !bridge_no_kubernetes

// The detection of every engine, as a build with all of them has it
// (built_test.go: a build without some).

package detect

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

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/docker"
	"github.com/bridge-mcp/bridge/sandbox/podman"
	"github.com/rs/zerolog"
)

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
	for _, engine := range []string{sandbox.EngineDocker, sandbox.EnginePodman} {
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
			if engine == sandbox.EngineDocker {
				_, err = docker.New(ctx, "unix://"+sock)
			} else {
				_, err = podman.New(ctx, "unix://"+sock)
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
		{Engine: sandbox.EnginePodman, URI: "unix://" + filepath.Join(filepath.Dir(sock), "missing.sock"), Why: "rootless Podman socket"},
		{Engine: sandbox.EngineDocker, URI: "unix://" + sock, Why: "$DOCKER_HOST"},
	}
	_, err := openFirst(ctx, cands, "", zerolog.New(io.Discard))
	if !errors.Is(err, sandbox.ErrEngineDenied) || !errors.Is(err, sandbox.ErrEngineUnreachable) {
		t.Fatalf("openFirst: %v, want ErrEngineDenied and ErrEngineUnreachable", err)
	}
	var ae *sandbox.AccessError
	if !errors.As(err, &ae) || ae.Socket != sock {
		t.Errorf("openFirst's error wraps no AccessError for %s", sock)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "permission denied on the container engine socket: tried") ||
		!strings.Contains(msg, "missing.sock") || !strings.Contains(msg, "you are not allowed to use this Docker engine") {
		t.Errorf("openFirst: %s", msg)
	}
	// Without a denial, the engine is only unreachable.
	_, err = openFirst(ctx, cands[:1], "", zerolog.New(io.Discard))
	if errors.Is(err, sandbox.ErrEngineDenied) || !errors.Is(err, sandbox.ErrEngineUnreachable) ||
		!strings.HasPrefix(err.Error(), "container engine unreachable: tried") {
		t.Errorf("openFirst with no denial: %v", err)
	}
}

func checkDenied(t *testing.T, err error, engine, path string) {
	t.Helper()
	var ae *sandbox.AccessError
	if !errors.As(err, &ae) {
		t.Fatalf("%v: not an AccessError", err)
	}
	if !errors.Is(err, sandbox.ErrEngineDenied) || !errors.Is(err, sandbox.ErrEngineUnreachable) {
		t.Errorf("%v: want ErrEngineDenied and ErrEngineUnreachable", err)
	}
	want := "permission denied on " + path + ": you are not allowed to use this " + map[string]string{sandbox.EngineDocker: "Docker", sandbox.EnginePodman: "Podman"}[engine] + " engine"
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
