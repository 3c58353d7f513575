package policy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// auditStore is clockStore auditing to a file, whose records it returns.
func auditStore(t *testing.T, yaml string) (*Store, func(time.Duration) time.Time, func() []map[string]any) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	s, advance := clockStore(t, yaml+"audit:\n  file: "+file+"\n")
	return s, advance, func() []map[string]any {
		t.Helper()
		f, err := os.Open(file)
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
}

// decisions counts, per run id, the decisions the records account for:
// one per tool_call record, "repeated" per summary; and the records.
func decisions(recs []map[string]any) (calls map[string]int, lines map[string]int) {
	calls, lines = map[string]int{}, map[string]int{}
	for _, r := range recs {
		id, _ := r["run_id"].(string)
		switch r["event"] {
		case "tool_call":
			calls[id]++
			lines[id]++
		case "tool_call_summary":
			n, _ := r["repeated"].(float64)
			calls[id] += int(n)
			lines[id]++
		}
	}
	return calls, lines
}

// Code that loops on a call past its budget writes AuditRepeats refusals,
// then one summary with the exact count when the run ends.
func TestAuditBoundsARefusalLoop(t *testing.T) {
	s, _, records := auditStore(t, "version: 1\nbudgets:\n  max_calls_per_run: 5\n")
	r := s.Begin("run1")
	const n = 100_000
	for range n {
		c := Call{RunID: "run1", Server: "github", Tool: "search", Allowed: true, Rule: "tools.default"}
		if !r.TakeCall() {
			c.Allowed, c.Rule = false, "budgets.max_calls_per_run"
		}
		s.Record(r, c)
	}
	s.Audit().RunEnd(r, "ok", 0, time.Second)
	s.End("run1")
	recs := records()
	if len(recs) != 5+AuditRepeats+2 {
		t.Fatalf("%d records for %d calls, want %d", len(recs), n, 5+AuditRepeats+2)
	}
	sum, end := recs[len(recs)-2], recs[len(recs)-1]
	if sum["event"] != "tool_call_summary" || sum["run_id"] != "run1" || sum["server"] != "github" || sum["tool"] != "search" ||
		sum["decision"] != "deny" || sum["rule"] != "budgets.max_calls_per_run" || sum["repeated"] != float64(n-5-AuditRepeats) {
		t.Fatalf("summary %v", sum)
	}
	if end["event"] != "run_end" || end["tool_calls"] != float64(5) || end["tool_calls_summarized"] != float64(n-5-AuditRepeats) {
		t.Fatalf("run_end %v", end)
	}
	if calls, _ := decisions(recs); calls["run1"] != n {
		t.Fatalf("the records account for %d calls of %d", calls["run1"], n)
	}
}

// Runs are counted apart, each kind of refusal apart within a run.
func TestAuditInterleavedRuns(t *testing.T) {
	s, _, records := auditStore(t, "version: 1\n")
	a := s.Begin("runa")
	b, err := s.Remote("runb", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		s.Record(a, Call{RunID: "runa", Server: "s", Tool: "x", Rule: "tools.rules[0]"})
		s.Record(b, Call{RunID: "runb", Server: "s", Tool: "x", Rule: "tools.rules[0]"})
		if i%2 == 0 {
			s.Record(b, Call{RunID: "runb", Server: "s", Tool: "y", Rule: "budgets.rates[0]"})
		}
	}
	s.Audit().RunEnd(a, "ok", 0, time.Second)
	s.End("runa")
	if err := s.Close(); err != nil { // b is remote: summarized when the Store lets it go
		t.Fatal(err)
	}
	calls, lines := decisions(records())
	if calls["runa"] != 1000 || calls["runb"] != 1500 {
		t.Fatalf("decisions accounted for: %v, want runa 1000, runb 1500", calls)
	}
	if lines["runa"] != AuditRepeats+1 || lines["runb"] != 2*(AuditRepeats+1) {
		t.Fatalf("records: %v, want runa %d, runb %d", lines, AuditRepeats+1, 2*(AuditRepeats+1))
	}
}

// A run with many kinds of refusal keeps AuditKinds apart and counts the
// rest together.
func TestAuditBoundsKinds(t *testing.T) {
	s, _, records := auditStore(t, "version: 1\n")
	r := s.Begin("run1")
	for i := range 100 {
		for range 30 {
			s.Record(r, Call{RunID: "run1", Server: "s", Tool: fmt.Sprintf("t%d", i), Rule: "tools.default"})
		}
	}
	if n := len(r.tally.kinds); n != AuditKinds {
		t.Fatalf("%d kinds kept for one run, want %d", n, AuditKinds)
	}
	s.Audit().RunEnd(r, "ok", 0, time.Second)
	recs := records()
	calls, lines := decisions(recs)
	if calls["run1"] != 3000 || lines["run1"] != (AuditKinds+1)*(AuditRepeats+1) {
		t.Fatalf("%d calls in %d records, want 3000 in %d", calls["run1"], lines["run1"], (AuditKinds+1)*(AuditRepeats+1))
	}
	var other map[string]any
	for _, l := range recs {
		if l["event"] == "tool_call_summary" && l["tool"] == "*" {
			other = l
		}
	}
	if other == nil || other["server"] != "*" || other["decision"] != "*" || other["repeated"] != float64((100-AuditKinds)*30-AuditRepeats) {
		t.Fatalf("the kinds beyond %d: %v", AuditKinds, other)
	}
}

// Past AuditRunRecords nothing more of a run is written one by one,
// allowed calls included (with no max_calls_per_run to stop them first).
func TestAuditBoundsRecordsPerRun(t *testing.T) {
	s, _, records := auditStore(t, "version: 1\nbudgets:\n  max_calls_per_run: 0\n")
	r := s.Begin("run1")
	for range 2 * AuditRunRecords {
		s.Record(r, Call{RunID: "run1", Server: "s", Tool: "ok", Allowed: true, Rule: "tools.default"})
	}
	for range 100 {
		s.Record(r, Call{RunID: "run1", Server: "s", Tool: "no", Rule: "tools.rules[0]"})
	}
	s.Audit().RunEnd(r, "ok", 0, time.Second)
	recs := records()
	calls, lines := decisions(recs)
	if calls["run1"] != 2*AuditRunRecords+100 || lines["run1"] != AuditRunRecords+2 {
		t.Fatalf("%d calls in %d records, want %d in %d", calls["run1"], lines["run1"], 2*AuditRunRecords+100, AuditRunRecords+2)
	}
	if end := recs[len(recs)-1]; end["tool_calls_summarized"] != float64(AuditRunRecords+100) {
		t.Fatalf("run_end %v", end)
	}
}

// Many runs at once: each is bounded, and a remote run's counts are
// written, exact, when the Store forgets it, which frees them.
func TestAuditManyRemoteRuns(t *testing.T) {
	s, advance, records := auditStore(t, "version: 1\n")
	deadline := advance(0).Add(time.Minute)
	const loops = AuditRepeats + 5
	for i := range MaxRemoteRuns {
		id := fmt.Sprintf("r%d", i)
		r, err := s.Remote(id, deadline)
		if err != nil {
			t.Fatal(err)
		}
		for range loops {
			s.Record(r, Call{RunID: id, Server: "s", Tool: "t", Rule: "tools.default"})
		}
	}
	if _, err := s.Remote("onemore", deadline); err == nil {
		t.Fatal("more runs than MaxRemoteRuns are tracked")
	}
	advance(time.Minute + RunGrace + sweepEvery)
	if _, err := s.Remote("later", advance(0).Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if len(s.runs) != 1 {
		t.Fatalf("%d runs tracked after all but one ended", len(s.runs))
	}
	calls, lines := decisions(records())
	for i := range MaxRemoteRuns {
		id := fmt.Sprintf("r%d", i)
		if calls[id] != loops || lines[id] != AuditRepeats+1 {
			t.Fatalf("run %s: %d calls in %d records, want %d in %d", id, calls[id], lines[id], loops, AuditRepeats+1)
		}
	}
}

// Refusals of calls with no run (no run id, or a run refused) are bounded
// per window, and the counts of a window are written when the next begins.
func TestAuditCallsWithNoRun(t *testing.T) {
	s, advance, records := auditStore(t, "version: 1\n")
	const n = 100_000
	for range n {
		s.Record(nil, Call{RunID: "abc", Server: "s", Tool: "t", Rule: RuleRuns})
	}
	for range 3 {
		s.Record(nil, Call{Server: "s", Tool: "t", Allowed: true, Rule: "tools.default"})
	}
	if recs := records(); len(recs) != AuditRepeats+3 {
		t.Fatalf("%d records in the first window, want %d", len(recs), AuditRepeats+3)
	}
	advance(AuditWindow)
	s.Record(nil, Call{RunID: "abc", Server: "s", Tool: "t", Rule: RuleRuns})
	recs := records()
	if len(recs) != AuditRepeats+3+2 || recs[len(recs)-2]["repeated"] != float64(n-AuditRepeats) || recs[len(recs)-2]["rule"] != RuleRuns {
		t.Fatalf("after a window: %d records, last two %v", len(recs), recs[len(recs)-2:])
	}
	for range 100 {
		s.Record(nil, Call{Server: "s", Tool: "t", Rule: RuleRunID})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	calls, _ := decisions(records())
	if calls[""]+calls["abc"] != n+3+1+100 {
		t.Fatalf("the records account for %v calls, want %d", calls, n+3+1+100)
	}
}

// A remote run's summary is written soon after its end, at the next call
// of any run, not only when a new run comes.
func TestAuditRemoteRunSummarizedAfterItsEnd(t *testing.T) {
	s, advance, records := auditStore(t, "version: 1\n")
	now := advance(0)
	a := remote(t, s, "runa", now.Add(time.Minute))
	remote(t, s, "runb", now.Add(time.Hour))
	for range AuditRepeats + 5 {
		s.Record(a, Call{RunID: "runa", Server: "s", Tool: "t", Rule: "tools.default"})
	}
	advance(time.Minute + RunGrace + sweepEvery)
	remote(t, s, "runb", now.Add(time.Hour))
	if s.Run("runa") != nil {
		t.Fatal("a run past its end is still tracked")
	}
	calls, lines := decisions(records())
	if calls["runa"] != AuditRepeats+5 || lines["runa"] != AuditRepeats+1 {
		t.Fatalf("run a: %d calls in %d records, want %d in %d", calls["runa"], lines["runa"], AuditRepeats+5, AuditRepeats+1)
	}
}
