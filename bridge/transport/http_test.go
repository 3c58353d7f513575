package transport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// httpHarness runs ServeHTTP in the background.
type httpHarness struct {
	t      *testing.T
	base   string // http://127.0.0.1:port
	cancel context.CancelFunc
	done   chan error
	log    *syncBuffer
}

func startHTTP(t *testing.T, srv *mcp.Server, opts HTTPOptions) *httpHarness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &httpHarness{t: t, cancel: cancel, done: make(chan error, 1), log: &syncBuffer{}}
	ready := make(chan net.Addr, 1)
	opts.Ready = func(a net.Addr) { ready <- a }
	go func() { h.done <- ServeHTTP(ctx, srv, opts, zerolog.New(h.log)) }()
	select {
	case a := <-ready:
		_, port, err := net.SplitHostPort(a.String())
		if err != nil {
			t.Fatal(err)
		}
		h.base = "http://127.0.0.1:" + port
	case err := <-h.done:
		t.Fatalf("ServeHTTP: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("ServeHTTP did not become ready")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(10 * time.Second):
			t.Error("ServeHTTP did not return")
		}
	})
	return h
}

// stop cancels ServeHTTP's context and returns how long it took to
// return, and its result.
func (h *httpHarness) stop() (time.Duration, error) {
	h.t.Helper()
	start := time.Now()
	h.cancel()
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return time.Since(start), err
	case <-time.After(10 * time.Second):
		h.t.Fatal("ServeHTTP did not return in 10s after its context ended")
		return 0, nil
	}
}

// bearerTransport adds an Authorization header.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func httpClient(token string) *http.Client {
	if token == "" {
		return &http.Client{}
	}
	return &http.Client{Transport: bearerTransport{token}}
}

func connectStreamable(t *testing.T, ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	return connectVersion(t, ctx, url, token, legacyVersion)
}

// legacyVersion is the newest MCP revision with sessions (initialize,
// Mcp-Session-Id): what a client pinned to it, or older, negotiates.
const legacyVersion = "2025-11-25"

// connectVersion connects a go-sdk client asking for version (""
// the newest it knows: 2026-07-28, stateless) to url.
func connectVersion(t *testing.T, ctx context.Context, url, token, version string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: httpClient(token), MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
}

// listAndCall lists the tools and calls echo through cs.
func listAndCall(t *testing.T, ctx context.Context, cs *mcp.ClientSession) {
	t.Helper()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "block,echo" {
		t.Errorf("tools %v, want [block echo]", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over http"}})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("CallTool result: %+v", res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "echo: over http" {
		t.Errorf("CallTool content: %#v", res.Content[0])
	}
}

func TestHTTPStreamableLoopbackNoToken(t *testing.T) {
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Version: "1.2.3"})
	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", "")
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	listAndCall(t, t.Context(), cs)
	if !strings.Contains(h.log.String(), `"mcp":"`+h.base+`/mcp"`) {
		t.Errorf("the listening address is not logged:\n%s", h.log.String())
	}
}

// get does a request with an optional Authorization header.
func get(t *testing.T, method, url, auth string) (*http.Response, string) {
	t.Helper()
	// A request that gets past auth may open a stream that never ends.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func wantUnauthorized(t *testing.T, base, token string) {
	t.Helper()
	for _, path := range []string{"/mcp", "/sse"} {
		for _, auth := range []string{"", "Bearer wrong-" + token, "Bearer " + token + "x", "Basic " + token, token, "Bearer"} {
			for _, method := range []string{http.MethodPost, http.MethodGet} {
				resp, body := get(t, method, base+path, auth)
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("%s %s with Authorization %q: status %d, want 401", method, path, auth, resp.StatusCode)
				}
				if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("%s %s: WWW-Authenticate %q", method, path, resp.Header.Get("WWW-Authenticate"))
				}
				if !strings.Contains(body, "Authorization: Bearer") || strings.Contains(body, token) {
					t.Errorf("%s %s: body %q", method, path, body)
				}
			}
		}
	}
	if _, err := connectStreamable(t, t.Context(), base+"/mcp", ""); err == nil {
		t.Error("a client without a token connected")
	}
	if _, err := connectStreamable(t, t.Context(), base+"/mcp", "nope"); err == nil {
		t.Error("a client with a wrong token connected")
	}
}

func TestHTTPTokenRequiredWhenSet(t *testing.T) {
	const token = "s3cret-token-for-tests-0123456789"
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Token: token})
	wantUnauthorized(t, h.base, token)

	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", token)
	if err != nil {
		t.Fatalf("Connect with the token: %v", err)
	}
	defer cs.Close()
	listAndCall(t, t.Context(), cs)
	// The scheme is case-insensitive.
	if resp, _ := get(t, http.MethodPost, h.base+"/mcp", "bearer "+token); resp.StatusCode == http.StatusUnauthorized {
		t.Error(`"bearer <token>" was refused`)
	}
	if strings.Contains(h.log.String(), token) {
		t.Errorf("the token set by the caller was logged:\n%s", h.log.String())
	}
}

var tokenLogRE = regexp.MustCompile(`"token":"([A-Za-z0-9_-]+)"`)

func TestHTTPNonLoopbackGeneratesToken(t *testing.T) {
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "0.0.0.0:0", Version: "9.9"})
	logged := h.log.String()
	m := tokenLogRE.FindAllStringSubmatch(logged, -1)
	if len(m) != 1 {
		t.Fatalf("want the token logged once, found %d times:\n%s", len(m), logged)
	}
	token := m[0][1]
	if len(token) != 43 { // 32 bytes, base64url without padding
		t.Errorf("token %q is %d characters, want 43", token, len(token))
	}
	var line struct {
		Level   string `json:"level"`
		Message string `json:"message"`
	}
	for _, l := range strings.Split(strings.TrimSpace(logged), "\n") {
		if strings.Contains(l, token) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line.Level != "warn" || !strings.Contains(line.Message, "Authorization: Bearer <token>") {
		t.Errorf("token log line: level %q message %q", line.Level, line.Message)
	}

	wantUnauthorized(t, h.base, token)
	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", token)
	if err != nil {
		t.Fatalf("Connect with the generated token: %v", err)
	}
	listAndCall(t, t.Context(), cs)
	cs.Close()

	resp, body := get(t, http.MethodGet, h.base+"/healthz", "")
	if resp.StatusCode != http.StatusOK || strings.Contains(body, token) {
		t.Errorf("healthz: %d %q", resp.StatusCode, body)
	}
	if _, err := h.stop(); err != nil {
		t.Errorf("ServeHTTP: %v", err)
	}
	if n := strings.Count(h.log.String(), token); n != 1 {
		t.Errorf("the token appears %d times in the log, want 1:\n%s", n, h.log.String())
	}
}

func TestHTTPHealthz(t *testing.T) {
	const token = "another-secret-token-0123456789"
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Token: token, Version: "1.2.3"})
	resp, body := get(t, http.MethodGet, h.base+"/healthz", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("healthz Content-Type %q", ct)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("healthz body %q: %v", body, err)
	}
	if len(got) != 2 || got["status"] != "ok" || got["version"] != "1.2.3" {
		t.Errorf("healthz: %v", got)
	}
	if strings.Contains(body, token) {
		t.Errorf("healthz leaks the token: %s", body)
	}
	if resp, _ := get(t, http.MethodPost, h.base+"/healthz", ""); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d", resp.StatusCode)
	}
}

func TestHTTPSSE(t *testing.T) {
	const token = "sse-token-0123456789abcdef"
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Token: token})
	c := mcp.NewClient(&mcp.Implementation{Name: "sse-client", Version: "v0"}, nil)
	if _, err := c.Connect(t.Context(), &mcp.SSEClientTransport{Endpoint: h.base + "/sse"}, nil); err == nil {
		t.Error("an SSE client without the token connected")
	}
	cs, err := c.Connect(t.Context(), &mcp.SSEClientTransport{Endpoint: h.base + "/sse", HTTPClient: httpClient(token)}, nil)
	if err != nil {
		t.Fatalf("SSE Connect: %v", err)
	}
	defer cs.Close()
	listAndCall(t, t.Context(), cs)
}

func TestHTTPDNSRebindingProtection(t *testing.T) {
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0"})
	for _, path := range []string{"/mcp", "/sse"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.base+path, strings.NewReader(`{}`))
		req.Host = "evil.example:80"
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with Host evil.example: status %d, want 403", path, resp.StatusCode)
		}
	}
}

func TestHTTPCrossOriginRefused(t *testing.T) {
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0"})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.base+"/mcp", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST: status %d, want 403", resp.StatusCode)
	}
}

// Shutdown is prompt even with open sessions and their hanging GET streams
// (the streamable client's standalone stream, the SSE session's stream),
// and with a connection that has sent nothing.
func TestHTTPShutdownOnCancel(t *testing.T) {
	srv := newTestMCPServer(t, nil)
	h := startHTTP(t, srv, HTTPOptions{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second})
	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", "")
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	listAndCall(t, t.Context(), cs)
	c := mcp.NewClient(&mcp.Implementation{Name: "sse-client", Version: "v0"}, nil)
	sse, err := c.Connect(t.Context(), &mcp.SSEClientTransport{Endpoint: h.base + "/sse"}, nil)
	if err != nil {
		t.Fatalf("SSE Connect: %v", err)
	}
	defer sse.Close()
	// A connection that never sends a request: Shutdown alone would wait
	// 5 s for it.
	raw, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	time.Sleep(100 * time.Millisecond) // let the standalone GET stream open

	took, err := h.stop()
	if err != nil {
		t.Errorf("ServeHTTP after cancel: %v, want nil", err)
	}
	if took > 2*time.Second {
		t.Errorf("shutdown took %s", took)
	}
	for ss := range srv.Sessions() {
		t.Errorf("session %q still open after shutdown", ss.ID())
	}
	if _, err := http.Get(h.base + "/healthz"); err == nil {
		t.Error("the server still answers after shutdown")
	}
}

// A call in flight past the shutdown budget makes ServeHTTP return an
// error, still promptly.
func TestHTTPShutdownBudgetExceeded(t *testing.T) {
	cancelled := make(chan error, 1)
	h := startHTTP(t, newTestMCPServer(t, cancelled), HTTPOptions{Addr: "127.0.0.1:0", ShutdownTimeout: 300 * time.Millisecond})
	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", "")
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	callCtx, cancelCall := context.WithCancel(t.Context())
	defer cancelCall()
	go cs.CallTool(callCtx, &mcp.CallToolParams{Name: "block", Arguments: map[string]any{}})
	time.Sleep(200 * time.Millisecond)
	took, err := h.stop()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ServeHTTP with a call in flight past the budget: %v, want a deadline error", err)
	}
	if took > 3*time.Second {
		t.Errorf("shutdown took %s", took)
	}
}

// The client's cancellation reaches the call in flight: sessions are
// stateful.
func TestHTTPClientCancelsCall(t *testing.T) {
	cancelled := make(chan error, 1)
	h := startHTTP(t, newTestMCPServer(t, cancelled), HTTPOptions{Addr: "127.0.0.1:0"})
	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", "")
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	callCtx, cancelCall := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "block", Arguments: map[string]any{}})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancelCall()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's handler was not cancelled by the client's cancellation")
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("CallTool: %v", err)
	}
}

func TestHTTPBadToken(t *testing.T) {
	err := ServeHTTP(t.Context(), newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Token: "has space"}, zerolog.Nop())
	if err == nil {
		t.Error("a token with a space was accepted")
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:0", true},
		{"localhost:0", true},
		{"[::1]:0", true},
		{":0", false},
		{"0.0.0.0:0", false},
		{"[::]:0", false},
	} {
		ln, err := net.Listen("tcp", c.addr)
		if err != nil {
			t.Logf("skipping %s: %v", c.addr, err)
			continue
		}
		if got := isLoopbackAddr(ln.Addr()); got != c.want {
			t.Errorf("isLoopbackAddr(%s bound as %s) = %v, want %v", c.addr, ln.Addr(), got, c.want)
		}
		ln.Close()
	}
	for _, c := range []struct {
		addr string
		want bool
	}{
		{"127.1.2.3:80", true},
		{"10.0.0.1:80", false},
		{"[::ffff:127.0.0.1]:80", true},
	} {
		a, _ := net.ResolveTCPAddr("tcp", c.addr)
		if got := isLoopbackAddr(a); got != c.want {
			t.Errorf("isLoopbackAddr(%s) = %v, want %v", c.addr, got, c.want)
		}
	}
}

// A body over the limit is refused with 413, naming the setting, before it
// is read: a declared length at once, a chunked one at the limit.
func TestHTTPRequestLimit(t *testing.T) {
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0",
		MaxRequest: RequestLimit{Bytes: 64 << 10, Setting: "sandbox.max_request_bytes"}})
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"` + strings.Repeat("x", 64<<10) + `"}}`
	for _, path := range []string{"/mcp", "/sse"} {
		for _, chunked := range []bool{false, true} {
			var r io.Reader = strings.NewReader(body)
			if chunked {
				r = io.MultiReader(r) // no length known: sent chunked
			}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.base+path, r)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if path == "/sse" && chunked {
				// The SSE transport needs its session first: the limit is
				// checked before that only when the length is declared.
				continue
			}
			want := "over the limit of 65536 bytes (sandbox.max_request_bytes)"
			if chunked {
				want = "exceeds 65536 bytes"
			}
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), want) {
				t.Errorf("%s (chunked %v): %d %q, want 413 saying %q", path, chunked, resp.StatusCode, msg, want)
			}
		}
	}
}

// /metrics is behind the token of /mcp, GET only; without a handler it is
// not there. ServeMetrics on an address of its own asks the same.
func TestHTTPMetricsBehindToken(t *testing.T) {
	const token = "metrics-secret-token-0123456789"
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "bridge_up 1\n") })
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Token: token, Metrics: metrics})
	if resp, _ := get(t, http.MethodGet, h.base+"/metrics", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the token: %d, want 401", resp.StatusCode)
	}
	if resp, body := get(t, http.MethodGet, h.base+"/metrics", "Bearer "+token); resp.StatusCode != http.StatusOK || body != "bridge_up 1\n" {
		t.Errorf("GET /metrics with the token: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, http.MethodPost, h.base+"/metrics", "Bearer "+token); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
	bare := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0"})
	if resp, _ := get(t, http.MethodGet, bare.base+"/metrics", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics without a handler: %d, want 404", resp.StatusCode)
	}

	ready := make(chan net.Addr, 1)
	if err := ServeMetrics(t.Context(), metrics, MetricsOptions{Addr: "127.0.0.1:0", Token: token, Ready: func(a net.Addr) { ready <- a }}, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + (<-ready).String()
	if resp, _ := get(t, http.MethodGet, base+"/metrics", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("--metrics-addr without the token: %d, want 401", resp.StatusCode)
	}
	if resp, body := get(t, http.MethodGet, base+"/metrics", "Bearer "+token); resp.StatusCode != http.StatusOK || body != "bridge_up 1\n" {
		t.Errorf("--metrics-addr with the token: %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, http.MethodGet, base+"/mcp", "Bearer "+token); resp.StatusCode != http.StatusNotFound {
		t.Errorf("--metrics-addr serves /mcp: %d", resp.StatusCode)
	}
}
