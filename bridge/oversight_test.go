package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

func TestTraceSummary(t *testing.T) {
	rs := &runState{}
	if _, _, _, line := rs.summary(); line != "" {
		t.Errorf("no calls: line %q", line)
	}
	rs.Record(TraceEntry{Server: "a", Tool: "x", Decision: "allowed"})
	if got, cut, _, line := rs.summary(); len(got) != 1 || cut != 0 || line != "" {
		t.Errorf("one allowed call: %v %d %q", got, cut, line)
	}
	rs.Record(TraceEntry{Server: "a", Tool: "y", Decision: "denied", Error: "denied"})
	rs.Record(TraceEntry{Server: "a", Tool: "z", Decision: "asked", Answer: "declined", Error: "denied"})
	rs.Record(TraceEntry{Server: "a", Tool: "w", Decision: "allowed", Error: "timeout"})
	for i := range maxTraceEntries {
		rs.Record(TraceEntry{Server: "b", Tool: fmt.Sprint(i), Decision: "allowed"})
	}
	got, cut, cutBy, line := rs.summary()
	if len(got) != maxTraceEntries || cut != 4 || cutBy["allowed"] != 4 || got[0].Tool != "x" || got[1].Tool != "y" || got[2].Tool != "z" {
		t.Errorf("%d entries, %d cut (%v); first %+v", len(got), cut, cutBy, got[:3])
	}
	if want := "[104 tool calls: 1 denied, 1 asked, 1 failed]"; line != want {
		t.Errorf("line %q, want %q", line, want)
	}
}

// A call that did not go through is kept in a full trace, in place of
// the latest that did; only when the trace holds nothing else is it cut.
// What was cut is counted by kind.
func TestTraceKeepsWhatWentWrong(t *testing.T) {
	rs := &runState{}
	for i := range 120 {
		rs.Record(TraceEntry{Server: "a", Tool: fmt.Sprint(i), Decision: "allowed"})
	}
	rs.Record(TraceEntry{Server: "a", Tool: "drop_table", Decision: "denied", Error: "denied"})
	rs.Record(TraceEntry{Server: "a", Tool: "slow", Decision: "allowed", Error: "timeout"})
	rs.Record(TraceEntry{Server: "a", Tool: "121", Decision: "allowed"})
	got, cut, cutBy, line := rs.summary()
	if len(got) != maxTraceEntries || cut != 23 || len(cutBy) != 1 || cutBy["allowed"] != 23 {
		t.Fatalf("%d entries, %d cut (%v): want %d, 23 allowed cut", len(got), cut, cutBy, maxTraceEntries)
	}
	if got[0].Tool != "0" || got[97].Tool != "97" || got[98].Tool != "drop_table" || got[99].Tool != "slow" {
		t.Errorf("want the first 98 allowed calls, then the denied and the failed one; got %+v ... %+v", got[0], got[96:])
	}
	if want := "[123 tool calls: 1 denied, 1 failed]"; line != want {
		t.Errorf("line %q, want %q", line, want)
	}
	// A trace of nothing but denied calls: the later ones are cut.
	for range 2 * maxTraceEntries {
		rs.Record(TraceEntry{Server: "a", Tool: "rm", Decision: "denied", Error: "denied"})
	}
	rs.Record(TraceEntry{Server: "a", Tool: "q", Decision: "refused", Error: "limit"})
	got, cut, cutBy, _ = rs.summary()
	if len(got) != maxTraceEntries || got[0].Tool != "drop_table" || got[1].Tool != "slow" || got[99].Tool != "rm" {
		t.Errorf("a trace full of denied calls: %d entries, first %+v, last %+v", len(got), got[0], got[99])
	}
	if want := map[string]int{"allowed": 121, "denied": 102, "refused": 1}; !maps.Equal(cutBy, want) || cut != 224 {
		t.Errorf("cut %d by kind %v, want %v", cut, cutBy, want)
	}
}

func TestRunStateAsks(t *testing.T) {
	q := proxy.Question{Server: "pay", Tool: "refund", Reason: "money", Arguments: `{"id": 1}`, Timeout: 2 * time.Minute, Remember: policy.RememberRun}
	// A client that cannot be asked: the proxy applies the fallback.
	rs := &runState{mode: askNone, scope: "run", turn: make(chan struct{}, 1)}
	if a := rs.Ask(context.Background(), q); a.How != proxy.Unsupported || a.Allow {
		t.Errorf("no elicitation: %+v", a)
	}
	// What the human allowed and asked to remember is not asked again,
	// within the scope the policy lets it live.
	rs.run = &approvals{}
	rs.run.add("pay", "refund")
	if a := rs.Ask(context.Background(), q); a.How != proxy.Remembered || !a.Allow {
		t.Errorf("remembered: %+v", a)
	}
	q.Remember = policy.RememberOff
	if a := rs.Ask(context.Background(), q); a.How != proxy.Unsupported {
		t.Errorf("remember off: %+v", a)
	}
	q.Remember = policy.RememberConnection
	rs2 := &runState{mode: askNone, scope: "session", conn: &approvals{}, turn: make(chan struct{}, 1)}
	rs2.conn.add("pay", "refund")
	if a := rs2.Ask(context.Background(), q); a.How != proxy.Remembered {
		t.Errorf("remembered for the connection: %+v", a)
	}
	if mem, words := rs2.scopeFor(policy.RememberRun); mem == nil || words != "for the rest of this session" || mem == rs2.conn {
		t.Errorf("run scope in a session: %v %q", mem, words)
	}
}

func TestElicitForm(t *testing.T) {
	q := proxy.Question{Server: "pay", Tool: "refund", Reason: "money moves", Arguments: `{"id": 1}`, Timeout: 90 * time.Second}
	for _, c := range []struct {
		words    string
		property bool
	}{{"", false}, {"for the rest of this run", true}} {
		p := elicitParams(q, c.words)
		for _, want := range []string{`"refund"`, `"pay"`, "money moves", `{"id": 1}`, "within 90 s"} {
			if !strings.Contains(p.Message, want) {
				t.Errorf("message lacks %q: %s", want, p.Message)
			}
		}
		var schema struct {
			Type       string
			Properties map[string]struct {
				Type, Title string
				Default     bool
			}
		}
		if err := json.Unmarshal(p.RequestedSchema.(json.RawMessage), &schema); err != nil || schema.Type != "object" {
			t.Fatalf("schema %s: %v", p.RequestedSchema, err)
		}
		r, ok := schema.Properties["remember"]
		if ok != c.property || (ok && (r.Type != "boolean" || r.Default || r.Title != "Also allow pay/refund "+c.words)) {
			t.Errorf("words %q: schema %s", c.words, p.RequestedSchema)
		}
	}
}

// askingHuman answers the questions of rs (an askResult run) with what
// answer returns for the nth (nil: leaves it unanswered), and counts them.
func askingHuman(t *testing.T, rs *runState, answer func(n int) *mcp.ElicitResult) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case p := <-rs.pending:
				if r := answer(int(n.Add(1))); r != nil {
					p.answer <- r
				} // nil: silent, ask_timeout decides
			case <-done:
				return
			}
		}
	}()
	return &n
}

// TestRunStateAsksDoNotNag: code calling a tool that needs an answer in a
// loop cannot wear the human down. A dismissed question, one left
// unanswered, or one the client failed to ask ends the asking for the
// rest of the run, for every tool; a "no" holds for its tool; and a run
// puts at most tools.ask_max_per_run questions.
func TestRunStateAsksDoNotNag(t *testing.T) {
	q := proxy.Question{Server: "pay", Tool: "refund", Reason: "money", Timeout: 100 * time.Millisecond, Remember: policy.RememberRun, Limit: 5}
	other := q
	other.Tool = "charge"
	// bounded asks as the proxy does, within a deadline: a question the
	// human is asked again, and nobody answers, ends with it.
	bounded := func(rs *runState, q proxy.Question) proxy.Answer {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return rs.Ask(ctx, q)
	}
	newRun := func() *runState {
		return &runState{mode: askResult, scope: "run", turn: make(chan struct{}, 1), pending: make(chan *pendingAsk)}
	}
	for _, c := range []struct {
		name   string
		answer func(int) *mcp.ElicitResult
		first  string
		why    string
	}{
		{"dismissed", func(int) *mcp.ElicitResult { return &mcp.ElicitResult{Action: "cancel"} }, proxy.Cancelled, "the user dismissed an earlier question of this run"},
		{"unanswered", func(int) *mcp.ElicitResult { return nil }, proxy.TimedOut, "the user did not answer an earlier question of this run within 1 s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := newRun()
			asked := askingHuman(t, rs, c.answer)
			first := q
			first.Timeout = time.Second
			ctx, cancel := context.WithTimeout(context.Background(), first.Timeout) // as the proxy bounds an ask
			defer cancel()
			if a := rs.Ask(ctx, first); a.How != c.first || a.Allow {
				t.Fatalf("the first call: %+v, want %s", a, c.first)
			}
			for i := range 40 {
				qq := q
				if i%2 == 1 {
					qq = other
				}
				if a := bounded(rs, qq); a.How != proxy.Withheld || a.Allow || a.Why != c.why {
					t.Fatalf("call %d after: %+v, want withheld: %q", i+2, a, c.why)
				}
			}
			if n := asked.Load(); n != 1 {
				t.Errorf("the human was asked %d times, want once", n)
			}
		})
	}
	t.Run("failed", func(t *testing.T) {
		rs := newRun()
		// The client answers the retried call without the elicitation's
		// result: the question could not be asked.
		var n atomic.Int32
		go func() {
			p := <-rs.pending
			n.Add(1)
			p.answer <- nil
		}()
		if a := bounded(rs, q); a.How != proxy.Failed {
			t.Fatalf("the first call: %+v", a)
		}
		if a := bounded(rs, other); a.How != proxy.Withheld || a.Why != "the client failed to ask an earlier question of this run" {
			t.Fatalf("after: %+v", a)
		}
		if n.Load() != 1 {
			t.Errorf("%d questions", n.Load())
		}
	})
	t.Run("limit", func(t *testing.T) {
		rs := newRun()
		asked := askingHuman(t, rs, func(int) *mcp.ElicitResult { return &mcp.ElicitResult{Action: "accept"} })
		for i := range 8 {
			a := bounded(rs, q)
			if i < q.Limit && (a.How != proxy.Accepted || !a.Allow) {
				t.Fatalf("question %d: %+v", i+1, a)
			}
			if i >= q.Limit && (a.How != proxy.Withheld || a.Allow || a.Why != "this run already asked the user 5 times (tools.ask_max_per_run)") {
				t.Fatalf("call %d past the limit: %+v", i+1, a)
			}
		}
		if n := asked.Load(); n != int32(q.Limit) {
			t.Errorf("%d questions, want %d", n, q.Limit)
		}
	})
	t.Run("declined", func(t *testing.T) {
		rs := newRun()
		asked := askingHuman(t, rs, func(n int) *mcp.ElicitResult {
			if n == 1 {
				return &mcp.ElicitResult{Action: "decline"}
			}
			return &mcp.ElicitResult{Action: "accept"}
		})
		if a := bounded(rs, q); a.How != proxy.Declined {
			t.Fatalf("%+v", a)
		}
		for range 10 {
			if a := bounded(rs, q); a.How != proxy.Remembered || a.Allow {
				t.Fatalf("the declined tool again: %+v", a)
			}
		}
		if a := bounded(rs, other); a.How != proxy.Accepted {
			t.Fatalf("another tool after a no: %+v", a)
		}
		if n := asked.Load(); n != 2 {
			t.Errorf("%d questions, want 2", n)
		}
	})
}
