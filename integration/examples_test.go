package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The examples per kind of user (examples/README.md), run as that README
// says: the agent builder's program driving a data analyst's session
// through `bridge serve`, and the operator's two policies, checked and
// served.

// examplesRule is where the examples run: what they show is the MCP
// client's view of run_python, which no engine changes.
func examplesRule() engineRule {
	return aboveEngine("the examples: what a client sends and gets back")
}

// examplePolicy copies examples/policies/NAME.yaml into a folder of the
// test's own, as an operator copies it to ~/.config/bridge (the strict
// one's audit file lands next to it), and returns the copy's path. On an
// engine that cannot enforce limits (rootless Podman on cgroup v1) the
// copy says require_enforced_limits: false, which no flag may do.
func examplePolicy(t *testing.T, e *engine, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), "examples", "policies", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if e != nil && !e.enforced {
		const key = "\n  require_enforced_limits: true\n"
		if strings.Contains(doc, key) {
			doc = strings.Replace(doc, key, "\n  require_enforced_limits: false\n", 1)
		} else if doc2 := strings.Replace(doc, "\nsandbox:\n", "\nsandbox:\n  require_enforced_limits: false\n", 1); doc2 != doc {
			doc = doc2
		} else {
			t.Fatalf("examples/policies/%s.yaml has no sandbox section to relax for %s", name, e.name)
		}
	}
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExamplesPolicyCheck: `bridge policy check` accepts both of the
// operator's example policies, and says what they amount to.
func TestExamplesPolicyCheck(t *testing.T) {
	noEngine(t)
	for _, c := range []struct {
		name string
		want []string // lines of the effective policy
	}{
		{"strict", []string{"  variant: slim", "  timeout: 10s", "  tmpfs_size: 16Mi", "sessions:\n  enabled: false",
			"  max_file_bytes: 64Ki", "tools:\n  servers: [\"*\"]\n  default: deny", "resources:\n  default: deny", "  save: false"}},
		{"datascience", []string{"  variant: datascience", "  memory: 4Gi", "  tmpfs_size: 1Gi", "sessions:\n  enabled: true",
			"snapshots:\n  enabled: true", "  max_file_bytes: 64Mi", "  by_reference: large"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := examplePolicy(t, nil, c.name)
			env := []string{"XDG_CONFIG_HOME=" + t.TempDir(), "HOME=" + t.TempDir()}
			stdout, stderr, code := bridgeCLI(t, env, "", "policy", "check", pol)
			if code != 0 {
				t.Fatalf("bridge policy check %s: exit %d\n%s", c.name, code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("the effective policy has no %q:\n%s", w, stdout)
				}
			}
		})
	}
}

// TestExamplesAgent runs examples/agent, the agent builder's program, as
// examples/README.md says, against `bridge serve` with the data-science
// policy: the analyst's six calls, each checked by what came back.
func TestExamplesAgent(t *testing.T) {
	if rootless() {
		t.Skip("the rootless run has no Go toolchain to build examples/agent; the rootful run runs it")
	}
	runsOn(t, examplesRule())
	agent := filepath.Join(t.TempDir(), "agent")
	build := exec.Command("go", "build", "-o", agent, "./examples/agent")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/agent: %v\n%s", err, out)
	}
	forEngines(t, examplesRule(), func(t *testing.T, e *engine) {
		pol := examplePolicy(t, e, "datascience")
		// The policy keeps snapshots and files under ~/.local/state/bridge.
		home := t.TempDir()
		serve, env := serveArgs(e)
		serve = append(append(withoutSandboxFlags(serve), "--runtime", e.cand.Engine), "--policy", pol)
		env = append(env, "HOME="+home)
		stdout := runAgent(t, agent, append([]string{"-csv", filepath.Join(repoRoot(), "examples", "data", "sales.csv"), "--", testSuite.bridgeBin}, serve...), env)

		if !strings.HasPrefix(stdout, "tool run_python(code, inputs, reset, restore, session, snapshot, timeout_seconds)\n") {
			t.Errorf("the tool's listing:\n%s", stdout)
		}
		calls := agentCalls(t, stdout)
		uri := regexp.MustCompile(`file forecast\.csv by reference: (bridge://runs/[0-9a-f]+/forecast\.csv) \(\d+ bytes\)`).FindStringSubmatch(calls[3])
		if uri == nil {
			t.Fatalf("the what-if's file did not come back by reference:\n%s", calls[3])
		}
		for i, want := range [][]string{
			{`-> {"code":"<11 lines of Python>","inputs":[{"path":"sales.csv","text":"<651 bytes>"}],"session":"analysis"}`,
				"| 36 rows, 2026-01 to 2026-12, regions: north, south, west", "| north    1838", "image image/png 600x400"},
			{`"session":"analysis","snapshot":"prepared"}`, "| west     7.0", `snapshot "prepared" saved`},
			{"| regions now: north, south"},
			{`"restore":"prepared","session":"what-if"}`, "| regions: north, south, west", "| 150000 simulated years in forecast.csv",
				`restored "prepared": the session's /tmp files came back`},
			{"| analysis still has: north, south in df, north, south in its file"},
			{`"inputs":[{"path":"forecast.csv","uri":"` + uri[1] + `"}]}`, "| 150000 rows from the what-if",
				"| | region | p10 | p50 | p90 |", "| | west | ", "image image/png 600x400"},
		} {
			for _, w := range want {
				if !strings.Contains(calls[i], w) {
					t.Errorf("call %d does not show %q:\n%s", i+1, w, calls[i])
				}
			}
		}

		// The operator sees the snapshot the analyst saved.
		out, errOut, code := bridgeCLI(t, []string{"HOME=" + home}, "", "snapshots", "list", "--policy", pol, "--json")
		var snaps []struct{ Owner, Label, Kind string }
		if err := json.Unmarshal([]byte(out), &snaps); code != 0 || err != nil || len(snaps) != 1 || snaps[0].Label != "prepared" || snaps[0].Kind != "files" {
			t.Errorf("bridge snapshots list: exit %d, %v: %s%s", code, err, out, errOut)
		}
	})
}

// runAgent runs the agent binary with args and env, and returns what it
// printed; it must exit 0.
func runAgent(t *testing.T, agent string, args, env []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agent, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("examples/agent: %v in %s", err, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("examples/agent: %v\nstdout:\n%s\nstderr (the agent's and bridge serve's):\n%s", err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// agentCalls splits the agent's output into its calls' parts ("\n[N] ...").
func agentCalls(t *testing.T, stdout string) []string {
	t.Helper()
	parts := regexp.MustCompile(`\n\[\d+\] `).Split(stdout, -1)
	if len(parts) != 7 {
		t.Fatalf("want the listing and 6 calls, got %d parts:\n%s", len(parts), stdout)
	}
	return parts[1:]
}

// TestExamplesStrictPolicy serves the strict example policy and checks
// that it holds as its comments say: no network, output and files cut
// small, inputs and timeouts bounded, no sessions, every run audited.
func TestExamplesStrictPolicy(t *testing.T) {
	forEngines(t, examplesRule(), func(t *testing.T, e *engine) {
		pol := examplePolicy(t, e, "strict")
		cs, _, _ := connectStdioArgs(t, e, nil, "--runtime", e.cand.Engine, "--policy", pol)

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tools, err := cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) != 1 {
			t.Fatalf("tools/list: %v %+v", err, tools)
		}
		schema, _ := json.Marshal(tools.Tools[0].InputSchema)
		for _, arg := range []string{`"session"`, `"snapshot"`, `"restore"`} {
			if bytes.Contains(schema, []byte(arg)) {
				t.Errorf("run_python takes %s with sessions off: %s", arg, schema)
			}
		}

		res, out := callWith(t, cs, map[string]any{"code": `
import os, socket
print([name for _, name in socket.if_nameindex()])
open("/tmp/outputs/big.bin", "wb").write(os.urandom(300 << 10))
print("x" * (20 << 10))
`})
		if out.Status != "ok" || !strings.HasPrefix(out.Stdout, "['lo']\n") || len(out.Stdout) > 16<<10 {
			t.Errorf("status %q, stdout %d bytes starting %.40q (want only lo, and at most 16 KiB)", out.Status, len(out.Stdout), out.Stdout)
		}
		if text := contentText(res); !strings.Contains(text, "[not returned: big.bin (300 KiB)") {
			t.Errorf("a 300 KiB file came back, or was not listed as not returned:\n%s", text[max(0, len(text)-600):])
		}

		for _, c := range []struct {
			name string
			args map[string]any
			want string
		}{
			{"a large input", map[string]any{"code": "print(1)", "inputs": []any{map[string]any{"path": "a.csv", "text": strings.Repeat("1,2\n", 20<<10)}}}, "inputs.max_file_bytes"},
			{"a long timeout", map[string]any{"code": "print(1)", "timeout_seconds": 60}, "timeout_seconds must be between 1 and 30, got 60"},
			{"a session", map[string]any{"code": "print(1)", "session": "s"}, "need sessions, which this bridge's policy does not enable"},
		} {
			res, out := callWith(t, cs, c.args)
			if !res.IsError || out.Status != "invalid" || !strings.Contains(out.Message+contentText(res), c.want) {
				t.Errorf("%s: status %q, %q; want invalid saying %q", c.name, out.Status, out.Message+contentText(res), c.want)
			}
		}

		// Every run is audited next to the policy.
		audit, err := os.ReadFile(filepath.Join(filepath.Dir(pol), "audit.jsonl"))
		if err != nil || !bytes.Contains(audit, []byte(`"event":"run_end"`)) {
			t.Errorf("the audit file next to the policy: %v\n%s", err, audit)
		}
	})
}
