package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/policy"
)

// policyProxy starts a proxy with one test upstream, "alpha", under the
// policy in file (YAML), auditing to a file; it returns the store too.
func policyProxy(t *testing.T, yaml string) (*Client, *policy.Store, string, string) {
	t.Helper()
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	store, file := policyStore(t, strings.ReplaceAll(yaml, "AUDIT", audit))
	_, c, _ := startProxy(t, Options{Policy: store}, stdioServer(t, "alpha"))
	return c, store, file, audit
}

// policyStore is a Store of the policy in yaml, loaded from a file (whose
// path it returns too), closed when the test ends.
func policyStore(t *testing.T, yaml string) (*policy.Store, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store, file
}

func callRun(t *testing.T, c *Client, run, tool, args string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Call(ctx, Call{RunID: run, Server: "alpha", Tool: tool, Args: json.RawMessage(args)})
	if err != nil {
		return "", err
	}
	return textOf(t, r), nil
}

func kindOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return ""
}

func auditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestPolicyDeniesHidesAndAudits(t *testing.T) {
	c, _, _, audit := policyProxy(t, `
version: 1
tools:
  rules:
    - server: alpha
      tool: crash
      action: deny
      reason: no crashing here
    - tool: "e*v"
      action: deny
budgets:
  max_calls_per_run: 6
audit:
  file: AUDIT
`)
	cat, err := c.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{"crash", "env"} {
		if _, ok := cat.Lookup("alpha", hidden); ok {
			t.Errorf("%s is denied but listed", hidden)
		}
	}
	if _, ok := cat.Lookup("alpha", "echo"); !ok {
		t.Error("echo is allowed but not listed")
	}
	// Denied calls say why, and never reach the upstream.
	_, err = callRun(t, c, "r1", "crash", `{}`)
	if kindOf(err) != KindDenied || !strings.Contains(err.Error(), "no crashing here") {
		t.Fatalf("crash: %v", err)
	}
	_, err = callRun(t, c, "r1", "env", `{"name":"PATH"}`)
	if kindOf(err) != KindDenied || !strings.Contains(err.Error(), "tools.rules[1]") {
		t.Fatalf("env: %v", err)
	}
	// A name that does not exist is still unknown, with suggestions.
	_, err = callRun(t, c, "r1", "ecko", `{}`)
	if kindOf(err) != KindUnknownTool {
		t.Fatalf("ecko: %v", err)
	}
	// The budget counts every call, denied ones too: 6 (crash, env, 3 echo,
	// calls), then a limit error; another run starts afresh.
	for i := range 3 {
		if _, err := callRun(t, c, "r1", "echo", `{"message":"x"}`); err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
	}
	if n, err := callRun(t, c, "r1", "calls", `{}`); err != nil || n != "4" {
		t.Fatalf("the upstream saw %q calls (%v), want 4: denied ones must not reach it", n, err)
	}
	_, err = callRun(t, c, "r1", "echo", `{"message":"x"}`)
	if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "budgets.max_calls_per_run") {
		t.Fatalf("fifth call: %v", err)
	}
	if _, err := callRun(t, c, "r2", "echo", `{"message":"x"}`); err != nil {
		t.Fatalf("another run: %v", err)
	}
	// One audit line per decision: 2 denied, 4 allowed, 1 over budget, 1 in r2.
	lines := auditLines(t, audit)
	var allow, deny int
	for _, l := range lines {
		if l["event"] != "tool_call" {
			continue
		}
		switch l["decision"] {
		case "allow":
			allow++
		case "deny":
			deny++
		}
		if _, ok := l["arguments"]; ok {
			t.Errorf("an audit line has argument values: %v", l)
		}
	}
	if allow != 5 || deny != 3 {
		t.Fatalf("audit: %d allow, %d deny lines, want 5 and 3:\n%v", allow, deny, lines)
	}
}

func TestPolicyRateAndSizes(t *testing.T) {
	c, _, _, _ := policyProxy(t, `
version: 1
budgets:
  max_argument_bytes: 1Ki
  max_result_bytes: 2Ki
  rates:
    - server: alpha
      tool: echo
      rate: 1/h
      burst: 2
`)
	for i := range 2 {
		if _, err := callRun(t, c, "r", "echo", `{"message":"x"}`); err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
	}
	_, err := callRun(t, c, "r", "echo", `{"message":"x"}`)
	if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "budgets.rates[0]") {
		t.Fatalf("third echo: %v", err)
	}
	// Other tools have no rate.
	if _, err := callRun(t, c, "r", "calls", `{}`); err != nil {
		t.Fatal(err)
	}
	_, err = callRun(t, c, "r", "sleep", `{"ms":1,"pad":"`+strings.Repeat("x", 2000)+`"}`)
	if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "budgets.max_argument_bytes") {
		t.Fatalf("big arguments: %v", err)
	}
	if _, err := callRun(t, c, "r", "big", `{"n":1000}`); err != nil {
		t.Fatalf("a 1000-byte result: %v", err)
	}
	_, err = callRun(t, c, "r", "big", `{"n":3000}`)
	if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "budgets.max_result_bytes") {
		t.Fatalf("a 3000-byte result: %v", err)
	}
}

func TestPolicyReload(t *testing.T) {
	c, store, file, _ := policyProxy(t, "version: 1\n")
	if _, err := callRun(t, c, "r1", "echo", `{"message":"x"}`); err != nil {
		t.Fatal(err)
	}
	// An invalid edit is rejected; the old policy holds.
	if err := os.WriteFile(file, []byte("version: 1\ntools:\n  defualt: deny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := store.Reload(); changed || err == nil || !strings.Contains(err.Error(), "3:3") {
		t.Fatalf("invalid edit: changed %v, %v", changed, err)
	}
	if _, err := callRun(t, c, "r2", "echo", `{"message":"x"}`); err != nil {
		t.Fatalf("after an invalid edit: %v", err)
	}
	// A valid edit applies to new runs; run r1 keeps the policy it started with.
	if err := os.WriteFile(file, []byte("version: 1\ntools:\n  default: deny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := store.Reload(); !changed || err != nil {
		t.Fatalf("valid edit: changed %v, %v", changed, err)
	}
	if _, err := callRun(t, c, "r3", "echo", `{"message":"x"}`); kindOf(err) != KindDenied {
		t.Fatalf("a new run after default: deny: %v", err)
	}
	if _, err := callRun(t, c, "r1", "echo", `{"message":"x"}`); err != nil {
		t.Fatalf("a run in flight keeps its policy: %v", err)
	}
	// And the tools are no longer listed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		cat, err := c.Catalog(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if cat.Len() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tools still listed under default: deny", cat.Len())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Servers "a" and "a__b": asking for a's tool "b__echo" must not run
// a__b's echo, whose proxy name is the same string.
func TestProxyNamesDoNotAlias(t *testing.T) {
	_, c, _ := startProxy(t, Options{}, stdioServer(t, "a"), stdioServer(t, "a__b"))
	if _, err := c.Catalog(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Call(ctx, Call{RunID: "r", Server: "a", Tool: "b__echo", Args: json.RawMessage(`{"message":"x"}`)})
	if kindOf(err) != KindUnknownTool {
		t.Fatalf("a/b__echo: %v", err)
	}
	r, err := c.Call(ctx, Call{RunID: "r", Server: "a__b", Tool: "calls", Args: json.RawMessage(`{}`)})
	if err != nil || textOf(t, r) != "1" {
		t.Fatalf("a__b received %v calls (%v): the aliased call reached it", r, err)
	}
}

// Run ids from clients are checked before the proxy keeps anything for
// them, and the run's time left travels with each call: a run that says it
// lasts longer than the proxy keeps runs is refused.
func TestPolicyRunIDsAndTimeLeft(t *testing.T) {
	c, store, _, audit := policyProxy(t, "version: 1\naudit:\n  file: AUDIT\n")
	for _, id := range []string{"Run1", "run-1", strings.Repeat("a", 33), strings.Repeat("\x00", 4096)} {
		_, err := callRun(t, c, id, "echo", `{"message":"x"}`)
		if kindOf(err) != KindInvalid || !strings.Contains(err.Error(), "lower-case letters and digits") {
			t.Errorf("run id %.40q: %v", id, err)
		}
		if store.Run(id) != nil {
			t.Errorf("run id %.40q is tracked", id)
		}
	}
	for _, l := range auditLines(t, audit) {
		if l["rule"] != policy.RuleRunID || l["run_id"] != "" || l["decision"] != "deny" {
			t.Errorf("audit of an invalid run id: %v", l)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), policy.MaxRunLife+time.Hour)
	defer cancel()
	_, err := c.Call(ctx, Call{RunID: "long", Server: "alpha", Tool: "echo", Args: json.RawMessage(`{"message":"x"}`)})
	if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "--max-timeout") || store.Run("long") != nil {
		t.Fatalf("a run with %s left: %v", policy.MaxRunLife+time.Hour, err)
	}
	if _, err := callRun(t, c, "0123456789ab", "echo", `{"message":"x"}`); err != nil || store.Run("0123456789ab") == nil {
		t.Fatalf("a bridge's run id: %v", err)
	}
}

func TestRunTimeLeftMeta(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	m := callMeta(ctx, Call{RunID: "r1"}, "s", "t")
	left, ok := m[MetaRunTimeLeft].(int64)
	if !ok || left <= 0 || left > int64(time.Hour/time.Millisecond) || m[MetaRunID] != "r1" {
		t.Fatalf("meta %v", m)
	}
	if m := callMeta(context.Background(), Call{RunID: "r1"}, "s", "t"); m[MetaRunTimeLeft] != nil {
		t.Fatalf("no deadline, yet meta %v", m)
	}
	now := time.Now()
	for _, tt := range []struct {
		v    any
		want time.Duration // -1: no deadline
	}{
		{float64(1500), 1500 * time.Millisecond},
		{float64(-5), 0},
		{float64(1e300), policy.MaxRunLife + time.Second},
		{"1500", -1},
		{nil, -1},
	} {
		got := runDeadline(mcp.Meta{MetaRunTimeLeft: tt.v}, now)
		if tt.want < 0 && !got.IsZero() || tt.want >= 0 && got.Sub(now) != tt.want {
			t.Errorf("time left %v: deadline in %s, want %s", tt.v, got.Sub(now), tt.want)
		}
	}
}

// Code looping on a refused call writes a bounded number of audit records,
// and the summary counts the rest exactly: for a run of this process
// (summarized at its end) and for a remote bridge's (when the proxy lets
// it go).
func TestPolicyAuditOfARefusalLoop(t *testing.T) {
	c, store, _, audit := policyProxy(t, `
version: 1
tools:
  rules:
    - tool: crash
      action: deny
budgets:
  max_calls_per_run: 3
audit:
  file: AUDIT
`)
	const n = 300
	run := store.Begin("local1")
	for range n {
		_, _ = callRun(t, c, "local1", "echo", `{"message":"x"}`)
		_, _ = callRun(t, c, "remote1", "crash", `{}`)
	}
	store.Audit().RunEnd(run, "ok", 0, time.Second)
	store.End("local1")
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	type count struct{ lines, calls int }
	got := map[string]count{}
	for _, l := range auditLines(t, audit) {
		id, _ := l["run_id"].(string)
		c := got[id]
		switch l["event"] {
		case "tool_call":
			c.lines++
			c.calls++
		case "tool_call_summary":
			c.lines++
			r, _ := l["repeated"].(float64)
			c.calls += int(r)
			if l["rule"] != "budgets.max_calls_per_run" {
				t.Errorf("summary %v", l)
			}
		case "run_end":
			if l["tool_calls_summarized"] != float64(n-3-policy.AuditRepeats) {
				t.Errorf("run_end %v", l)
			}
		}
		got[id] = c
	}
	want := count{lines: 3 + policy.AuditRepeats + 1, calls: n}
	if got["local1"] != want || got["remote1"] != want {
		t.Fatalf("records and calls per run: %v, want %v each", got, want)
	}
}

// A tool whose definition changes after the proxy first listed it (a rug
// pull) is, by tools.on_change, refused and no longer listed (deny, the
// default), or called and audited (allow).
func TestToolRugPull(t *testing.T) {
	for _, mode := range []string{"deny", "allow"} {
		t.Run(mode, func(t *testing.T) {
			c, _, _, audit := policyProxy(t, "version: 1\ntools:\n  on_change: "+mode+"\naudit:\n  file: AUDIT\n")
			if got, err := callRun(t, c, "t1", "echo", `{"message":"hi"}`); err != nil || got != "hi" {
				t.Fatalf("echo before: %q %v", got, err)
			}
			if got, err := callRun(t, c, "t1", "redefine", `{}`); err != nil || got != "redefined" {
				t.Fatalf("redefine: %q %v", got, err)
			}
			// The server says its tools changed; the proxy lists them again.
			var got string
			var err error
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if got, err = callRun(t, c, "t1", "echo", `{"message":"after"}`); err != nil || mode == "allow" {
					break
				}
			}
			cat, cerr := c.Catalog(context.Background())
			if cerr != nil {
				t.Fatal(cerr)
			}
			_, listed := cat.Lookup("alpha", "echo")
			switch mode {
			case "deny":
				if kindOf(err) != KindDenied || !strings.Contains(err.Error(), "changed since the bridge first listed it (description)") ||
					!strings.Contains(err.Error(), "tools.on_change: deny") || strings.Contains(err.Error(), "attacker") {
					t.Errorf("echo after the change: %q %v", got, err)
				}
				if listed {
					t.Error("the changed tool is still listed: its new description reaches the code")
				}
			case "allow":
				for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					if b, _ := os.ReadFile(audit); strings.Contains(string(b), `"rule":"tools.on_change"`) {
						break
					}
					got, err = callRun(t, c, "t1", "echo", `{"message":"after"}`)
				}
				if err != nil || got != "after" || !listed {
					t.Errorf("echo after the change: %q %v (listed %v)", got, err, listed)
				}
				if b, _ := os.ReadFile(audit); !strings.Contains(string(b), `"rule":"tools.on_change"`) {
					t.Errorf("the call of a changed tool is not audited as such:\n%s", b)
				}
			}
		})
	}
}

// A lock file pins the definitions instead of the first listing: a tool
// that differs from it, or that it does not list, gets tools.on_change.
func TestToolsLock(t *testing.T) {
	p, _, _ := startProxy(t, Options{}, stdioServer(t, "alpha"))
	lock, failed := p.LockTools(context.Background())
	if len(failed) != 0 || len(lock.Tools["alpha"]) != 13 {
		t.Fatalf("LockTools: %d tools, %v", len(lock.Tools["alpha"]), failed)
	}
	b, err := json.MarshalIndent(lock, "", "  ") // as bridge tools lock writes it
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseLock(b)
	if err != nil || len(LockDiff(again, lock)) != 0 {
		t.Fatalf("round trip: %v %v", err, LockDiff(again, lock))
	}
	// The lock as an operator reviewed it, before the server changed echo
	// and added env: echo's description differs, env is not in it.
	echo := lock.Tools["alpha"]["echo"]
	echo.Definition["description"] = json.RawMessage(`"Echoes the message back, as reviewed."`)
	fields := map[string][]byte{}
	for k, v := range echo.Definition {
		fields[k] = v
	}
	d := digestOf(fields)
	echo.SHA256 = hex.EncodeToString(d[:])
	lock.Tools["alpha"]["echo"] = echo
	delete(lock.Tools["alpha"], "env")
	if diff := strings.Join(LockDiff(lock, again), "\n"); diff != "changed alpha/echo: description\nnew alpha/env: not in the lock file" {
		t.Errorf("LockDiff:\n%s", diff)
	}
	tampered, _ := json.Marshal(lock)
	if _, err := ParseLock(bytes.Replace(tampered, []byte("as reviewed"), []byte("as edited"), 1)); err == nil || !strings.Contains(err.Error(), "does not match its sha256") {
		t.Errorf("a lock edited by hand: %v", err)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	_, c, _ := startProxy(t, Options{Policy: store, Lock: lock}, stdioServer(t, "alpha"))
	for tool, want := range map[string]string{"echo": "(description)", "env": "(not in the lock file)"} {
		if _, err := callRun(t, c, "t1", tool, `{"message":"x","name":"HOME"}`); kindOf(err) != KindDenied || !strings.Contains(err.Error(), want) {
			t.Errorf("%s under the lock: %v, want denied %s", tool, err, want)
		}
	}
	if got, err := callRun(t, c, "t1", "calls", `{}`); err != nil || got == "" {
		t.Errorf("a tool as locked: %q %v", got, err)
	}
}
