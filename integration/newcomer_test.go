package integration

// A newcomer's path: the example policy at its default place, the README's
// commands next to it, flags and their errors, policy check, help and the
// version. Each test here is one of the fixes of the issue that walked it.

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// examplePolicyHome returns an XDG_CONFIG_HOME whose bridge/policy.yaml is
// policy.example.yaml, as a newcomer who copied it there has. On an engine
// that cannot enforce limits (rootless Podman on cgroup v1), which the
// example refuses by design, the copy allows that engine and nothing else
// changes.
func examplePolicyHome(t *testing.T, e *engine) (home, file string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "policy.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !e.enforced {
		b = []byte(strings.Replace(string(b), "require_enforced_limits: true", "require_enforced_limits: false", 1))
	}
	home = t.TempDir()
	file = filepath.Join(home, "bridge", "policy.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return home, file
}

func TestNewcomerExamplePolicyAndFlags(t *testing.T) {
	forEngines(t, aboveEngine("the CLI's flags under the example policy"), func(t *testing.T, e *engine) {
		home, file := examplePolicyHome(t, e)
		env := append(engineEnv(e), "XDG_CONFIG_HOME="+home)
		script := filepath.Join(t.TempDir(), "script.py")
		if err := os.WriteFile(script, []byte("print(6 * 7)\n"), 0o644); err != nil {
			t.Fatal(err)
		}

		// The README's command tightens every default it names: it runs.
		out, errOut, code := bridgeCLI(t, env, "", "run", "--runtime", e.cand.Engine, "--timeout", "10s", "--memory", "256Mi", "--cpus", "0.5", script)
		if code != 0 || strings.TrimSpace(out) != "42" {
			t.Fatalf("README's run with the example policy: exit %d, stdout %q\n%s", code, out, errOut)
		}
		// Flags after the file.
		out, errOut, code = bridgeCLI(t, env, "", "run", script, "--timeout", "5s", "--runtime", e.cand.Engine)
		if code != 0 || strings.TrimSpace(out) != "42" {
			t.Fatalf("flags after the file: exit %d, stdout %q\n%s", code, out, errOut)
		}
		// A tighter output limit in the size grammar applies.
		_, errOut, code = bridgeCLI(t, env, "import sys; sys.stdout.write('x' * 5000);", "run", "--runtime", e.cand.Engine, "--output-limit", "2Ki", "-")
		if code != 0 || !strings.Contains(errOut, "output cut: 2952 bytes of stdout") {
			t.Errorf("--output-limit 2Ki: exit %d\n%s", code, errOut)
		}
		// Loosening is refused, naming the key and the file.
		_, errOut, code = bridgeCLI(t, env, "print(1)", "run", "--memory", "1Gi", "-")
		if code != 2 || !strings.Contains(errOut, "--memory 1Gi would loosen the policy: "+file+" sets sandbox.memory: 512Mi") ||
			!strings.Contains(errOut, "change sandbox.memory in the file, or drop --memory") {
			t.Errorf("--memory 1Gi under the example policy: exit %d\n%s", code, errOut)
		}
		// doctor reads the default policy file, as the other commands do.
		out, errOut, code = bridgeCLI(t, env, "", "doctor", "--runtime", e.cand.Engine)
		if code != 0 || !strings.Contains(out, "policy "+file+": engine "+e.cand.Engine) {
			t.Errorf("doctor with the policy at its default place: exit %d\n%s\n%s", code, out, errOut)
		}
	})
}

func TestNewcomerFlagErrors(t *testing.T) {
	noEngine(t)
	env := []string{"XDG_CONFIG_HOME=" + t.TempDir()}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-timout", "5s", "-"}, "unknown flag --timout; did you mean --timeout?"},
		{[]string{"run", "--timeout", "10", "-"}, `invalid value "10" for --timeout: want a duration such as 30s, 5m or 1h30m, got a number 10: add a unit, e.g. 10s`},
		{[]string{"run", "--memory", "256MB", "-"}, `invalid value "256MB" for --memory: invalid size "256MB": write 256Mi for 1024s or 256M for 1000s`},
		{[]string{"serve", "--max-concurent", "2"}, "did you mean --max-concurrent?"},
		{[]string{"run", "--timeout", "10m", "-"}, "--timeout 10m is longer than sandbox.max_timeout, 5m under the built-in defaults"},
		{[]string{"run", "a.py", "b.py", "--timeout", "5s"}, `want one FILE (or - for stdin), got 2: "a.py", "b.py"`},
		{[]string{"polcy", "check"}, `unknown command "polcy"; did you mean "policy"?`},
		{[]string{"--timeout", "5s"}, "--timeout is not a command; flags come after the command"},
	} {
		_, errOut, code := bridgeCLI(t, env, "", tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("bridge %s: exit %d, want 2 and %q in\n%s", strings.Join(tc.args, " "), code, tc.want, errOut)
		}
	}
}

func TestNewcomerHelpAndVersion(t *testing.T) {
	noEngine(t)
	env := []string{"XDG_CONFIG_HOME=" + t.TempDir()}
	for _, args := range [][]string{{"policy", "-h"}, {"image", "--help"}, {"run", "-h"}, {"policy", "check", "-h"}} {
		out, errOut, code := bridgeCLI(t, env, "", args...)
		if code != 0 || !strings.Contains(out+errOut, "Usage") || strings.Contains(out+errOut, "Run `bridge") && strings.Contains(errOut, "want") {
			t.Errorf("bridge %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	v1, _, code1 := bridgeCLI(t, env, "", "version")
	v2, _, code2 := bridgeCLI(t, env, "", "--version")
	if code1 != 0 || code2 != 0 || v1 != v2 || !strings.HasPrefix(v1, "bridge ") || strings.TrimSpace(v1) == "bridge dev" {
		t.Fatalf("version %q (exit %d), --version %q (exit %d): want the same stamped version, not dev", v1, code1, v2, code2)
	}
	version := strings.TrimSpace(strings.TrimPrefix(v1, "bridge "))

	// serverInfo says the same.
	cmd := exec.Command(testSuite.bridgeBin, "serve", "--servers-config", testSuite.noServers)
	cmd.Env = append(os.Environ(), env...)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ServerInfo.Version; got != version {
		t.Errorf("serverInfo.version %q, bridge version %q", got, version)
	}
}

// `bridge proxy` names the variable it reads its token from.
func TestNewcomerProxyTokenLog(t *testing.T) {
	noEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testSuite.bridgeBin, "proxy", "--http", "0.0.0.0:0", "--servers-config", testSuite.noServers)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "BRIDGE_PROXY_TOKEN=", "BRIDGE_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "generated a bearer token") {
			if !strings.Contains(sc.Text(), "without BRIDGE_PROXY_TOKEN") {
				t.Errorf("the proxy's token log names the wrong variable: %s", sc.Text())
			}
			return
		}
	}
	t.Fatal("bridge proxy beyond loopback logged no generated token")
}

func TestNewcomerPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	env := []string{"XDG_CONFIG_HOME=" + dir}
	// No file: the defaults apply, and are printed.
	out, errOut, code := bridgeCLI(t, env, "", "policy", "check", "--offline")
	if code != 0 || !strings.Contains(errOut, "no policy file at "+filepath.Join(dir, "bridge", "policy.yaml")+": the built-in defaults apply") ||
		!strings.Contains(out, "memory: 512Mi") {
		t.Errorf("policy check with no file: exit %d\n%s\n%s", code, out, errOut)
	}
	// The README's audit snippet where the folder does not exist: check
	// says what start-up says, and both say what to do.
	missing := filepath.Join(dir, "no-such-folder")
	pol := filepath.Join(dir, "audit.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\naudit: {file: "+missing+"/audit.jsonl}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := "audit.file: the folder " + missing + " does not exist: create it (mkdir -p " + missing + ")"
	_, errOut, code = bridgeCLI(t, env, "", "policy", "check", "--offline", pol)
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("policy check, audit folder missing: exit %d\n%s", code, errOut)
	}
	_, errOut, code = bridgeCLI(t, env, "print(1)", "run", "--policy", pol, "-")
	if code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("run, audit folder missing: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("policy check created the audit folder")
	}
	// An unquoted glob.
	star := filepath.Join(dir, "star.yaml")
	if err := os.WriteFile(star, []byte("version: 1\ntools:\n  servers: [*]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = bridgeCLI(t, env, "", "policy", "check", "--offline", star)
	if code != 1 || !strings.Contains(errOut, star+`:3:13: invalid YAML: an unquoted * (a bare * starts a YAML alias): quote globs, e.g. "*"`) {
		t.Errorf("policy check, unquoted *: exit %d\n%s", code, errOut)
	}
	// An image the engine does not have.
	forEngines(t, customImageHint(), func(t *testing.T, e *engine) {
		file := filepath.Join(dir, "image-"+e.name+".yaml")
		body := "version: 1\n" + sandboxSection(e) + "  image: localhost/nope:1\n"
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := bridgeCLI(t, engineEnv(e), "", "policy", "check", file)
		if code != 1 || !strings.Contains(errOut, "has no image localhost/nope:1: localhost/nope:1 is not an image `bridge image build` makes") {
			t.Errorf("policy check, image missing: exit %d\n%s", code, errOut)
		}
		// The image this binary runs is there: no problem.
		ok := filepath.Join(dir, "ok-"+e.name+".yaml")
		if err := os.WriteFile(ok, []byte("version: 1\n"+sandboxSection(e)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, errOut, code := bridgeCLI(t, engineEnv(e), "", "policy", "check", ok); code != 0 {
			t.Errorf("policy check of a good policy: exit %d\n%s", code, errOut)
		}
	})
}

// make install puts the binary, stamped with git describe, under PREFIX.
func TestNewcomerMakeInstall(t *testing.T) {
	noEngine(t)
	if rootless() {
		t.Skip("the rootless run has no toolchain; the rootful run covers make install")
	}
	root := repoRoot()
	desc, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		if ci() {
			t.Fatalf("git describe: %v", err)
		}
		t.Skipf("not a git checkout: %v", err)
	}
	prefix := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "install", "PREFIX="+prefix)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(prefix, "bin", "bridge"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "bridge " + strings.TrimSpace(string(desc)) + "\n"; string(out) != want {
		t.Errorf("installed bridge says %q, want %q", out, want)
	}
	cmd = exec.Command("make", "--no-print-directory", "-C", root, "uninstall", "PREFIX="+prefix)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make uninstall: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(prefix, "bin", "bridge")); !os.IsNotExist(err) {
		t.Errorf("make uninstall left the binary: %v", err)
	}
}
