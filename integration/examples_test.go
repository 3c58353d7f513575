package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The examples per kind of user: the operator's two policies
// (examples/policies), checked and served.

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
