package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

// The test binary doubles as a stdio upstream: run with
// BRIDGE_TEST_UPSTREAM=1 it serves hintTools over stdin/stdout.
func TestMain(m *testing.M) {
	if os.Getenv("BRIDGE_TEST_UPSTREAM") == "1" {
		s := mcp.NewServer(&mcp.Implementation{Name: "hints"}, nil)
		for _, t := range hintTools() {
			s.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{}, nil
			})
		}
		_ = s.Run(context.Background(), &mcp.StdioTransport{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hintTools are tools with annotations of each kind: none, an empty
// object, each hint alone with each of its values, all four.
func hintTools() []*mcp.Tool {
	yes, no := true, false
	obj := map[string]any{"type": "object"}
	var out []*mcp.Tool
	for name, a := range map[string]*mcp.ToolAnnotations{
		"t_none":          nil,
		"t_empty":         {},
		"t_readonly":      {ReadOnlyHint: true},
		"t_additive":      {DestructiveHint: &no},
		"t_destructive":   {DestructiveHint: &yes},
		"t_idempotent":    {IdempotentHint: true},
		"t_closed":        {OpenWorldHint: &no},
		"t_open":          {OpenWorldHint: &yes, Title: "Open"},
		"t_all":           {ReadOnlyHint: true, DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
		"t_all_defaulted": {ReadOnlyHint: false, DestructiveHint: &yes, IdempotentHint: false, OpenWorldHint: &yes},
	} {
		out = append(out, &mcp.Tool{Name: name, InputSchema: obj, Annotations: a})
	}
	return out
}

// TestPolicyExplainIsTheGate: for tools of every kind of annotations,
// `bridge policy explain` says, word for word, what the policy explains of
// the tool as the proxy's gate judges it (proxy.ToolPolicy of the tool the
// upstream lists), and exits with its verdict. Explain once read the
// annotations with a converter of its own, which could drift from the
// gate's.
func TestPolicyExplainIsTheGate(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	servers, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"hints": map[string]any{
		"command": exe, "args": []string{"-test.run=^$"}, "env": map[string]string{"BRIDGE_TEST_UPSTREAM": "1"}}}})
	serversFile := filepath.Join(dir, "servers.json")
	policyFile := filepath.Join(dir, "policy.yaml")
	// A rule on each value of each hint, so that each tool is judged by
	// the hints it has, and every rule says why it did or did not match.
	rules := `version: 1
tools:
  default: deny
  rules:
    - {tool: "t_*", annotations: {readOnlyHint: true}, action: allow}
    - {tool: "t_*", annotations: {destructiveHint: false}, action: ask}
    - {tool: "t_*", annotations: {idempotentHint: true, openWorldHint: false}, action: allow}
    - {tool: "t_*", annotations: {idempotentHint: true}, action: deny, reason: idempotent but open}
    - {tool: "t_*", annotations: {openWorldHint: false}, action: allow}
`
	if err := os.WriteFile(serversFile, servers, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policyFile, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range hintTools() {
		t.Run(tool.Name, func(t *testing.T) {
			gate := proxy.ToolPolicy("hints", tool)
			want := pol.Explain(gate)
			wantCode := 0
			switch d := pol.Decide(gate); {
			case d.Ask:
				wantCode = exitAsk
			case !d.Allow:
				wantCode = 1
			}
			stdout, stderr, code := runCLI(t, "policy", "explain", "--policy", policyFile, "--servers-config", serversFile, "hints", tool.Name)
			if stdout != want || code != wantCode {
				t.Errorf("explain said (exit %d)\n%s\nthe gate's judgement is (exit %d)\n%s\nstderr:\n%s", code, stdout, wantCode, want, stderr)
			}
		})
	}
	// The table covers every verdict.
	seen := map[string]bool{}
	for _, tool := range hintTools() {
		seen[pol.Decide(proxy.ToolPolicy("hints", tool)).Verdict()] = true
	}
	if len(seen) != 3 {
		t.Errorf("the verdicts are %v: want allow, deny and ask", seen)
	}
}
