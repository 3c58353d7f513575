package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/doctor"
)

// need skips t, or fails it in CI, when a prerequisite is missing.
func need(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	if ci() {
		t.Fatalf("CI=true, but "+format, args...)
	}
	t.Skipf(format, args...)
}

// unprivileged returns BRIDGE_ROOTLESS_USER, for a test that runs the
// bridge as that user through runuser: so it needs root, and does not run
// in the rootless run of the suite (which is that user already).
func unprivileged(t *testing.T) string {
	t.Helper()
	if rootless() {
		t.Skip("runs the bridge as another user, which needs root; this is the rootless run")
	}
	need(t, os.Getuid() == 0, "running as uid %d: runuser needs root", os.Getuid())
	name := os.Getenv("BRIDGE_ROOTLESS_USER")
	need(t, name != "", "BRIDGE_ROOTLESS_USER is not set (source /run/bridge-test/env)")
	_, err := exec.LookPath("runuser")
	need(t, err == nil, "no runuser: %v", err)
	return name
}

// bridgeAs runs a copy of the bridge binary that name may run, as name,
// with only env, and returns its stdout, stderr and exit code.
func bridgeAs(t *testing.T, name string, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's parent is private to root: the user needs a way in.
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(testSuite.bridgeBin)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bridge")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append([]string{"-u", name, "--", "env", "-i", "PATH=/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8"}, env...)
	cmd := exec.CommandContext(ctx, "runuser", append(append(argv, bin), args...)...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("runuser %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// socketFix is what the bridge must tell a user the socket at path refuses:
// the group to join when the group may use it, else rootless Podman.
func socketFix(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm()&0o060 == 0o060 && st.Gid != 0 {
		g, err := user.LookupGroupId(strconv.Itoa(int(st.Gid)))
		if err != nil {
			t.Fatal(err)
		}
		return "add yourself to the `" + g.Name + "` group"
	}
	return "use rootless Podman (`systemctl --user enable --now podman.socket`)"
}

// TestEngineDenied runs the bridge as a user that may not use the rootful
// engines' sockets: it must say so, and what would let the user in, never
// "start the engine", which runs already.
func TestEngineDenied(t *testing.T) {
	scope := only("the user is denied the engine's unix socket; the kubernetes engine is reached through a kubeconfig, "+
		"whose credentials, not a socket's permissions, let a user in", kindDocker, kindPodman)
	runsOn(t, scope)
	name := unprivileged(t)
	denied := map[string]string{} // engine -> its socket's path
	forEngines(t, scope, func(t *testing.T, e *engine) {
		path, ok := strings.CutPrefix(e.cand.URI, "unix://")
		need(t, ok, "%s is not a unix socket", e.cand.URI)
		if err := exec.Command("runuser", "-u", name, "--", "test", "-w", path).Run(); err == nil {
			need(t, false, "%s may use %s: nothing is denied", name, path)
		}
		denied[e.cand.Engine] = path
		fix := socketFix(t, path)
		want := []string{
			"permission denied on " + path,
			fmt.Sprintf("you are not allowed to use this %s engine", map[string]string{"docker": "Docker", "podman": "Podman"}[e.cand.Engine]),
			fix,
		}
		if e.cand.Engine == sandbox.EngineDocker {
			want = append(want, "`docker` group")
		}
		env := []string{"DOCKER_HOST=" + e.cand.URI}
		if e.cand.Engine == sandbox.EnginePodman {
			env = []string{"CONTAINER_HOST=" + e.cand.URI}
		}
		says := func(what, out string) {
			t.Helper()
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("%s does not say %q:\n%s", what, w, out)
				}
			}
			for _, w := range []string{"start dockerd", "systemctl start", "system service"} {
				if strings.Contains(out, w) {
					t.Errorf("%s says %q, but the engine runs:\n%s", what, w, out)
				}
			}
		}

		_, errOut, code := bridgeAs(t, name, env, "print(1)", "run", "--runtime", e.cand.Engine, "-")
		if code != 125 {
			t.Errorf("run: exit %d, want 125; stderr:\n%s", code, errOut)
		}
		if !strings.HasPrefix(errOut, "bridge run: permission denied on the container engine socket: tried") {
			t.Errorf("run does not lead with the denial:\n%s", errOut)
		}
		says("run", errOut)

		out, errOut, code := bridgeAs(t, name, env, "", "doctor", "--runtime", e.cand.Engine)
		if code != 1 {
			t.Errorf("doctor: exit %d, want 1; stderr:\n%s", code, errOut)
		}
		says("doctor", out)
		if !strings.Contains(out, "FAIL reachable") || !strings.Contains(out, "fix: "+fix) {
			t.Errorf("doctor does not give the fix as the reachable check's:\n%s", out)
		}
	})
	// With --runtime auto, every candidate failing and some denied, the
	// denial leads.
	if t.Failed() || denied[sandbox.EngineDocker] == "" || denied[sandbox.EnginePodman] == "" {
		return
	}
	t.Run("auto", func(t *testing.T) {
		env := []string{"DOCKER_HOST=unix://" + denied[sandbox.EngineDocker], "XDG_RUNTIME_DIR=/nonexistent"}
		_, errOut, code := bridgeAs(t, name, env, "print(1)", "run", "-")
		if code != 125 || !strings.HasPrefix(errOut, "bridge run: permission denied on the container engine socket: tried") ||
			!strings.Contains(errOut, "no podman socket at /nonexistent/podman/podman.sock") ||
			!strings.Contains(errOut, "permission denied on "+denied[sandbox.EngineDocker]) {
			t.Errorf("exit %d, stderr:\n%s", code, errOut)
		}
	})
}

// customImageHint is the rule of a test that a missing custom image's
// hint does not send the user to `bridge image build`.
func customImageHint() engineRule {
	return except("on kubernetes every missing image gets one hint (images.MissingHint): build it beside the node "+
		"with `bridge image build` and import it, which for a custom image is the advice this test forbids", kindKubernetes)
}

// TestImageMissingCustom: `bridge image build` cannot make an image of the
// user's choice, so a missing one must not send the user there.
func TestImageMissingCustom(t *testing.T) {
	const image = "localhost/nope:1"
	forEngines(t, customImageHint(), func(t *testing.T, e *engine) {
		want := image + " is not an image `bridge image build` makes"
		_, errOut, code := bridgeCLI(t, engineEnv(e), "print(1)", "run", "--runtime", e.cand.Engine, "--image", image, "--allow-unenforced-limits", "-")
		if code != 125 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "drop --image") ||
			strings.Contains(errOut, "build it with `bridge image build") {
			t.Errorf("run: exit %d, stderr:\n%s", code, errOut)
		}
		check := doctorCheck(t, e.cand.URI, engineEnv(e), "image", "--runtime", e.cand.Engine, "--image", image)
		if check.OK || !strings.Contains(check.Hint, want) {
			t.Errorf("doctor: %+v", check)
		}
	})
}

// TestImageMissingBuiltIn: the runner this bridge builds, missing, is built
// with `bridge image build`. The image is there on the engines under test,
// so this runs against a Podman service with a store of its own, empty.
func TestImageMissingBuiltIn(t *testing.T) {
	noEngine(t)
	if rootless() {
		t.Skip("starts a rootful Podman service")
	}
	need(t, os.Getuid() == 0, "running as uid %d: a rootful Podman service needs root", os.Getuid())
	podman, err := exec.LookPath("podman")
	need(t, err == nil, "no podman: %v", err)
	uri := emptyPodman(t, podman)
	env := []string{"CONTAINER_HOST=" + uri}
	want := "build it with `bridge image build --runtime podman`"
	_, errOut, code := bridgeCLI(t, env, "print(1)", "run", "--runtime", "podman", "-")
	if code != 125 || !strings.Contains(errOut, imageName()) || !strings.Contains(errOut, want) ||
		strings.Contains(errOut, "is not an image") {
		t.Errorf("run: exit %d, stderr:\n%s", code, errOut)
	}
	check := doctorCheck(t, uri, env, "image", "--runtime", "podman")
	if check.OK || check.Hint != want {
		t.Errorf("doctor: %+v", check)
	}
}

// doctorCheck runs `bridge doctor --json args...` and returns the check
// named name of the engine at uri.
func doctorCheck(t *testing.T, uri string, env []string, name string, args ...string) doctor.Check {
	t.Helper()
	out, errOut, _ := bridgeCLI(t, env, "", append([]string{"doctor", "--json"}, args...)...)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json printed no JSON (%v):\n%s\n%s", err, out, errOut)
	}
	for _, er := range rep.Engines {
		if er.Socket != uri {
			continue
		}
		for _, c := range er.Checks {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("doctor made no %s check of %s: %+v", name, uri, er)
	}
	t.Fatalf("doctor did not check %s:\n%s", uri, out)
	return doctor.Check{}
}

// emptyPodman starts a Podman API service on a store of its own, holding no
// image, and returns its socket's URI. It stops when the test ends.
func emptyPodman(t *testing.T, podman string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bt-podman-") // short: a socket path has 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "podman.sock")
	logf, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(podman, "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--storage-driver", "vfs", "system", "service", "--time=0", "unix://"+sock)
	// Its output goes to a file: a daemon holding the test's stdout open
	// could hold CI's log open too.
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("the Podman service did not make %s in 30 s:\n%s", sock, b)
		}
	}
	return "unix://" + sock
}
