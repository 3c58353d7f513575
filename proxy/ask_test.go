package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// scripted answers each question with the next answer, and keeps the
// questions; an answer of How "" waits for the ask's end instead.
type scripted struct {
	mu        sync.Mutex
	answers   []Answer
	questions []Question
}

func (s *scripted) Ask(ctx context.Context, q Question) Answer {
	s.mu.Lock()
	s.questions = append(s.questions, q)
	a := s.answers[0]
	s.answers = s.answers[1:]
	s.mu.Unlock()
	if a.How == "" {
		<-ctx.Done()
		return Answer{How: TimedOut}
	}
	return a
}

func TestPolicyAsk(t *testing.T) {
	c, _, _, audit := policyProxy(t, `
version: 1
tools:
  rules:
    - {server: alpha, tool: echo, action: ask, reason: "echoes need a human"}
  ask_timeout: 1s
  ask_remember: off
audit:
  file: AUDIT
`)
	cat, err := c.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat.Lookup("alpha", "echo"); !ok {
		t.Fatal("a tool the policy asks about is not listed")
	}
	s := &scripted{answers: []Answer{
		{Allow: true, How: Accepted},
		{How: Declined},
		{How: Cancelled},
		{}, // no answer
		{How: Unsupported},
		{Allow: true, How: Remembered},
	}}
	for i, want := range []struct{ text, kind, msg, decision string }{
		{"hi", "", "", "ask:accepted"},
		{"", KindDenied, "alpha/echo needs the user's approval (echoes need a human): the user declined it", "ask:declined"},
		{"", KindDenied, "the user dismissed the request", "ask:cancelled"},
		{"", KindDenied, "no answer within 1s", "ask:timeout"},
		{"", KindDenied, "this client cannot ask the user (it did not declare MCP elicitation); the policy's tools.ask_fallback is deny", "ask:fallback"},
		{"hi", "", "", "ask:remembered"},
	} {
		var rep CallReport
		ctx, cancel := context.WithTimeout(WithReport(WithAsker(context.Background(), s), &rep), 30*time.Second)
		start := time.Now()
		r, err := c.Call(ctx, "r1", "alpha", "echo", json.RawMessage(`{"message":"hi","n":[1,2]}`))
		cancel()
		switch {
		case want.kind == "" && (err != nil || textOf(t, r) != want.text):
			t.Errorf("answer %d: %v %v", i, r, err)
		case want.kind != "" && (kindOf(err) != want.kind || !strings.Contains(err.Error(), want.msg)):
			t.Errorf("answer %d: got %v, want %s %q", i, err, want.kind, want.msg)
		}
		if got := rep.encode(); got != want.decision {
			t.Errorf("answer %d: report %q, want %q", i, got, want.decision)
		}
		if i == 3 && time.Since(start) > 5*time.Second {
			t.Errorf("the ask without an answer took %s; ask_timeout is 1s", time.Since(start))
		}
	}
	q := s.questions[0]
	if q.Server != "alpha" || q.Tool != "echo" || q.Reason != "echoes need a human" || q.Timeout != time.Second ||
		q.Remember != "off" || q.Arguments != `{"message": "hi", "n": [… 2 items]}` || q.RunID != "r1" {
		t.Errorf("question: %+v", q)
	}

	// Without an Asker (bridge run, a remote proxy): the fallback.
	if _, err := callRun(t, c, "r2", "echo", `{"message":"x"}`); kindOf(err) != KindDenied || !strings.Contains(err.Error(), "cannot ask") {
		t.Errorf("no asker: %v", err)
	}
	asked := map[string]int{}
	for _, l := range auditLines(t, audit) {
		if a, ok := l["asked"].(string); ok {
			asked[a+":"+l["decision"].(string)]++
		}
	}
	want := map[string]int{"accepted:allow": 1, "declined:deny": 1, "cancelled:deny": 1, "timeout:deny": 1, "fallback:deny": 2, "remembered:allow": 1}
	for k, n := range want {
		if asked[k] != n {
			t.Errorf("audit: %d %s records, want %d (all: %v)", asked[k], k, n, asked)
		}
	}
}

func TestSummarizeArguments(t *testing.T) {
	long := strings.Repeat("x", 100)
	for _, c := range []struct{ in, want string }{
		{`{}`, `{}`},
		{``, `{}`},
		{`{"b":2,"a":"one"}`, `{"a": "one", "b": 2}`},
		{`{"s":"` + long + `"}`, `{"s": "` + strings.Repeat("x", 60) + `…"}`},
		{`{"o":{"k":1,"j":2},"l":[],"n":null,"t":true}`, `{"l": [… 0 items], "n": null, "o": {… 2 keys}, "t": true}`},
		{`{"ctl":"a\u0007b","ph":"<EMAIL_1>"}`, `{"ctl": "a\ab", "ph": "<EMAIL_1>"}`},
		{`[1,2]`, `(5 bytes of arguments that are not a JSON object)`},
	} {
		if got := SummarizeArguments(json.RawMessage(c.in), 300); got != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
	var b strings.Builder
	b.WriteString("{")
	for i := range 200 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"key` + strings.Repeat("k", i%7) + string(rune('a'+i%26)) + `":"` + long + `"`)
	}
	b.WriteString("}")
	if got := SummarizeArguments(json.RawMessage(b.String()), 300); len(got) > 300+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("a big object: %d bytes: %s", len(got), got)
	}
}
