package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A big result the bridge wants as JSON passes through raw: the same
// content as the decoded way, the policy's size limit still applies, and a
// result that claims to be the proxy's own failure is still unmasked.
func TestRawResults(t *testing.T) {
	c, _, _, _ := policyProxy(t, `
version: 1
budgets:
  max_result_bytes: 300Ki
`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range []int{100, rawMinBytes + 1, 250 << 10} {
		args := json.RawMessage(`{"n":` + itoa(n) + `}`)
		js, err := c.CallJSON(ctx, Call{RunID: "r", Server: "alpha", Tool: "big", Args: args})
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		var got mcp.CallToolResult
		if err := json.Unmarshal(js, &got); err != nil {
			t.Fatalf("%d bytes: the JSON is not a result: %v", n, err)
		}
		if len(got.Content) != 1 || len(got.Content[0].(*mcp.TextContent).Text) != n {
			t.Fatalf("%d bytes: got %d content items", n, len(got.Content))
		}
		// The decoded way gives the same result.
		dec, err := c.Call(ctx, Call{RunID: "r", Server: "alpha", Tool: "big", Args: args})
		if err != nil {
			t.Fatal(err)
		}
		if dec.Content[0].(*mcp.TextContent).Text != got.Content[0].(*mcp.TextContent).Text {
			t.Fatalf("%d bytes: raw and decoded results differ", n)
		}
	}
	_, err := c.CallJSON(ctx, Call{RunID: "r", Server: "alpha", Tool: "big", Args: json.RawMessage(`{"n":400000}`)})
	if kindOf(err) != KindLimit || !strings.Contains(err.Error(), "budgets.max_result_bytes") {
		t.Fatalf("a 400000-byte result: %v", err)
	}
	js, err := c.CallJSON(ctx, Call{RunID: "r", Server: "alpha", Tool: "spoof", Args: json.RawMessage(`{"n":100000}`)})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), MetaError) || !strings.Contains(string(js), "not really a timeout") {
		t.Fatalf("a big spoofed result: %.200s", js)
	}
	if n, kept := rawWaiting(c); n != 0 || kept != 4 {
		t.Fatalf("%d raw results kept after their calls, %d kept in all; want 0 and 4 (two big ones, the one over the limit, the spoof)", n, kept)
	}
}

// An answer that comes after its call gave up is not kept.
func TestRawResultsLateAnswer(t *testing.T) {
	r := newRawResults()
	tok := r.expect()
	if r.take(tok) != nil {
		t.Fatal("a result before any answer")
	}
	if r.offer(tok, []byte(`{}`)) {
		t.Fatal("kept an answer for a call that is gone")
	}
	if r.offer("forged", []byte(`{}`)) {
		t.Fatal("kept an answer for a token no call has")
	}
	tok = r.expect()
	if !r.offer(tok, []byte(`{"a":1}`)) || r.offer(tok, []byte(`{"a":2}`)) {
		t.Fatal("the first answer must be kept, and only it")
	}
	if string(r.take(tok)) != `{"a":1}` || len(r.waiting) != 0 {
		t.Fatal("take")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// rawWaiting counts the raw results the proxy behind c holds, and those
// it kept so far.
func rawWaiting(c *Client) (n int, kept int64) {
	for _, u := range c.local.byName {
		u.raw.mu.Lock()
		n += len(u.raw.waiting)
		kept += u.raw.kept
		u.raw.mu.Unlock()
	}
	return n, kept
}
