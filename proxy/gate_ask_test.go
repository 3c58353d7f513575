package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/tokenize"
	"github.com/bridge-mcp/bridge/policy"
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
		{How: Unsupported, Why: "there is no client to ask"},
		{Allow: true, How: Remembered},
		{How: Withheld, Why: "the user dismissed an earlier question of this run"},
	}}
	for i, want := range []struct{ text, kind, msg, decision string }{
		{"hi", "", "", "ask:accepted"},
		{"", KindDenied, "alpha/echo needs the user's approval (echoes need a human): the user declined it", "ask:declined"},
		{"", KindDenied, "the user dismissed the request", "ask:cancelled"},
		{"", KindDenied, "no answer within 1s", "ask:timeout"},
		{"", KindDenied, "this client cannot ask the user (it did not declare MCP elicitation); the policy's tools.ask_fallback is deny", "ask:fallback"},
		{"", KindDenied, "alpha/echo needs the user's approval (echoes need a human), and there is no client to ask; the policy's tools.ask_fallback is deny", "ask:fallback"},
		{"hi", "", "", "ask:remembered"},
		{"", KindDenied, "alpha/echo needs the user's approval (echoes need a human): not asked, the user dismissed an earlier question of this run", "ask:withheld"},
	} {
		var rep CallReport
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		r, err := c.Call(ctx, Call{RunID: "r1", Server: "alpha", Tool: "echo", Args: json.RawMessage(`{"message":"hi","n":[1,2]}`), Asker: s, Report: &rep})
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
		q.Remember != "off" || q.Limit != 10 || q.Arguments != `{"message": "hi", "n": [… 2 items]}` || q.RunID != "r1" {
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
	want := map[string]int{"accepted:allow": 1, "declined:deny": 1, "cancelled:deny": 1, "timeout:deny": 1, "fallback:deny": 3, "remembered:allow": 1, "withheld:deny": 1}
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

func TestPolicyTokenize(t *testing.T) {
	c, _, _, audit := policyProxy(t, `
version: 1
tokenize:
  kinds: [email]
  patterns:
    - {name: customer_id, regex: "CUST-[0-9]{4}"}
  results: [{server: alpha, tool: contacts}, {server: alpha, tool: env}]
  restore: [{server: alpha, tool: env}]
  max_values: 3
audit:
  file: AUDIT
`)
	run := func(run, tool, args string) (string, error) { return callRun(t, c, run, tool, args) }
	got, err := run("t1", "contacts", `{}`)
	if want := "<EMAIL_1> is <CUSTOMER_ID_1>; <EMAIL_2> too; <EMAIL_1> again"; err != nil || got != want {
		t.Fatalf("tokenized: %q %v, want %q", got, err, want)
	}
	// Another run has its own placeholders, and knows none of t1's.
	if got, err := run("t2", "echo", `{"message":"<EMAIL_2>"}`); err != nil || got != "<EMAIL_2>" {
		t.Errorf("run t2: %q %v", got, err)
	}
	// A tool in results tokenizes its result whatever the code sent: a
	// value the code guessed is not left in clear in genuine data.
	if got, err := run("t1", "contacts", `{"note":"ann@example.com"}`); err != nil || got != "<EMAIL_1> is <CUSTOMER_ID_1>; <EMAIL_2> too; <EMAIL_1> again" {
		t.Errorf("contacts with a guess sent: %q %v", got, err)
	}
	// No oracle through a tool whose results are not tokenized: a guess
	// sent to one that echoes it comes back as written, right (a value the
	// run holds) or wrong. (A tool in results tokenizes what it returns
	// whatever was sent: its echo is an oracle, documented.)
	for _, guess := range []string{"ann@example.com", "zed@example.com"} {
		if got, err := run("t1", "echo", `{"message":"`+guess+`"}`); err != nil || got != guess {
			t.Errorf("a guess echoed: %q %v, want %q as sent", got, err, guess)
		}
	}
	// The env tool may receive values: it gets the real one back (its
	// answer, the environment variable of that name, is empty), and a
	// placeholder the run does not hold stays as it is.
	if got, err := run("t1", "env", `{"name":"<EMAIL_9>"}`); err != nil || got != "" {
		t.Errorf("env: %q %v", got, err)
	}
	// (A value the run holds stays out of the results of tools not in
	// results too: integration TestTokenize, through a restore tool's
	// error that quotes its argument.)
	// Past max_values: the result is refused, never passed on.
	if _, err := run("t1", "env", `{"name":"TEST_MORE_CONTACTS"}`); kindOf(err) != KindLimit || !strings.Contains(err.Error(), "tokenize.max_values (3)") {
		t.Errorf("a full vault: %v", err)
	}
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"ann@", "bob@", "CUST-1234"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the audit holds %q", secret)
		}
	}
}

// max_result_bytes is measured on the result as the code gets it: the
// size of the untokenized one would tell the length of the values hidden.
func TestTokenizeResultSize(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want string // the result, or the error
	}{
		// The result: 235 bytes as the upstream wrote it, 217 tokenized.
		{220, "<EMAIL_1> is CUST-1234; <EMAIL_2> too; <EMAIL_1> again"},
		{200, "the result of alpha/contacts is over the policy's budgets.max_result_bytes (200 bytes, counted after tokenization)"},
	} {
		c, _, _, _ := policyProxy(t, fmt.Sprintf(`
version: 1
tokenize:
  kinds: [email]
  results: [{server: alpha, tool: contacts}]
budgets:
  max_result_bytes: %d
`, tc.max))
		got, err := callRun(t, c, "t1", "contacts", `{}`)
		if err != nil {
			got = err.Error()
		}
		if got != tc.want || strings.Contains(got, "235") {
			t.Errorf("max_result_bytes %d: %q, want %q", tc.max, got, tc.want)
		}
	}
}

// The kinds the policy accepts are the ones tokenize knows.
func TestTokenKindsAgree(t *testing.T) {
	if got, want := strings.Join(tokenize.Builtins(), ","), strings.Join(policy.TokenKinds, ","); got != want {
		t.Errorf("tokenize.Builtins() %s, policy.TokenKinds %s", got, want)
	}
	for _, name := range policy.TokenKinds {
		if _, ok := tokenize.Builtin(name); !ok {
			t.Errorf("tokenize has no kind %q", name)
		}
	}
}

// An upstream's error may quote the arguments a restore tool got: it is
// tokenized like a result, for every tool once the run holds a value.
func TestTokenizeErrors(t *testing.T) {
	pol, err := policy.Parse([]byte("version: 1\ntokenize:\n  results: [{server: crm}]\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	run := store.Begin("r1")
	p := &Proxy{}
	_, ct, err := p.tokens(pol, run, "crm", "get", json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res, js, err := ct.apply(nil, []byte(`{"content":[{"type":"text","text":"ann@example.com"}]}`), true)
	if err != nil || res == nil || !strings.Contains(string(js), "<EMAIL_1>") {
		t.Fatalf("apply: %s %v", js, err)
	}
	// A tool not in results, after the run holds the value: its error is
	// scrubbed; one with nothing held passes as it is.
	_, other, _ := p.tokens(pol, run, "mailer", "send", json.RawMessage(`{}`))
	got := other.applyError(&Error{Kind: KindUpstream, Message: `invalid address "ann@example.com"`})
	if pe, ok := got.(*Error); !ok || pe.Kind != KindUpstream || pe.Message != `invalid address "<EMAIL_1>"` {
		t.Errorf("scrubbed error: %#v", got)
	}
	plain := &Error{Kind: KindTimeout, Message: "took too long"}
	if got := other.applyError(plain); got != error(plain) {
		t.Errorf("an error with nothing to tokenize: %#v", got)
	}
	_, fresh, _ := p.tokens(pol, store.Begin("r2"), "mailer", "send", json.RawMessage(`{}`))
	if fresh.vaultNow() != nil {
		t.Error("a run that holds nothing scans the results of tools not in results")
	}
}
