// Package integration holds the end-to-end tests of the bridge against real
// container engines. `make integration` runs them after `make setup image`.
//
// Which engines: BRIDGE_TEST_ENGINES (comma-separated: docker, podman,
// podman-rootless, kubernetes, runsc: gVisor driven by the bridge, as root,
// with Docker's images), default docker and podman. With CI=true a
// listed engine that is unreachable, or has no runner image, fails the
// suite instead of skipping it. BRIDGE_TEST_ROOTLESS=1 marks a run as the
// unprivileged user's: only the rootless Podman engine is tested.
//
// Which tests run on which engine each test says, not the Makefile: each
// pass of `make integration` (rootful, rootless, kubernetes) runs every
// test, and a test states the kinds of engine it can run on (an
// engineRule, or noEngine), skipping the others with the reason. So a new
// test runs on every engine unless it says why not.
package integration

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/integration/testupstream"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/detect"
)

// engine is one engine under test.
type engine struct {
	name string // docker, podman, podman-rootless, kubernetes, runsc
	cand detect.Candidate
	rt   sandbox.Runtime
	// enforced is whether the engine enforces memory/pids/cpu limits.
	enforced bool
}

// suite is what TestMain prepares for the tests.
type suite struct {
	engines []*engine
	// wanted are the engines this pass tests (BRIDGE_TEST_ENGINES),
	// reachable or not.
	wanted []string
	// bridgeBin is a bridge binary built from this tree.
	bridgeBin string
	// noServers is a servers file with no servers.
	noServers string
	// problems are engines that should be tested but cannot be; in CI each
	// fails the suite.
	problems []string
}

// testSuite is set once by TestMain before any test runs and only read after.
var testSuite suite

func ci() bool { return os.Getenv("CI") == "true" }

func rootless() bool { return os.Getenv("BRIDGE_TEST_ROOTLESS") == "1" }

func TestMain(m *testing.M) {
	// Started by a bridge as the "misbehave" upstream (upstream_test.go).
	if os.Getenv(upstreamEnv) == "1" {
		os.Exit(testupstream.Run(os.Args[1:], os.Stderr))
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	testSuite, err = setup(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration setup:", err)
		return 1
	}
	defer func() {
		for _, e := range testSuite.engines {
			e.rt.Close()
		}
		if testSuite.bridgeBin != "" {
			os.RemoveAll(filepath.Dir(testSuite.bridgeBin))
		}
	}()
	for _, p := range testSuite.problems {
		fmt.Fprintln(os.Stderr, "integration: not tested:", p)
	}
	if len(testSuite.problems) > 0 && ci() {
		fmt.Fprintln(os.Stderr, "integration: CI=true, so an engine that cannot be tested is a failure")
		return 1
	}
	// Containers that were there before the suite, and those of bridges
	// that run beside it (a developer's own, another suite's), are not the
	// suite's to count.
	before := map[string]bool{}
	lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	for _, e := range testSuite.engines {
		if cs, err := e.rt.List(lctx, map[string]string{sandbox.LabelManaged: "true"}); err == nil {
			for _, c := range cs {
				before[c.ID] = true
			}
		}
	}
	code := m.Run()
	// Nothing may be left behind: no container with the bridge's label that
	// a bridge of this suite made.
	lctx, lcancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	for _, e := range testSuite.engines {
		cs, err := e.rt.List(lctx, map[string]string{sandbox.LabelManaged: "true"})
		if err != nil {
			fmt.Fprintf(os.Stderr, "integration: listing %s containers: %v\n", e.name, err)
			code = 1
			continue
		}
		var left []sandbox.ContainerInfo
		others := 0
		for _, c := range cs {
			switch {
			case before[c.ID]:
			case ownerLivesApart(c.Labels[sandbox.LabelOwner]):
				others++
			default:
				left = append(left, c)
			}
		}
		if others > 0 {
			fmt.Fprintf(os.Stderr, "integration: %d container(s) on %s belong to bridges that run beside the suite: not counted\n", others, e.name)
		}
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "integration: FAIL: %d container(s) with label %s left on %s: %v\n", len(left), sandbox.LabelManaged, e.name, left)
			code = 1
		} else {
			fmt.Fprintf(os.Stderr, "integration: no bridge containers left on %s\n", e.name)
		}
	}
	return code
}

// ownerLivesApart reports whether owner (a sandbox.LabelOwner value) names
// a bridge apart from the suite: one in another PID namespace (in a
// container, with the engine's socket), or alive in this one and not
// started by the suite (not a descendant of this process). Every bridge of
// the suite runs in this PID namespace; a dead owner's containers here are
// left behind, and count.
func ownerLivesApart(owner string) bool {
	f := strings.Split(owner, "/")
	if len(f) != 5 {
		return false
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	if f[1] != strings.TrimSpace(string(boot)) || f[2] != ns {
		return f[1] == strings.TrimSpace(string(boot)) // a bridge of another PID namespace now
	}
	pid, err := strconv.Atoi(f[3])
	if err != nil || startTime(pid) != f[4] {
		return false
	}
	for p := pid; p > 1; p = parentPID(p) {
		if p == os.Getpid() {
			return false
		}
	}
	return true
}

// parentPID is the parent of process pid (field 4 of /proc/PID/stat), or
// 0 when it is gone.
func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func setup(ctx context.Context) (suite, error) {
	var s suite
	wanted := []string{"docker", "podman"}
	if rootless() {
		wanted = []string{"podman-rootless"}
	}
	if v := os.Getenv("BRIDGE_TEST_ENGINES"); v != "" {
		wanted = strings.Split(v, ",")
	}
	s.wanted = wanted
	image := images.Name()
	for _, name := range wanted {
		c, err := candidate(name)
		if err != nil {
			return s, err
		}
		rt, err := detect.Connect(ctx, c)
		if err != nil {
			s.problems = append(s.problems, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if _, err := rt.ImageInfo(ctx, image); err != nil {
			s.problems = append(s.problems, fmt.Sprintf("%s: %v (run `make image`)", name, err))
			rt.Close()
			continue
		}
		info, err := rt.Info(ctx)
		if err != nil {
			s.problems = append(s.problems, fmt.Sprintf("%s: %v", name, err))
			rt.Close()
			continue
		}
		if rootless() != info.Rootless {
			return s, fmt.Errorf("%s at %s: rootless=%v, but BRIDGE_TEST_ROOTLESS=%q", name, c.URI, info.Rootless, os.Getenv("BRIDGE_TEST_ROOTLESS"))
		}
		s.engines = append(s.engines, &engine{name: name, cand: c, rt: rt, enforced: info.Enforce.All()})
	}
	bin, err := buildBridge()
	if err != nil {
		return s, err
	}
	s.bridgeBin = bin
	s.noServers = filepath.Join(filepath.Dir(bin), "no-servers.json")
	if err := os.WriteFile(s.noServers, []byte(`{"mcpServers": {}}`), 0o644); err != nil {
		return s, err
	}
	return s, nil
}

// candidate maps a test engine name to its socket.
func candidate(name string) (detect.Candidate, error) {
	switch name {
	case "docker":
		host := os.Getenv("DOCKER_HOST")
		if host == "" {
			host = "unix:///var/run/docker.sock"
		}
		return detect.Candidate{Engine: sandbox.EngineDocker, URI: host, Why: "test"}, nil
	case "podman":
		return detect.Candidate{Engine: sandbox.EnginePodman, URI: "unix:///run/podman/podman.sock", Why: "test"}, nil
	case "podman-rootless":
		d := os.Getenv("XDG_RUNTIME_DIR")
		if d == "" {
			return detect.Candidate{}, fmt.Errorf("podman-rootless needs XDG_RUNTIME_DIR")
		}
		return detect.Candidate{Engine: sandbox.EnginePodman, URI: "unix://" + filepath.Join(d, "podman", "podman.sock"), Why: "test"}, nil
	case "kubernetes":
		// The test cluster of integration/kube (make kube-up): its
		// kube.env says where, and the bridges the tests start inherit it.
		k := os.Getenv("KUBECONFIG")
		if k == "" {
			return detect.Candidate{}, fmt.Errorf("kubernetes needs KUBECONFIG: run `make kube-up` and source /run/bridge-test/kube.env")
		}
		return detect.Candidate{Engine: sandbox.EngineKubernetes, URI: "kubeconfig:" + k, Why: "test"}, nil
	case "runsc":
		// Over Docker's socket, as the bridges the tests start find it
		// (engineEnv: DOCKER_HOST, which runsc's candidates try first).
		d, err := candidate("docker")
		return detect.Candidate{Engine: sandbox.EngineRunsc, URI: d.URI, Why: "test", Images: sandbox.EngineDocker}, err
	}
	return detect.Candidate{}, fmt.Errorf("unknown engine %q in BRIDGE_TEST_ENGINES (want docker, podman, podman-rootless, kubernetes, runsc)", name)
}

// buildBridge builds cmd/bridge from this tree, or takes BRIDGE_TEST_BIN
// (the rootless run has no toolchain of its own).
func buildBridge() (string, error) {
	dir, err := os.MkdirTemp("", "bridge-test-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bridge")
	if src := os.Getenv("BRIDGE_TEST_BIN"); src != "" {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", err
		}
		return bin, os.WriteFile(bin, b, 0o755)
	}
	root := repoRoot()
	// Stamped as make build stamps it: `bridge version` is tested.
	version := "integration-test"
	if out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+version, "-o", bin, "./cmd/bridge")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building bridge: %w", err)
	}
	return bin, nil
}

// repoRoot is the root of the checkout these tests were built from.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// forEachEngine runs f as a subtest per engine under test: the test runs
// on every engine.
func forEachEngine(t *testing.T, f func(t *testing.T, e *engine)) {
	t.Helper()
	forEngines(t, anyEngine(), f)
}

// forEngines runs f as a subtest per engine under test that r lets the
// test run on, and skips it on the others with r's reason. A missing
// engine fails the test in CI (the suite has already failed then); an
// engine of a kind the test does not run on is a skip.
func forEngines(t *testing.T, r engineRule, f func(t *testing.T, e *engine)) {
	t.Helper()
	runsOn(t, r)
	for _, e := range testSuite.engines {
		t.Run(e.name, func(t *testing.T) {
			if !r.fits(e) {
				t.Skip(r.reason())
			}
			f(t, e)
		})
	}
}

// runsOn skips t unless an engine under test is one r lets it run on, for
// a test that picks its engines itself. Without any engine under test it
// fails in CI, and skips elsewhere.
func runsOn(t *testing.T, r engineRule) {
	t.Helper()
	if len(testSuite.engines) == 0 {
		if ci() {
			t.Fatal("no engine under test")
		}
		t.Skip("no engine under test: run `make setup image`")
	}
	if !slices.ContainsFunc(testSuite.engines, r.fits) {
		t.Skip(r.reason())
	}
}

// enginesFor is the engines under test that r lets a test run on, for a
// test that uses them all at once; it skips the test as runsOn does when
// there is none.
func enginesFor(t *testing.T, r engineRule) []*engine {
	t.Helper()
	runsOn(t, r)
	var out []*engine
	for _, e := range testSuite.engines {
		if r.fits(e) {
			out = append(out, e)
		}
	}
	return out
}

// A kind is what a test may need of an engine: its API, and what it
// can be made to do. The rootless Podman engine is of kind podman; what
// it cannot do as an unprivileged user a test checks by rootless() or
// engine.enforced.
type kind string

const (
	kindDocker     kind = "docker"
	kindPodman     kind = "podman"
	kindKubernetes kind = "kubernetes"
	// kindRunsc is gVisor driven by the bridge (engine runsc), its images
	// in Docker: the make integration-gvisor pass.
	kindRunsc kind = "runsc"
)

// allKinds are the kinds of engine a test may run on.
func allKinds() []kind { return []kind{kindDocker, kindPodman, kindKubernetes, kindRunsc} }

// kindOf is the kind of the engine a BRIDGE_TEST_ENGINES name tests.
func kindOf(name string) kind {
	if name == "podman-rootless" {
		return kindPodman
	}
	return kind(name)
}

func (e *engine) kind() kind { return kindOf(e.name) }

// imagesEngine is the engine that holds e's images: e's own, or for
// runsc the one it takes them from.
func (e *engine) imagesEngine() string {
	if e.cand.Images != "" {
		return e.cand.Images
	}
	return e.cand.Engine
}

// An engineRule says which kinds of engine a test can run on, and why not
// on the others. A test that uses the suite's engines states its rule
// before it starts anything: forEachEngine (every kind), or forEngines,
// runsOn or enginesFor with only, except or aboveEngine.
type engineRule struct {
	kinds []kind // the kinds the test runs on; nil: every kind
	why   string // why it cannot run on the others
}

func anyEngine() engineRule { return engineRule{} }

// only is the rule of a test that runs on engines of these kinds alone.
func only(why string, kinds ...kind) engineRule {
	return engineRule{kinds: kinds, why: why}
}

// except is the rule of a test that runs on every kind of engine but
// these.
func except(why string, kinds ...kind) engineRule {
	rest := []kind{} // not nil, which means every kind
	for _, k := range allKinds() {
		if !slices.Contains(kinds, k) {
			rest = append(rest, k)
		}
	}
	return engineRule{kinds: rest, why: why}
}

// aboveEngine is the rule of a test whose subject lies above the engine:
// the MCP protocol and its transports, the proxy and its policy, metrics
// and traces, what the runner prints. Which engine ran the code cannot
// change what it checks, so the docker and podman passes run it, and the
// kubernetes and runsc passes, whose runs take a second or more each, keep
// to the tests that depend on the engine, within CI's time
// (docs/testing.md). subject names what the test checks.
func aboveEngine(subject string) engineRule {
	return except("above the engine ("+subject+"): the docker and podman passes test it; "+
		"the kubernetes and runsc passes run the tests that depend on the engine (docs/testing.md)", kindKubernetes, kindRunsc)
}

func (r engineRule) fits(e *engine) bool {
	return r.kinds == nil || slices.Contains(r.kinds, e.kind())
}

// reason is the skip message on an engine r does not fit.
func (r engineRule) reason() string {
	names := make([]string, len(r.kinds))
	for i, k := range r.kinds {
		names[i] = string(k)
	}
	return fmt.Sprintf("runs on %s only: %s", strings.Join(names, " and "), r.why)
}

// noEngine is the first line of a test that uses none of the suite's
// engines (the CLI's flags and errors, the docs, the proxy on its own, an
// engine the test starts itself): it runs in every pass that tests Docker
// or Podman, and skips in a pass of the kubernetes or runsc engine alone,
// which would run it again unchanged.
func noEngine(t *testing.T) {
	t.Helper()
	for _, name := range testSuite.wanted {
		if k := kindOf(name); k != kindKubernetes && k != kindRunsc {
			return
		}
	}
	t.Skip("uses no engine under test: runs in the docker/podman pass")
}

func imageName() string { return images.Name() }

func quiet() zerolog.Logger { return zerolog.New(io.Discard) }

// executor returns an Executor on e. On an engine that cannot enforce
// limits it runs with AllowUnenforcedLimits, as the rootless tests need.
func executor(t *testing.T, e *engine) *sandbox.Executor {
	t.Helper()
	ex, err := sandbox.NewExecutor(context.Background(), e.rt, sandbox.ExecutorOptions{
		Image:                 images.Name(),
		AllowUnenforcedLimits: !e.enforced,
		Logger:                zerolog.New(io.Discard),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

func limits() sandbox.Limits {
	l := sandbox.DefaultLimits()
	l.Timeout = 30 * time.Second
	return l
}

// run runs code on e and fails the test if the bridge could not run it.
func run(t *testing.T, e *engine, code string, l sandbox.Limits) sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), l.Timeout+time.Minute)
	defer cancel()
	res, err := executor(t, e).Run(ctx, sandbox.Request{Code: code, Limits: l})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// mustOK runs code that must succeed and returns its stdout.
func mustOK(t *testing.T, e *engine, code string) string {
	t.Helper()
	res := run(t, e, code, limits())
	if res.Status != sandbox.StatusOK {
		t.Fatalf("status %s (%s)\nstdout:\n%s\nstderr:\n%s", res.Status, res.Message, res.Stdout, res.Stderr)
	}
	return res.Stdout
}

// assertNoContainer fails if e still has the run's container.
func assertNoContainer(t *testing.T, e *engine, runID string) {
	t.Helper()
	cs, err := e.rt.List(context.Background(), map[string]string{sandbox.LabelRunID: runID})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Fatalf("container of run %s still exists: %v", runID, cs)
	}
}
