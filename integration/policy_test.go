package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
)

// TestPolicyEnforced runs `bridge serve --policy` with the misbehave
// upstream, which records every call it receives, and checks that the
// policy holds end to end: denied tools are invisible and never reach the
// upstream, budgets and rates trip at their numbers, every decision is
// audited, and edits to the file apply to the next run (or are rejected).
func TestPolicyEnforced(t *testing.T) {
	forEngines(t, aboveEngine("the tools policy"), func(t *testing.T, e *engine) {
		dir := t.TempDir()
		record := filepath.Join(dir, "calls.jsonl")
		audit := filepath.Join(dir, "audit.jsonl")
		servers := filepath.Join(dir, "servers.json")
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		writeServers(t, servers, map[string]any{
			"misbehave": map[string]any{"command": self, "args": []string{"--name", "misbehave", "--record", record},
				"env": map[string]string{upstreamEnv: "1"}},
		})
		policyFile := filepath.Join(dir, "policy.yaml")
		writePolicy := func(body string) {
			t.Helper()
			doc := "version: 1\n" + sandboxSection(e) + "audit:\n  file: " + audit + "\n" + body
			if err := os.WriteFile(policyFile, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		writePolicy(`tools:
  rules:
    - server: misbehave
      tool: crash
      action: deny
      reason: crashing is not allowed here
budgets:
  max_calls_per_run: 5
  rates:
    - server: misbehave
      tool: count
      rate: 1/h
      burst: 2
`)
		cs, _, stderr := connectStdioArgs(t, e, nil, "--servers-config", servers, "--policy", policyFile)

		// Denied: absent from search and tools, raises, never reaches the upstream.
		out, _ := runCode(t, cs, `
import mcp_tools
print("search:", "crash" in [h["tool"] for h in mcp_tools.search("crash exit", limit=20)])
print("tools:", "crash" in [t["name"] for t in mcp_tools.tools("misbehave")], "echo" in [t["name"] for t in mcp_tools.tools("misbehave")])
try:
    mcp_tools.call("misbehave", "crash")
except mcp_tools.ToolDeniedError as e:
    print("denied:", isinstance(e, PermissionError), e)
for i in range(3):
    try:
        print("count:", mcp_tools.call("misbehave", "count")["calls"])
    except mcp_tools.LimitExceededError as e:
        print("limited:", "budgets.rates[0]" in str(e))
`)
		want := "search: False\ntools: False True\ndenied: True crashing is not allowed here\ncount: 1\ncount: 2\nlimited: True\n"
		if out != want {
			t.Fatalf("run 1 printed\n%s\nwant\n%s", out, want)
		}

		// The budget: 5 calls, then LimitExceededError; the run goes on.
		out, _ = runCode(t, cs, `
import mcp_tools
for i in range(7):
    try:
        mcp_tools.call("misbehave", "echo", message=str(i))
        print("ok", i)
    except mcp_tools.LimitExceededError as e:
        print("limit", i, "max_calls_per_run" in str(e))
print("still running")
`)
		want = "ok 0\nok 1\nok 2\nok 3\nok 4\nlimit 5 True\nlimit 6 True\nstill running\n"
		if out != want {
			t.Fatalf("run 2 printed\n%s\nwant\n%s", out, want)
		}
		calls := recordedTools(t, record)
		if strings.Count(calls, "crash") != 0 || strings.Count(calls, "count") != 2 || strings.Count(calls, "echo") != 5 {
			t.Fatalf("the upstream received: %s", calls)
		}

		// One audit line per decision: run 1 crash (deny) + 3 count (2 allow,
		// 1 deny); run 2: 7 echo (5 allow, 2 deny). Plus run_start/run_end.
		decisions, runs := auditCounts(t, audit)
		if decisions["allow"] != 7 || decisions["deny"] != 4 || runs != 4 {
			t.Fatalf("audit: decisions %v, %d run lines", decisions, runs)
		}

		// An invalid edit is rejected, the old rules hold.
		writePolicy("tools:\n  defualt: deny\n")
		waitLog(t, stderr, "the new file is invalid and was rejected")
		out, _ = runCode(t, cs, `
import mcp_tools
print(mcp_tools.call("misbehave", "echo", message="old rules")["message"])
try:
    mcp_tools.call("misbehave", "crash")
except mcp_tools.ToolDeniedError:
    print("crash still denied")
`)
		if out != "old rules\ncrash still denied\n" {
			t.Fatalf("after an invalid edit: %q", out)
		}

		// A valid edit applies to the next run, no restart.
		writePolicy("tools:\n  rules:\n    - tool: echo\n      action: deny\n")
		waitLog(t, stderr, `"generation":2`)
		out, _ = runCode(t, cs, `
import mcp_tools
print("echo listed:", "echo" in [t["name"] for t in mcp_tools.tools("misbehave")])
try:
    mcp_tools.call("misbehave", "echo", message="x")
except mcp_tools.ToolDeniedError as e:
    print("echo denied")
print("count:", mcp_tools.call("misbehave", "count")["calls"])
`)
		if !strings.HasPrefix(out, "echo listed: False\necho denied\ncount: ") {
			t.Fatalf("after a valid edit: %q", out)
		}
	})
}

// sandboxSection is the policy's sandbox section an engine under test
// needs (rootless Podman on cgroup v1 cannot enforce limits).
func sandboxSection(e *engine) string {
	s := "sandbox:\n  engine: " + e.cand.Engine + "\n"
	if e.cand.Engine == sandbox.EngineKubernetes {
		s += "  cpus: " + kubeTestCPUs + "\n"
	}
	if !e.enforced {
		s += "  require_enforced_limits: false\n"
	}
	return s
}

// recordedTools lists the tools the misbehave upstream received, in order.
func recordedTools(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tools []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var r struct{ Tool string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		tools = append(tools, r.Tool)
	}
	return strings.Join(tools, " ")
}

// auditCounts counts the tool-call decisions (by decision) and the run
// records in an audit file. Each line must be JSON without argument values.
func auditCounts(t *testing.T, path string) (map[string]int, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	decisions, runs := map[string]int{}, 0
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		switch m["event"] {
		case "tool_call":
			decisions[fmt.Sprint(m["decision"])]++
			for _, k := range []string{"time", "run_id", "server", "tool", "rule", "duration_ms", "argument_bytes", "result_bytes"} {
				if _, ok := m[k]; !ok {
					t.Errorf("audit line lacks %s: %s", k, line)
				}
			}
		case "run_start", "run_end":
			runs++
		}
	}
	return decisions, runs
}

// waitLog waits until the bridge's log contains s.
func waitLog(t *testing.T, log *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the bridge never logged %q", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPolicyTraceKeepsDenied: a run that makes 120 allowed tool calls and
// then one the policy denies gets back a trace of 100 calls that holds the
// denied one (the allowed calls are cut first), and says what was cut.
func TestPolicyTraceKeepsDenied(t *testing.T) {
	forEngines(t, aboveEngine("the tools policy's trace"), func(t *testing.T, e *engine) {
		dir := t.TempDir()
		servers := filepath.Join(dir, "servers.json")
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		writeServers(t, servers, map[string]any{
			"misbehave": map[string]any{"command": self, "args": []string{"--name", "misbehave"},
				"env": map[string]string{upstreamEnv: "1"}},
		})
		policyFile := filepath.Join(dir, "policy.yaml")
		pol := "version: 1\n" + sandboxSection(e) + "tools:\n  rules:\n    - server: misbehave\n      tool: crash\n      action: deny\n"
		if err := os.WriteFile(policyFile, []byte(pol), 0o644); err != nil {
			t.Fatal(err)
		}
		cs, _, _ := connectStdioArgs(t, e, nil, "--servers-config", servers, "--policy", policyFile)
		out, text := traceCall(t, cs, `
import mcp_tools
for i in range(120):
    mcp_tools.call("misbehave", "echo", message=str(i))
try:
    mcp_tools.call("misbehave", "crash")
except mcp_tools.ToolDeniedError:
    print("denied")
`)
		if out.Status != "ok" || out.Stdout != "denied\n" {
			t.Fatalf("status %q, stdout %q: %s", out.Status, out.Stdout, text)
		}
		n := len(out.ToolCalls)
		if n != 100 || out.ToolCalls[n-1].Tool != "crash" || out.ToolCalls[n-1].Decision != "denied" || out.ToolCalls[0].Tool != "echo" {
			t.Fatalf("trace of %d calls, last %+v: want 100 ending with the denied crash", n, out.ToolCalls[n-1])
		}
		if out.ToolCallsCut != 21 || len(out.ToolCallsCutBy) != 1 || out.ToolCallsCutBy["allowed"] != 21 {
			t.Fatalf("cut %d, by kind %v: want 21 allowed", out.ToolCallsCut, out.ToolCallsCutBy)
		}
		if !strings.Contains(text, "[121 tool calls: 1 denied]") {
			t.Fatalf("text %q lacks the trace line", text)
		}
	})
}
