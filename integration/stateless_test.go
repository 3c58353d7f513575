package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// headerLog records the MCP headers of the requests a client sends.
type headerLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []http.Header
}

func (h *headerLog) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.seen = append(h.seen, r.Header.Clone())
	h.mu.Unlock()
	return h.next.RoundTrip(r)
}

// calls are the headers of the tools/call requests sent so far.
func (h *headerLog) calls() []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []http.Header
	for _, hd := range h.seen {
		if hd.Get("Mcp-Method") == "tools/call" {
			out = append(out, hd)
		}
	}
	return out
}

// statelessClient connects a go-sdk client left to itself (it asks for
// 2026-07-28) to the bridge at addr with token, its requests' headers
// logged, a progress handler counting what it gets; it lists the tools.
func statelessClient(t *testing.T, addr, token string, progress func()) (*mcp.ClientSession, *headerLog) {
	t.Helper()
	log := &headerLog{next: http.DefaultTransport}
	if token != "" {
		log.next = bearer(token)
	}
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(context.Context, *mcp.ProgressNotificationClientRequest) { progress() }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stateless", Version: "1"}, opts).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: log}}, nil)
	if err != nil {
		t.Fatalf("connecting a 2026-07-28 client: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	listed(t, cs)
	return cs, log
}

// TestStatelessHTTP: a go-sdk client left to itself negotiates
// 2026-07-28 with `bridge serve --http` and makes no MCP session; its
// calls keep a bridge session by name, the name mirrored into each
// call's Mcp-Param-Session header; the principal's next client, stateless
// or legacy, finds the session, another principal is refused it;
// progress streams on the call's own response; a call the client gives up
// stops its run, and its container goes.
func TestStatelessHTTP(t *testing.T) {
	forEngines(t, aboveEngine("serving MCP 2026-07-28 over HTTP"), func(t *testing.T, e *engine) {
		const alice, bob = "alice-0123456789abcdef0123456789abcdef", "bob-0123456789abcdef0123456789abcdef01"
		args, _ := serveArgs(e)
		addr, pid := startHTTPBridge(t, e, append(withoutSandboxFlags(args), "--policy", sessionPolicy(t, e, "10m"),
			"--principals", principalsFile(t, "alice "+alice, "bob "+bob)))
		var mu sync.Mutex
		progressed := 0
		a, log := statelessClient(t, addr, alice, func() { mu.Lock(); progressed++; mu.Unlock() })
		if v := a.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Fatalf("negotiated %q, want 2026-07-28", v)
		}
		if a.ID() != "" {
			t.Errorf("a stateless client got an MCP session id %q", a.ID())
		}

		if out, text := sessionCall(t, a, map[string]any{"code": "x = 41", "session": "work"}); out.Status != "ok" {
			t.Fatalf("the first call: %+v %s", out, text)
		}
		if out, _ := sessionCall(t, a, map[string]any{"code": "print(x + 1)", "session": "work"}); out.Stdout != "42\n" {
			t.Errorf("the second call of the session: %+v", out)
		}
		calls := log.calls()
		if len(calls) != 2 {
			t.Fatalf("%d tools/call requests logged, want 2", len(calls))
		}
		for _, h := range calls {
			if h.Get("Mcp-Param-Session") != "work" || h.Get("Mcp-Name") != "run_python" || h.Get("Mcp-Protocol-Version") != "2026-07-28" || h.Get("Mcp-Session-Id") != "" {
				t.Errorf("a call's headers: %v", h)
			}
		}

		// The principal's next client, of either era, finds the session.
		again, _ := statelessClient(t, addr, alice, nil)
		if out, _ := sessionCall(t, again, map[string]any{"code": "print(x)", "session": "work"}); out.Stdout != "41\n" {
			t.Errorf("alice's next stateless client: %+v", out)
		}
		legacy, err := mcp.NewClient(&mcp.Implementation{Name: "legacy", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearer(alice)}},
			&mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer legacy.Close()
		if legacy.ID() == "" || legacy.InitializeResult().ProtocolVersion != legacyVersion {
			t.Errorf("the legacy client: session %q, version %q", legacy.ID(), legacy.InitializeResult().ProtocolVersion)
		}
		if out, _ := sessionCall(t, legacy, map[string]any{"code": "print(x)", "session": "work"}); out.Stdout != "41\n" {
			t.Errorf("alice's legacy client: %+v", out)
		}
		b, _ := statelessClient(t, addr, bob, nil)
		if out, _ := sessionCall(t, b, map[string]any{"code": "print(x)", "session": "work"}); out.Status != "invalid" || !strings.Contains(out.Message, "held by another principal") {
			t.Errorf("bob in alice's session: %+v", out)
		}

		// Progress on the call's own response.
		params := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "import time\ntime.sleep(2.5)\nprint('slept')"}}
		params.SetProgressToken("slow")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := a.CallTool(ctx, params)
		if err != nil || res.IsError {
			t.Fatalf("a slow call: %v %v", err, res)
		}
		waitFor(t, 5*time.Second, "progress notifications of a 2.5 s run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return progressed >= 2
		})

		// A call given up: its run stops and its container goes; the
		// session's stays.
		waitFor(t, 30*time.Second, "the session's container alone", func() bool { return len(ownedIDs(t, e, pid)) == 1 })
		callCtx, giveUp := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := a.CallTool(callCtx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "import time\ntime.sleep(300)"}})
			done <- err
		}()
		waitFor(t, 30*time.Second, "the run's container", func() bool { return len(ownedIDs(t, e, pid)) == 2 })
		giveUp()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("the given-up call returned %v", err)
		}
		waitFor(t, 15*time.Second, "the given-up run's container removed", func() bool { return len(ownedIDs(t, e, pid)) == 1 })
		if out, _ := sessionCall(t, a, map[string]any{"code": "print(x)", "session": "work"}); out.Stdout != "41\n" {
			t.Errorf("the session after a call was given up: %+v", out)
		}
	})
}

// modernCall sends one MCP 2026-07-28 request by hand, with the headers
// and _meta a 2026-07-28 client sends, declaring the Tasks extension
// when tasks is true (the go-sdk client knows nothing of tasks); name is
// the Mcp-Name header, and session, when set, the Mcp-Param-Session one.
// It returns the result, or the JSON-RPC error.
func modernCall(t testing.TB, endpoint, token, method, name, session string, params map[string]any, tasks bool) (map[string]any, *jsonrpc.Error) {
	t.Helper()
	caps := map[string]any{}
	if tasks {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	params["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": caps,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "modern", "version": "1"},
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	if session != "" {
		req.Header.Set("Mcp-Param-Session", session)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var msg struct {
		Result map[string]any `json:"result"`
		Error  *jsonrpc.Error `json:"error"`
	}
	text := string(raw)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The last data line is the answer (progress notifications come
		// before it).
		text = ""
		for _, line := range strings.Split(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"id":7`) {
				text = d
			}
		}
	}
	if err := json.Unmarshal([]byte(text), &msg); err != nil || (msg.Result == nil && msg.Error == nil) {
		t.Fatalf("%s: HTTP %d, not an answer: %q", method, resp.StatusCode, raw)
	}
	return msg.Result, msg.Error
}

// awaitModernTask polls tasks/get for id until it is completed (or
// another terminal state) and returns the last answer.
func awaitModernTask(t testing.TB, endpoint, token, id string, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := modernCall(t, endpoint, token, "tasks/get", id, "", map[string]any{"taskId": id}, true)
		if err != nil {
			t.Fatalf("tasks/get %s: %v", id, err)
		}
		switch got["status"] {
		case "completed", "failed", "cancelled":
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still %v after %s", id, got["status"], within)
		}
		time.Sleep(time.Duration(got["pollIntervalMs"].(float64)) * time.Millisecond)
	}
}
