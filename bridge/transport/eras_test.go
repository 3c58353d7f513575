package transport

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestHTTPBothEras: one /mcp serves a 2026-07-28 client statelessly (it
// negotiates 2026-07-28, no MCP session is made) and a 2025-11-25 client
// with its session, at once.
func TestHTTPBothEras(t *testing.T) {
	srv := newTestMCPServer(t, nil)
	sessions := NewSessions(func() SessionLimits { return SessionLimits{Max: 8, MaxPerClient: 8} })
	h := startHTTP(t, srv, HTTPOptions{Addr: "127.0.0.1:0", Sessions: sessions})
	ctx := t.Context()

	modern, err := connectVersion(t, ctx, h.base+"/mcp", "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer modern.Close()
	legacy, err := connectStreamable(t, ctx, h.base+"/mcp", "")
	if err != nil {
		t.Fatal(err)
	}
	defer legacy.Close()
	if v := modern.InitializeResult().ProtocolVersion; v != StatelessVersion {
		t.Errorf("the default go-sdk client negotiated %q, want %s", v, StatelessVersion)
	}
	if v := legacy.InitializeResult().ProtocolVersion; v != legacyVersion {
		t.Errorf("the pinned client negotiated %q, want %s", v, legacyVersion)
	}
	for range 3 {
		listAndCall(t, ctx, modern)
		listAndCall(t, ctx, legacy)
	}
	if st := sessions.Stats(); st.Open != 1 {
		t.Errorf("%d MCP sessions open, want the legacy client's 1", st.Open)
	}
	named := 0
	for ss := range srv.Sessions() {
		if ss.ID() != "" {
			named++
		}
	}
	if named != 1 {
		t.Errorf("%d MCP sessions with an id, want 1", named)
	}

	// A stateless request gets no Mcp-Session-Id; a legacy initialize does.
	code, sid, body, _ := rawPostHeaders(t, h.base+"/mcp", map[string]string{"Mcp-Protocol-Version": StatelessVersion, "Mcp-Method": "server/discover"},
		`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if code != http.StatusOK || sid != "" || !strings.Contains(body, `"supportedVersions"`) || !strings.Contains(body, StatelessVersion) {
		t.Errorf("server/discover: %d, session %q, %q", code, sid, body)
	}
	if code, sid, body, _ := rawPost(t, h.base+"/mcp", "", initBody(2)); code != http.StatusOK || sid == "" {
		t.Errorf("a legacy initialize: %d, session %q, %q", code, sid, body)
	}
	// GET of a stateless revision: there is no stream to open.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/mcp", nil)
	req.Header.Set("Mcp-Protocol-Version", StatelessVersion)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("a stateless GET: %d, want 405", resp.StatusCode)
	}
}

// TestHTTPStatelessCancelAndProgress: a stateless call's progress comes
// on its own response (there is no other stream), and a call whose client gives up (it closes the
// request: the 2026-07-28 way to cancel) ends its handler at once.
func TestHTTPStatelessCancelAndProgress(t *testing.T) {
	cancelled := make(chan error, 1)
	srv := newTestMCPServer(t, cancelled)
	mcp.AddTool(srv, &mcp.Tool{Name: "count", Description: "send 3 progress notifications"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			for i := range 3 {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i + 1), Total: 3}); err != nil {
					return nil, nil, err
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "counted"}}}, nil, nil
		})
	d := NewDrain()
	h := startHTTP(t, srv, HTTPOptions{Addr: "127.0.0.1:0", Drain: d})
	ctx := t.Context()

	var mu sync.Mutex
	var got []float64
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, r.Params.Progress)
		},
	})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.base + "/mcp", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != StatelessVersion {
		t.Fatalf("negotiated %q", v)
	}
	params := &mcp.CallToolParams{Name: "count"}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("count: %v %+v", err, res)
	}
	// The client hands notifications to its handler on their own
	// goroutines: they may reach it after the result.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	if len(got) != 3 {
		t.Errorf("progress %v, want 1, 2 and 3", got)
	}
	mu.Unlock()

	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "block"})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for d.InFlight() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stateless call in flight is not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-cancelled:
		if err == nil {
			t.Error("the handler's context ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled stateless call's handler still runs 5 s later")
	}
	if err := <-done; err == nil {
		t.Error("the cancelled call returned no error")
	}
}

// rawPostHeaders POSTs body to url with headers, as rawPost does.
func rawPostHeaders(t *testing.T, url string, headers map[string]string, body string) (int, string, string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b), resp.Header
}
