package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

func TestTraceSummary(t *testing.T) {
	rs := &runState{}
	if _, _, line := rs.summary(); line != "" {
		t.Errorf("no calls: line %q", line)
	}
	rs.Record(TraceEntry{Server: "a", Tool: "x", Decision: "allowed"})
	if got, cut, line := rs.summary(); len(got) != 1 || cut != 0 || line != "" {
		t.Errorf("one allowed call: %v %d %q", got, cut, line)
	}
	rs.Record(TraceEntry{Server: "a", Tool: "y", Decision: "denied", Error: "denied"})
	rs.Record(TraceEntry{Server: "a", Tool: "z", Decision: "asked", Answer: "declined", Error: "denied"})
	rs.Record(TraceEntry{Server: "a", Tool: "w", Decision: "allowed", Error: "timeout"})
	for i := range maxTraceEntries {
		rs.Record(TraceEntry{Server: "b", Tool: fmt.Sprint(i), Decision: "allowed"})
	}
	got, cut, line := rs.summary()
	if len(got) != maxTraceEntries || cut != 4 || got[0].Tool != "x" || got[1].Tool != "y" || got[2].Tool != "z" {
		t.Errorf("%d entries, %d cut; first %+v", len(got), cut, got[:3])
	}
	if want := "[104 tool calls: 1 denied, 1 asked, 1 failed]"; line != want {
		t.Errorf("line %q, want %q", line, want)
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
