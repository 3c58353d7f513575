package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/doctor"
	"github.com/bridge-mcp/bridge/sandbox/kubernetes"
)

// bridgeCLI runs the bridge binary and returns its stdout, stderr and exit code.
func bridgeCLI(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testSuite.bridgeBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("bridge %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// engineEnv points the CLI at e's socket.
func engineEnv(e *engine) []string {
	switch e.imagesEngine() {
	case sandbox.EngineDocker: // and runsc with Docker's images
		return []string{"DOCKER_HOST=" + e.cand.URI}
	case sandbox.EngineKubernetes:
		var env []string
		for _, k := range []string{"KUBECONFIG", kubernetes.EnvNode, kubernetes.EnvNamespace, kubernetes.EnvKubeletDir} {
			if v := os.Getenv(k); v != "" {
				env = append(env, k+"="+v)
			}
		}
		return env
	}
	return []string{"CONTAINER_HOST=" + e.cand.URI}
}

func TestCLIRun(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		dir := t.TempDir()
		script := filepath.Join(dir, "hello.py")
		if err := os.WriteFile(script, []byte("import os\nprint(21 * 2, os.getuid())\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		flags := []string{"run", "--runtime", e.cand.Engine}
		if !e.enforced {
			flags = append(flags, "--allow-unenforced-limits")
		}
		type cliCase struct {
			name     string
			args     []string
			stdin    string
			wantCode int
			wantOut  string
			wantErr  string
		}
		tests := []cliCase{
			{"file", []string{script}, "", 0, "42 65534\n", ""},
			{"stdin", []string{"-"}, "print('from stdin')", 0, "from stdin\n", ""},
			{"exception", []string{"-"}, "1/0", 1, "", "ZeroDivisionError: division by zero"},
			{"sys.exit", []string{"-"}, "import sys; sys.exit(7)", 7, "", ""},
			{"syntax error", []string{"-"}, "print(\n", 1, "", "SyntaxError"},
			{"timeout", []string{"--timeout", "1s", "-"}, "print('x', flush=True)\nwhile True: pass", 124, "x\n", "timed out after 1s"},
			{"output cut", []string{"--output-limit", "1024", "-"}, "print('z' * 5000)", 0, strings.Repeat("z", 1024), "output cut: 3977 bytes of stdout"},
		}
		if e.enforced {
			tests = append(tests, cliCase{"memory", []string{"--memory", "64Mi", "-"}, "x = 'a' * (512 << 20)", 137, "", "memory limit of 64 MiB"})
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				out, errOut, code := bridgeCLI(t, engineEnv(e), tt.stdin, append(flags, tt.args...)...)
				if code != tt.wantCode || out != tt.wantOut || !strings.Contains(errOut, tt.wantErr) {
					t.Fatalf("exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want it to contain %q)", code, tt.wantCode, out, tt.wantOut, errOut, tt.wantErr)
				}
			})
		}
	})
}

func TestCLIErrorsSayWhatToDo(t *testing.T) {
	noEngine(t)
	tests := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantErr  []string
	}{
		{"engine unreachable", []string{"DOCKER_HOST=unix:///nonexistent/docker.sock"}, []string{"run", "--runtime", "docker", "-"}, 125,
			[]string{"/nonexistent/docker.sock", "bridge doctor"}},
		{"bad size", nil, []string{"run", "--memory", "lots", "-"}, 2, []string{`invalid size "lots"`, "512Mi"}},
		{"bad runtime", nil, []string{"run", "--runtime", "lxc", "-"}, 2, []string{`invalid value "lxc" for --runtime: "lxc" is not one of auto, podman, docker`}},
		{"missing file", nil, []string{"run", "/nonexistent/code.py"}, 2, []string{"/nonexistent/code.py", "no such file"}},
		{"two files", nil, []string{"run", "a.py", "b.py"}, 2, []string{`want one FILE (or - for stdin), got 2: "a.py", "b.py"`}},
		{"limit out of range", nil, []string{"run", "--pids", "1", "-"}, 2, []string{`invalid value "1" for --pids: 1 is out of range: it must be 8 .. 4194304`}},
		{"unknown command", nil, []string{"frobnicate"}, 2, []string{`unknown command "frobnicate"`, "Commands:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := bridgeCLI(t, tt.env, "print(1)", tt.args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, errOut)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr does not say %q:\n%s", w, errOut)
				}
			}
		})
	}
}

func TestCLIImageMissing(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		args := []string{"run", "--runtime", e.cand.Engine, "--image", "localhost/bridge-runner:does-not-exist", "--allow-unenforced-limits", "-"}
		_, errOut, code := bridgeCLI(t, engineEnv(e), "print(1)", args...)
		want := "bridge image build --runtime " + e.cand.Engine
		if e.cand.Engine == sandbox.EngineKubernetes {
			// A cluster builds nothing: the image is built beside the
			// node and imported into its runtime.
			want = "ctr -n k8s.io images import"
		}
		if code != 125 || !strings.Contains(errOut, "bridge-runner:does-not-exist") || !strings.Contains(errOut, want) {
			t.Fatalf("exit %d, stderr:\n%s", code, errOut)
		}
	})
}

func TestDoctor(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		out, errOut, code := bridgeCLI(t, engineEnv(e), "", "doctor", "--runtime", e.cand.Engine, "--json")
		var rep doctor.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("doctor --json printed no JSON (%v):\n%s\n%s", err, out, errOut)
		}
		var er *doctor.EngineReport
		for i := range rep.Engines {
			if rep.Engines[i].Socket == e.cand.URI {
				er = &rep.Engines[i]
			}
		}
		if er == nil {
			t.Fatalf("doctor did not check %s:\n%s", e.cand.URI, out)
		}
		checks := map[string]doctor.Check{}
		for _, c := range er.Checks {
			checks[c.Name] = c
		}
		// What must hold on every engine, rootless or not.
		for _, name := range []string{"reachable", "image", "relay", "network", "read_only_root", "uid", "capabilities", "no_new_privs", "tmpfs"} {
			if c, ok := checks[name]; !ok || !c.OK {
				t.Errorf("check %s: %+v", name, c)
			}
		}
		if !strings.HasPrefix(er.Python, "3.") {
			t.Errorf("python version %q", er.Python)
		}
		limitChecks := []string{"limits_enforceable", "memory_limit", "pids_limit", "cpu_limit"}
		if e.enforced {
			for _, name := range limitChecks {
				if !checks[name].OK {
					t.Errorf("check %s: %+v", name, checks[name])
				}
			}
			if code != 0 || !er.Usable || !rep.OK {
				t.Fatalf("doctor exit %d, usable %v:\n%s", code, er.Usable, out)
			}
			return
		}
		// An engine that drops limits: doctor must say so, from inside too,
		// with a hint, and must not call the engine usable.
		for _, name := range limitChecks {
			if c := checks[name]; c.OK || c.Hint == "" {
				t.Errorf("check %s should fail with a hint here: %+v", name, c)
			}
		}
		if er.Usable || code == 0 {
			t.Fatalf("doctor calls an engine that cannot enforce limits usable (exit %d)", code)
		}
		out, _, code = bridgeCLI(t, engineEnv(e), "", "doctor", "--runtime", e.cand.Engine, "--allow-unenforced-limits")
		if code != 0 || !strings.Contains(out, "NOT enforced") {
			t.Fatalf("doctor --allow-unenforced-limits: exit %d\n%s", code, out)
		}
	})
}

// A bridge killed with SIGKILL cannot clean up: its runner exits when the
// relay socket closes, and the next bridge on this host removes the
// container and the run directory the dead one left.
// runDirs lists the run directories in a run root (the root also holds
// the Podman backend's seccomp profile, which is not a run's).
func runDirs(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(root)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range ents {
		// A pod's node folder (run-….node, the kubernetes engine's /tmp and
		// data mounts) goes with its run folder.
		if e.IsDir() && strings.HasPrefix(e.Name(), "run-") && !strings.HasSuffix(e.Name(), ".node") {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

func TestCrashedBridgeIsReaped(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		runtimeDir, err := os.MkdirTemp("", "bridge-crash-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(runtimeDir)
		args := []string{"run", "--runtime", e.cand.Engine, "--allow-unenforced-limits", "-"}
		cmd := exec.Command(testSuite.bridgeBin, args...)
		cmd.Env = append(os.Environ(), append(engineEnv(e), "XDG_RUNTIME_DIR="+runtimeDir)...)
		cmd.Stdin = strings.NewReader("print('up', flush=True)\nwhile True: pass")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 3)
		if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "up\n" {
			cmd.Process.Kill()
			t.Fatalf("the run did not start: %q %v", buf, err)
		}
		owned := map[string]string{sandbox.LabelManaged: "true"}
		mine := func() []sandbox.ContainerInfo {
			cs, err := e.rt.List(context.Background(), owned)
			if err != nil {
				t.Fatal(err)
			}
			var out []sandbox.ContainerInfo
			for _, c := range cs {
				if strings.Contains(c.Labels[sandbox.LabelOwner], fmt.Sprintf("/%d/", cmd.Process.Pid)) {
					out = append(out, c)
				}
			}
			return out
		}
		if n := len(mine()); n != 1 {
			t.Fatalf("%d containers owned by the bridge process, want 1", n)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		runRoot := filepath.Join(runtimeDir, "bridge")
		if dirs := runDirs(t, runRoot); len(dirs) != 1 {
			t.Fatalf("the killed bridge left %d run directories, want 1 (else this test proves nothing)", len(dirs))
		}
		if n := len(mine()); n != 1 {
			t.Fatalf("the killed bridge left %d containers, want 1 (else this test proves nothing)", n)
		}
		// The next bridge to start in the same run root removes what the
		// killed one left, and only that; its own run goes on.
		live := exec.Command(testSuite.bridgeBin, args...)
		live.Env = cmd.Env
		live.Stdin = strings.NewReader("print('up', flush=True)\nwhile True: pass")
		liveOut, err := live.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := live.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			live.Process.Signal(syscall.SIGTERM) // it cleans up after itself
			live.Wait()
		}()
		if _, err := io.ReadFull(liveOut, buf); err != nil || string(buf) != "up\n" {
			t.Fatalf("the next bridge's run did not start: %q %v", buf, err)
		}
		liveOwned := func() int {
			cs, err := e.rt.List(context.Background(), owned)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, c := range cs {
				if strings.Contains(c.Labels[sandbox.LabelOwner], fmt.Sprintf("/%d/", live.Process.Pid)) {
					n++
				}
			}
			return n
		}
		if left := mine(); len(left) != 0 {
			t.Fatalf("the next bridge's start left the killed one's containers: %v", left)
		}
		if dirs := runDirs(t, runRoot); len(dirs) != 1 {
			t.Fatalf("%d run directories, want only the running bridge's", len(dirs))
		}
		// Reaping again, with a bridge running, takes nothing of it.
		n, err := sandbox.Reap(context.Background(), e.rt, runRoot, zerolog.New(zerolog.NewTestWriter(t)))
		if err != nil || n != 0 {
			t.Fatalf("Reap with only a live bridge's run = %d, %v; want 0", n, err)
		}
		if liveOwned() != 1 {
			t.Fatal("Reap removed the container of a bridge that is still running")
		}
		live.Process.Signal(syscall.SIGTERM)
		live.Wait()
		if liveOwned() != 0 {
			t.Fatal("the interrupted bridge left its container")
		}
		if ents, _ := os.ReadDir(runRoot); len(ents) != 0 {
			var names []string
			for _, e := range ents {
				if !strings.HasPrefix(e.Name(), "seccomp-") { // the profile, shared
					names = append(names, e.Name())
				}
			}
			if len(names) > 0 {
				t.Fatalf("run directories left: %v", names)
			}
		}
	})
}

func TestCLIPolicy(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nsandbox:\n  memroy: 1Gi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("version: 1\ntools:\n  rules:\n    - tool: \"write_*\"\n      action: deny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"XDG_CONFIG_HOME=" + dir}
	_, stderr, code := bridgeCLI(t, env, "", "policy", "check", bad)
	if code != 1 || !strings.Contains(stderr, bad+`:3:3: unknown key "memroy" in sandbox`) || !strings.Contains(stderr, `did you mean "memory"?`) {
		t.Errorf("policy check of a typo: exit %d\n%s", code, stderr)
	}
	stdout, _, code := bridgeCLI(t, env, "", "policy", "check", good)
	if code != 0 || !strings.Contains(stdout, "memory: 512Mi") || !strings.Contains(stdout, `tool: "write_*"`) {
		t.Errorf("policy check of a good file: exit %d\n%s", code, stdout)
	}
	stdout, _, code = bridgeCLI(t, env, "", "policy", "explain", "--offline", "--policy", good, "filesystem", "write_file")
	if code != 1 || !strings.Contains(stdout, "deny") || !strings.Contains(stdout, "tools.rules[0] (line 4)") {
		t.Errorf("policy explain: exit %d\n%s", code, stdout)
	}
	// serve refuses to start on an invalid policy, and refuses flags the policy sets.
	_, stderr, code = bridgeCLI(t, env, "", "serve", "--policy", bad)
	if code != 2 || !strings.Contains(stderr, ":3:3:") {
		t.Errorf("serve with an invalid policy: exit %d\n%s", code, stderr)
	}
	// A flag may tighten the policy, never loosen it (docs/policy.md#flags-and-the-policy).
	_, stderr, code = bridgeCLI(t, env, "", "serve", "--policy", good, "--memory", "1Gi")
	if code != 2 || !strings.Contains(stderr, "--memory 1Gi would loosen the policy: "+good+" sets sandbox.memory: 512Mi") {
		t.Errorf("serve with a policy and a larger --memory: exit %d\n%s", code, stderr)
	}
	podmanOnly := filepath.Join(dir, "podman-only.yaml")
	if err := os.WriteFile(podmanOnly, []byte("version: 1\nsandbox: {engine: podman}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = bridgeCLI(t, env, "", "doctor", "--policy", podmanOnly, "--runtime", "docker")
	if code != 2 || !strings.Contains(stderr, "--runtime docker would loosen the policy: "+podmanOnly+" sets sandbox.engine: podman") {
		t.Errorf("doctor with a podman policy and --runtime docker: exit %d\n%s", code, stderr)
	}
	// doctor checks an engine as the policy says.
	forEachEngine(t, func(t *testing.T, e *engine) {
		file := filepath.Join(dir, "doctor-"+e.name+".yaml")
		if err := os.WriteFile(file, []byte("version: 1\n"+sandboxSection(e)), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := bridgeCLI(t, engineEnv(e), "", "doctor", "--policy", file)
		if code != 0 || !strings.Contains(stdout, "policy "+file+": engine "+e.cand.Engine) {
			t.Errorf("doctor --policy: exit %d\n%s\n%s", code, stdout, stderr)
		}
	})
}

// TestDoctorShowsPolicyInForce: without --policy, doctor says which policy
// is in force (the file at the default place, or the built-in defaults)
// and what it sets for the pool, sessions and skills; it said nothing when
// there was no file.
func TestDoctorShowsPolicyInForce(t *testing.T) {
	forEngines(t, aboveEngine("what doctor says of the policy in force"), func(t *testing.T, e *engine) {
		config := t.TempDir()
		env := append(engineEnv(e), "XDG_CONFIG_HOME="+config)
		out, errOut, code := bridgeCLI(t, env, "", "doctor", "--runtime", e.cand.Engine)
		for _, want := range []string{"the built-in defaults", "warm pool: 2 ready container(s)", "sessions: off", "skills: "} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor without a policy file: no %q in\n%s\n%s (exit %d)", want, out, errOut, code)
			}
		}
		file := filepath.Join(config, "bridge", "policy.yaml")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte("version: 1\npool:\n  size: 0\nsessions:\n  enabled: true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code = bridgeCLI(t, env, "", "doctor", "--runtime", e.cand.Engine)
		for _, want := range []string{"policy " + file, "warm pool: off", "sessions: on"} {
			if !strings.Contains(out, want) {
				t.Errorf("doctor with the default policy file: no %q in\n%s\n%s (exit %d)", want, out, errOut, code)
			}
		}
	})
}

// TestCLIRunOutputs: `bridge run --outputs DIR` keeps the files the code
// wrote in /tmp/outputs (a real PNG, and a name that tries to climb out of
// DIR), never replaces a file there nor follows a link, and says on stderr
// where each went; without --outputs it says how many were not kept.
func TestCLIRunOutputs(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		work := t.TempDir()
		dir := filepath.Join(work, "out")
		outside := filepath.Join(work, "victim.txt")
		if err := os.WriteFile(outside, []byte("untouched"), 0o600); err != nil {
			t.Fatal(err)
		}
		// A 1x1 PNG, written as bytes: the slim image has no matplotlib.
		code := `import base64, os
png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
open("/tmp/outputs/plot.png", "wb").write(png)
open("/tmp/outputs/..\\..\\victim.txt", "w").write("escaped")
os.symlink("/etc/passwd", "/tmp/outputs/passwd")
print("wrote")
`
		flags := []string{"run", "--runtime", e.cand.Engine}
		if !e.enforced {
			flags = append(flags, "--allow-unenforced-limits")
		}
		out, errOut, rc := bridgeCLI(t, engineEnv(e), code, append(flags, "-")...)
		if rc != 0 || out != "wrote\n" || !strings.Contains(errOut, "bridge: 3 files in /tmp/outputs were not kept: pass --outputs DIR to keep them") {
			t.Fatalf("without --outputs: exit %d, stdout %q, stderr:\n%s", rc, out, errOut)
		}
		for i := range 2 {
			out, errOut, rc = bridgeCLI(t, engineEnv(e), code, append(flags, "--outputs", dir, "-")...)
			if rc != 0 || out != "wrote\n" {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s", rc, out, errOut)
			}
			png, victim := "plot.png", "victim.txt"
			if i == 1 {
				png, victim = "plot (2).png", "victim (2).txt"
			}
			for _, want := range []string{
				"bridge: kept /tmp/outputs/plot.png as " + filepath.Join(dir, png) + " (image/png, 70 bytes)",
				`bridge: kept /tmp/outputs/..\..\victim.txt as ` + filepath.Join(dir, victim),
				"bridge: not kept: /tmp/outputs/passwd (0 bytes): a symbolic link: never followed",
			} {
				if !strings.Contains(errOut, want) {
					t.Errorf("run %d: stderr does not say %q:\n%s", i+1, want, errOut)
				}
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, "plot.png"))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) != 70 {
			t.Errorf("plot.png: %d bytes, %v", len(b), err)
		}
		if b, _ := os.ReadFile(outside); string(b) != "untouched" {
			t.Errorf("a file outside --outputs was written: %q", b)
		}
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, en := range ents {
			names = append(names, en.Name())
		}
		if want := "plot (2).png plot.png victim (2).txt victim.txt"; strings.Join(names, " ") != want {
			t.Errorf("the folder holds %q, want %s", names, want)
		}
	})
}

// TestCLIImageOnOtherEngine: an --image that only the other engine holds
// (auto picked Podman; the image is in Docker's store, and the other way
// round) fails with --runtime for the engine that holds it.
func TestCLIImageOnOtherEngine(t *testing.T) {
	byName := map[string]*engine{}
	for _, e := range testSuite.engines {
		byName[e.name] = e
	}
	docker, podman := byName["docker"], byName["podman"]
	if docker == nil || podman == nil {
		t.Skip("needs Docker and rootful Podman under test")
	}
	env := []string{"DOCKER_HOST=" + docker.cand.URI, "CONTAINER_HOST=" + podman.cand.URI}
	for _, tt := range []struct {
		holder  *engine
		runtime string // what the run asks for
		want    string
	}{
		{docker, "auto", "--runtime docker"},
		{podman, "docker", "--runtime podman"},
	} {
		t.Run("in "+tt.holder.name, func(t *testing.T) {
			image := fmt.Sprintf("localhost/bridge-runner:only-%s-%d", tt.holder.name, time.Now().UnixNano())
			var cmd *exec.Cmd
			if tt.holder == docker {
				cmd = exec.Command("docker", "--host", docker.cand.URI, "tag", imageName(), image)
			} else {
				cmd = exec.Command("podman", "--remote", "--url", podman.cand.URI, "tag", imageName(), image)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("tagging %s: %v\n%s", image, err, out)
			}
			t.Cleanup(func() { removeImage(t, tt.holder, image) })
			_, errOut, code := bridgeCLI(t, env, "print(1)", "run", "--runtime", tt.runtime, "--image", image, "--allow-unenforced-limits", "-")
			if code != 125 || !strings.Contains(errOut, tt.holder.name+" holds "+image+": run with "+tt.want) {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
		})
	}
}

// TestCLIRunscOnRuncPodman: --oci-runtime runsc on a Podman service that
// runs every container with runc, where gVisor is installed (as `bridge
// doctor` says): the error says so, and that a second service is needed,
// not to install gVisor.
func TestCLIRunscOnRuncPodman(t *testing.T) {
	var podman *engine
	for _, e := range testSuite.engines {
		if e.name == "podman" {
			podman = e
		}
	}
	if podman == nil {
		t.Skip("needs rootful Podman under test")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		if ci() {
			t.Fatal("runsc is not installed: integration/env/setup.sh installs it")
		}
		t.Skip("runsc is not installed")
	}
	_, errOut, code := bridgeCLI(t, engineEnv(podman), "print(1)", "run", "--runtime", "podman", "--oci-runtime", "runsc", "-")
	if code != 125 || !strings.Contains(errOut, "gVisor is installed on this machine") ||
		!strings.Contains(errOut, "CONTAINER_HOST=unix:///run/podman/podman-runsc.sock") || strings.Contains(errOut, "install gVisor") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
}

// TestCLIRunIsAScript: bridge run runs a file as python3 would: the last
// expression's value is not printed, as it is for run_python's cells.
func TestCLIRunIsAScript(t *testing.T) {
	forEngines(t, aboveEngine("how `bridge run` runs a file"), func(t *testing.T, e *engine) {
		env := append(engineEnv(e), "XDG_CONFIG_HOME="+t.TempDir())
		args := []string{"run", "--runtime", e.cand.Engine, "-"}
		if !e.enforced {
			args = append(args, "--allow-unenforced-limits")
		}
		stdout, stderr, code := bridgeCLI(t, env, "print('start')\nx = 41\nx + 1\n", args...)
		if code != 0 || stdout != "start\n" {
			t.Errorf("bridge run: exit %d, stdout %q (want only \"start\\n\")\n%s", code, stdout, stderr)
		}
	})
}
