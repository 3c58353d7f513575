package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// initBody is an initialize request, as a client opens a session with.
func initBody(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`, id)
}

// rawPost POSTs body to url (a session's when sid is set) and returns the
// answer's status, Mcp-Session-Id and body.
func rawPost(t *testing.T, url, sid, body string) (int, string, string, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b), resp.Header
}

// tooMany is the JSON-RPC error of a refused session.
type tooMany struct {
	ID    json.RawMessage `json:"id"`
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Reason string `json:"reason"`
			Limit  int    `json:"limit"`
		} `json:"data"`
	} `json:"error"`
}

// Past the bridge's cap a new session is refused with 503, Retry-After and
// a JSON-RPC error that answers the initialize's id and says what to do;
// the sessions open go on working; a session deleted by its client makes
// room.
func TestHTTPSessionsBridgeCap(t *testing.T) {
	const max = 8
	sessions := NewSessions(func() SessionLimits { return SessionLimits{Max: max, MaxPerClient: max} })
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Sessions: sessions})
	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var ids []string
	for i := range max - 1 {
		code, sid, body, _ := rawPost(t, h.base+"/mcp", "", initBody(i))
		if code != http.StatusOK || sid == "" {
			t.Fatalf("session %d of %d: %d %q", i+2, max, code, body)
		}
		ids = append(ids, sid)
	}
	for i := range 3 {
		code, sid, body, hdr := rawPost(t, h.base+"/mcp", "", initBody(100+i))
		var e tooMany
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatalf("refusal %q: %v", body, err)
		}
		if code != http.StatusServiceUnavailable || sid != "" || hdr.Get("Retry-After") == "" {
			t.Errorf("session past the cap: %d, session %q, Retry-After %q", code, sid, hdr.Get("Retry-After"))
		}
		if string(e.ID) != fmt.Sprint(100+i) || e.Error.Code != CodeTooManySessions || e.Error.Data.Reason != RefusedBridgeCap ||
			e.Error.Data.Limit != max || !strings.Contains(e.Error.Message, "http.max_sessions") || !strings.Contains(e.Error.Message, "DELETE /mcp") {
			t.Errorf("refusal: %s", body)
		}
	}
	st := sessions.Stats()
	if st.Open != max || st.Refused[RefusedBridgeCap] != 3 || st.Max != max {
		t.Errorf("stats %+v", st)
	}
	if _, err := connectStreamable(t, t.Context(), h.base+"/mcp", ""); err == nil || !strings.Contains(err.Error(), "Service Unavailable") {
		t.Errorf("an SDK client past the cap: %v", err)
	}
	listAndCall(t, t.Context(), cs) // the sessions open still work
	if !strings.Contains(h.log.String(), "refusing new sessions at the cap") {
		t.Errorf("the refusals are not logged:\n%s", h.log.String())
	}

	deleteSession(t, h.base+"/mcp", ids[0])
	if code, sid, body, _ := rawPost(t, h.base+"/mcp", "", initBody(7)); code != http.StatusOK || sid == "" {
		t.Errorf("a session after one was deleted: %d %q", code, body)
	}
	if !strings.Contains(h.log.String(), "taking new sessions again") {
		t.Errorf("the end of the refusals is not logged:\n%s", h.log.String())
	}
}

func deleteSession(t *testing.T, url, sid string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE session: %d", resp.StatusCode)
	}
}

// A request that opens no session (a first POST that is not an
// initialize: the SDK closes the session it made at once) holds no room.
func TestHTTPSessionsNotInitializeHoldsNoRoom(t *testing.T) {
	sessions := NewSessions(func() SessionLimits { return SessionLimits{Max: 2, MaxPerClient: 2} })
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Sessions: sessions})
	for i := range 5 {
		rawPost(t, h.base+"/mcp", "", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, i))
	}
	for i := range 2 {
		if code, _, body, _ := rawPost(t, h.base+"/mcp", "", initBody(i)); code != http.StatusOK {
			t.Fatalf("session %d after 5 requests that opened none: %d %q", i+1, code, body)
		}
	}
	if code, _, _, _ := rawPost(t, h.base+"/mcp", "", initBody(3)); code != http.StatusServiceUnavailable {
		t.Errorf("a third session: %d, want 503", code)
	}
}

// Legacy SSE sessions count too, while their stream lasts.
func TestHTTPSessionsSSECounted(t *testing.T) {
	sessions := NewSessions(func() SessionLimits { return SessionLimits{Max: 1} })
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Sessions: sessions})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sse: %v %v", resp, err)
	}
	if code, _, _, _ := rawPost(t, h.base+"/mcp", "", initBody(1)); code != http.StatusServiceUnavailable {
		t.Errorf("a streamable session beside an SSE one, max 1: %d, want 503", code)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the SSE session to be forgotten", func() bool { open, _ := sessions.count(); return open == 0 })
	if code, _, body, _ := rawPost(t, h.base+"/mcp", "", initBody(2)); code != http.StatusOK {
		t.Errorf("a session once the SSE one ended: %d %q", code, body)
	}
}

// waitFor polls cond until it holds, or fails after 10 s (a bound far
// above what it takes: a few milliseconds).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An idle session is closed for real: its client's next request gets 404
// (the SDK's "session not found"), and the closing is counted.
func TestHTTPSessionsIdleClosed(t *testing.T) {
	sessions := NewSessions(func() SessionLimits {
		return SessionLimits{Max: 100, IdleTimeout: 300 * time.Millisecond, MinIdle: 300 * time.Millisecond}
	})
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Sessions: sessions})
	_, sid, _, _ := rawPost(t, h.base+"/mcp", "", initBody(1))
	if sid == "" {
		t.Fatal("no session")
	}
	waitFor(t, "the idle session to be closed", func() bool { return sessions.Stats().Closed[ClosedIdle] == 1 })
	if code, _, body, _ := rawPost(t, h.base+"/mcp", sid, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); code != http.StatusNotFound {
		t.Errorf("a request of the closed session: %d %q, want 404", code, body)
	}
	if open, _ := sessions.count(); open != 0 {
		t.Errorf("%d sessions still counted", open)
	}
}

// fakeStreamable stands for the SDK's handler: a POST without a session
// opens one, named in the answer's header.
type fakeStreamable struct {
	mu sync.Mutex
	n  int
}

func (f *fakeStreamable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
		f.mu.Lock()
		f.n++
		w.Header().Set("Mcp-Session-Id", fmt.Sprint("s", f.n))
		f.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

// clock is a fake time for Sessions.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// open asks h for a session from remote, and returns the status and the
// session's id.
func open(h http.Handler, remote string) (int, string) {
	r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody(1)))
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Header().Get("Mcp-Session-Id")
}

// request makes a request of session sid from remote through h.
func request(h http.Handler, remote, sid string) {
	r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
	r.RemoteAddr = remote
	r.Header.Set("Mcp-Session-Id", sid)
	h.ServeHTTP(httptest.NewRecorder(), r)
}

func newTestSessions(l SessionLimits) (*Sessions, *clock, http.Handler) {
	c := &clock{t: time.Unix(1e9, 0)}
	s := NewSessions(func() SessionLimits { return l })
	s.now = c.now
	return s, c, s.streamable(&fakeStreamable{})
}

// One client may hold MaxPerClient sessions (429 past that), another
// client still gets its own; every loopback address is one client, and an
// IPv6 /64 is one.
func TestSessionsPerClient(t *testing.T) {
	_, _, h := newTestSessions(SessionLimits{Max: 100, MaxPerClient: 3})
	for _, group := range [][]string{
		{"192.0.2.1:1000", "192.0.2.1:1001", "192.0.2.1:1002", "192.0.2.1:1003"},
		{"127.0.0.1:1", "127.0.0.2:1", "[::1]:1", "127.9.9.9:2"},
		{"[2001:db8::1]:1", "[2001:db8::2]:1", "[2001:db8::ffff:1]:1", "[2001:db8::3]:1"},
	} {
		for i, remote := range group {
			code, _ := open(h, remote)
			want := http.StatusOK
			if i == 3 {
				want = http.StatusTooManyRequests
			}
			if code != want {
				t.Errorf("session %d from %s: %d, want %d", i+1, remote, code, want)
			}
		}
	}
	if code, _ := open(h, "192.0.2.2:1000"); code != http.StatusOK {
		t.Errorf("another client's session: %d, want 200", code)
	}
	if code, _ := open(h, "[2001:db8:0:1::1]:1"); code != http.StatusOK {
		t.Errorf("another /64's session: %d, want 200", code)
	}
}

// The idle timeout is IdleTimeout up to half the cap, then shrinks in
// proportion down to MinIdle at the cap.
func TestSessionLimitsIdleTimeout(t *testing.T) {
	l := SessionLimits{Max: 100, IdleTimeout: 30 * time.Minute, MinIdle: time.Minute}
	for open, want := range map[int]time.Duration{
		0: 30 * time.Minute, 50: 30 * time.Minute, 75: 15*time.Minute + 30*time.Second, 100: time.Minute, 150: time.Minute,
	} {
		if got := l.idleTimeout(open); got != want {
			t.Errorf("idle timeout with %d open: %s, want %s", open, got, want)
		}
	}
	if d := (SessionLimits{}).withDefaults(); d.Max != DefaultMaxSessions || d.MaxPerClient != DefaultMaxSessionsPerClient ||
		d.IdleTimeout != DefaultSessionIdleTimeout || d.MinIdle != DefaultSessionMinIdle {
		t.Errorf("defaults %+v", d)
	}
}

// Under pressure the sessions idle longest are closed first, down to what
// the shrunk timeout allows; below half the cap only IdleTimeout closes.
func TestSessionsSweepUnderPressure(t *testing.T) {
	s, c, h := newTestSessions(SessionLimits{Max: 10, MaxPerClient: 10, IdleTimeout: 100 * time.Minute, MinIdle: time.Minute})
	var ids []string
	for range 8 {
		_, id := open(h, "192.0.2.1:1")
		ids = append(ids, id)
		c.add(time.Minute)
	}
	// Idle now: 8, 7, ..., 1 minutes. With 8 open the timeout is
	// 100 - 3/5*99 = 40.6 min: nothing goes.
	s.sweep()
	if open, _ := s.count(); open != 8 {
		t.Fatalf("%d open after a sweep with none idle long enough", open)
	}
	c.add(37 * time.Minute) // idle 45, 44, ... 38 min
	request(h, "192.0.2.1:1", ids[1])
	s.sweep()
	// 8 open: 40.6 min, the first (45) goes; 7 open: 60.4 min, none more
	// (the second was used just now).
	st := s.Stats()
	if open, _ := s.count(); open != 7 || st.Closed[ClosedPressure] != 1 || st.Closed[ClosedIdle] != 0 {
		t.Errorf("after the sweep: %d open, %+v", open, st)
	}
	c.add(200 * time.Minute)
	s.sweep()
	if open, _ := s.count(); open != 0 || s.Stats().Closed[ClosedIdle] != 7 {
		t.Errorf("after IdleTimeout: %d open, %+v", open, s.Stats())
	}
}

// At the cap a new session takes the place of one idle for MinIdle (the
// longest idle); one with a request in flight, or idle for less, is never
// closed to make room: then the new one is refused, and Retry-After says
// when one will have been idle long enough.
func TestSessionsAtCapEvictsOnlyLongIdle(t *testing.T) {
	s, c, h := newTestSessions(SessionLimits{Max: 3, MaxPerClient: 3, IdleTimeout: time.Hour, MinIdle: time.Minute})
	var ids []string
	for range 3 {
		_, id := open(h, "192.0.2.1:1")
		ids = append(ids, id)
		c.add(time.Second) // an order of idleness: ties are broken at random
	}
	c.add(27 * time.Second) // idle 30, 29 and 28 s
	if no := s.admit("192.0.2.1"); no == nil || no.reason != RefusedBridgeCap || no.retryAfter != 30*time.Second {
		t.Fatalf("at the cap with sessions idle 30 s: %+v", no)
	}
	done := s.begin(mcpKey(ids[0])) // a call in flight
	c.add(time.Hour - time.Second)
	if code, id := open(h, "192.0.2.1:1"); code != http.StatusOK {
		t.Fatalf("at the cap with sessions idle an hour: %d", code)
	} else {
		ids = append(ids, id)
	}
	s.mu.Lock()
	_, busyKept := s.entries[mcpKey(ids[0])]
	_, oldGone := s.entries[mcpKey(ids[1])]
	s.mu.Unlock()
	if !busyKept || oldGone {
		t.Errorf("the busy session kept: %v; the longest idle one kept: %v", busyKept, oldGone)
	}
	done()
	if st := s.Stats(); st.Closed[ClosedPressure] != 1 || st.Open != 3 {
		t.Errorf("stats %+v", st)
	}
}

// rawDelete DELETEs the session sid at url, with the Mcp-Protocol-Version
// version (none when ""), and returns the answer's status.
func rawDelete(t *testing.T, url, sid, version string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodDelete, url, nil)
	req.Header.Set("Mcp-Session-Id", sid)
	if version != "" {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sdkSessions counts the sessions srv holds with an id (the Streamable
// HTTP ones).
func sdkSessions(srv *mcp.Server) int {
	n := 0
	for ss := range srv.Sessions() {
		if ss.ID() != "" {
			n++
		}
	}
	return n
}

// A DELETE the SDK refuses (400 for an unsupported Mcp-Protocol-Version,
// answered before it looks the session up) leaves the session open: it
// stays counted, so the caps still hold; a DELETE the SDK carries out
// (204) makes room.
func TestHTTPSessionsRefusedDeleteStaysCounted(t *testing.T) {
	const max = 4
	sessions := NewSessions(func() SessionLimits { return SessionLimits{Max: max, MaxPerClient: max} })
	srv := newTestMCPServer(t, nil)
	h := startHTTP(t, srv, HTTPOptions{Addr: "127.0.0.1:0", Sessions: sessions})
	var ids []string
	for i := range max {
		code, sid, body, _ := rawPost(t, h.base+"/mcp", "", initBody(i))
		if code != http.StatusOK || sid == "" {
			t.Fatalf("session %d: %d %q", i+1, code, body)
		}
		ids = append(ids, sid)
	}
	for _, sid := range ids {
		if code := rawDelete(t, h.base+"/mcp", sid, "1999-01-01"); code != http.StatusBadRequest {
			t.Fatalf("DELETE with an unsupported protocol version: %d, want 400", code)
		}
	}
	if n := sdkSessions(srv); n != max {
		t.Fatalf("the SDK holds %d sessions after the refused DELETEs, want %d", n, max)
	}
	if open, _ := sessions.count(); open != max {
		t.Errorf("%d sessions counted while the SDK holds %d", open, max)
	}
	if code, _, body, _ := rawPost(t, h.base+"/mcp", "", initBody(10)); code != http.StatusServiceUnavailable {
		t.Errorf("a session past the cap after refused DELETEs: %d %q, want 503", code, body)
	}
	if code := rawDelete(t, h.base+"/mcp", ids[0], "2025-06-18"); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", code)
	}
	if open, _ := sessions.count(); open != max-1 || sdkSessions(srv) != max-1 {
		t.Errorf("after a DELETE: %d counted, the SDK holds %d; want %d", open, sdkSessions(srv), max-1)
	}
	if code, _, body, _ := rawPost(t, h.base+"/mcp", "", initBody(11)); code != http.StatusOK {
		t.Errorf("a session after a DELETE made room: %d %q", code, body)
	}
}

// A session is counted from the moment the answer that names it goes out,
// not when its opening request ends (an SSE answer is read by the client
// before that): a request the client makes in between keeps it busy, so
// the sweep never closes it under that request. Flushing works through the
// bridge's writer as through net/http's.
func TestSessionsCountedFromTheHeader(t *testing.T) {
	s, c, _ := newTestSessions(SessionLimits{Max: 10, MaxPerClient: 10, IdleTimeout: time.Minute, MinIdle: time.Minute})
	sent := make(chan string)
	releaseOpen, releaseCall := make(chan struct{}), make(chan struct{})
	h := s.streamable(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release := releaseCall
		if r.Header.Get("Mcp-Session-Id") == "" {
			w.Header().Set("Mcp-Session-Id", "s1")
			release = releaseOpen
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flushing through the sessions' writer: %v", err)
		}
		sent <- w.Header().Get("Mcp-Session-Id")
		<-release
	}))
	serve := func(sid string) (chan struct{}, *httptest.ResponseRecorder) {
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody(1)))
		r.RemoteAddr = "192.0.2.1:1"
		if sid != "" {
			r.Header.Set("Mcp-Session-Id", sid)
		}
		w, done := httptest.NewRecorder(), make(chan struct{})
		go func() { defer close(done); h.ServeHTTP(w, r) }()
		return done, w
	}
	opening, w := serve("")
	sid := <-sent // the client has the session's id; its opening request goes on
	if !w.Flushed {
		t.Error("the opening answer was not flushed")
	}
	call, _ := serve(sid)
	<-sent // a call of the session, in flight
	close(releaseOpen)
	<-opening
	c.add(2 * time.Hour)
	s.sweep()
	if open, idle := s.count(); open != 1 || idle != 0 || s.Stats().Closed[ClosedIdle] != 0 {
		t.Errorf("with a call in flight, made before the opening request ended: %d open, %d idle, closed %v",
			open, idle, s.Stats().Closed)
	}
	close(releaseCall)
	<-call
	c.add(2 * time.Hour)
	s.sweep()
	if open, _ := s.count(); open != 0 || s.Stats().Closed[ClosedIdle] != 1 {
		t.Errorf("idle for 2 h once its call ended: %d open, closed %v", open, s.Stats().Closed)
	}
}

// stuckServer is an MCP server whose tool "stuck" returns only when
// release is closed, whatever its context says: closing its session waits
// for it.
func stuckServer(started chan<- struct{}, release <-chan struct{}) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "stuck", Description: "wait for the test"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			started <- struct{}{}
			<-release
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
		})
	return srv
}

// While the server closes a session (idle, or to make room), a request of
// that session is answered 404 at once, as the SDK answers one of a closed
// session: it never runs untracked on a session about to be cut off. Once
// closed, the session is forgotten.
func TestHTTPSessionsClosingRefusesRequests(t *testing.T) {
	c := &clock{t: time.Now()}
	sessions := NewSessions(func() SessionLimits {
		return SessionLimits{Max: 100, IdleTimeout: time.Hour, MinIdle: time.Minute}
	})
	sessions.now = c.now
	started, release := make(chan struct{}), make(chan struct{})
	h := startHTTP(t, stuckServer(started, release), HTTPOptions{Addr: "127.0.0.1:0", Sessions: sessions})
	var once sync.Once
	unstick := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstick)
	_, sid, _, _ := rawPost(t, h.base+"/mcp", "", initBody(1))
	if sid == "" {
		t.Fatal("no session")
	}
	rawPost(t, h.base+"/mcp", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A call whose HTTP request its client gives up on: the session is
	// idle to the bridge, its handler still runs, so closing it waits.
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/mcp",
		strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"stuck","arguments":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-started
	cancel()
	waitFor(t, "the call's request to end", func() bool { _, idle := sessions.count(); return idle == 1 })
	c.add(2 * time.Hour)
	swept := make(chan struct{})
	go func() { defer close(swept); sessions.sweep() }()
	waitFor(t, "the sweep to close the session", func() bool { return sessions.Stats().Closed[ClosedIdle] == 1 })
	code, _, body, _ := rawPost(t, h.base+"/mcp", sid, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if code != http.StatusNotFound || !strings.Contains(body, "session not found") {
		t.Errorf("a request of a session being closed: %d %q, want 404 session not found", code, body)
	}
	unstick()
	<-swept
	sessions.mu.Lock()
	closing := len(sessions.closing)
	sessions.mu.Unlock()
	if open, _ := sessions.count(); open != 0 || closing != 0 {
		t.Errorf("once closed: %d open, %d closing", open, closing)
	}
}

// held is how many sessions each client holds.
func held(s *Sessions) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.clients)
}

// A new session takes the place of another only where that makes room
// without squeezing anyone: a client at its own cap never closes another
// client's session (and, refused, closes none); at the bridge's cap the
// session closed is one of the client holding the most, never of a client
// that would hold fewer than the new session's.
func TestSessionsEvictionIsFair(t *testing.T) {
	const a, b, c = "192.0.2.1", "192.0.2.2", "192.0.2.3"
	limits := func(max, perClient int) SessionLimits {
		return SessionLimits{Max: max, MaxPerClient: perClient, IdleTimeout: 24 * time.Hour, MinIdle: time.Minute}
	}
	t.Run("refused at its own cap", func(t *testing.T) {
		s, clk, h := newTestSessions(limits(4, 2))
		open(h, b+":1")
		open(h, b+":1")
		clk.add(time.Hour)
		open(h, a+":1")
		open(h, a+":1") // a at its cap, the bridge at its cap, b's idle an hour
		if code, _ := open(h, a+":1"); code == http.StatusOK {
			t.Errorf("a third session of a client whose cap is 2: %d", code)
		}
		if got := held(s); got[b] != 2 || got[a] != 2 || s.Stats().Closed[ClosedPressure] != 0 {
			t.Errorf("after the refusal: held %v, closed %v; want nobody's session closed", got, s.Stats().Closed)
		}
		clk.add(time.Hour) // now a's own are idle long enough: one of them goes
		if code, _ := open(h, a+":1"); code != http.StatusOK {
			t.Errorf("at its cap with its own sessions idle: %d", code)
		}
		if got := held(s); got[b] != 2 || got[a] != 2 {
			t.Errorf("at its own cap: held %v, want b's untouched", got)
		}
	})
	t.Run("from the client holding the most", func(t *testing.T) {
		s, clk, h := newTestSessions(limits(6, 4))
		open(h, c+":1") // c's only session, idle longest
		clk.add(time.Minute)
		for range 4 {
			open(h, b+":1")
		}
		open(h, a+":1")
		clk.add(time.Hour)
		if code, _ := open(h, a+":1"); code != http.StatusOK {
			t.Fatalf("at the bridge's cap with sessions idle an hour: %d", code)
		}
		if got := held(s); got[c] != 1 || got[b] != 3 || got[a] != 2 {
			t.Errorf("held %v, want one of b's (4) closed, not c's only one", got)
		}
	})
	t.Run("never from a smaller client", func(t *testing.T) {
		s, clk, h := newTestSessions(limits(4, 4))
		open(h, b+":1")
		open(h, b+":1") // b's idle longest
		clk.add(time.Minute)
		open(h, a+":1")
		open(h, a+":1")
		clk.add(time.Hour)
		// a would hold 3, b holds 2: a's own longest idle goes.
		if code, _ := open(h, a+":1"); code != http.StatusOK {
			t.Fatalf("at the bridge's cap with its own sessions idle an hour: %d", code)
		}
		if got := held(s); got[b] != 2 || got[a] != 2 {
			t.Errorf("held %v, want b's 2 untouched", got)
		}
		// c holds none and would hold 1: any of them is bigger.
		if code, _ := open(h, c+":1"); code != http.StatusOK {
			t.Fatalf("a new client at the bridge's cap: %d", code)
		}
		if got := held(s); got[c] != 1 || got[a]+got[b] != 3 {
			t.Errorf("held %v", got)
		}
	})
}

// A refusal answers the request's id only when it is a JSON-RPC id (a
// string or a number) under the exact key "id"; else null.
func TestRefuseEchoesOnlyAnID(t *testing.T) {
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":7,"method":"initialize"}`:           `7`,
		`{"jsonrpc":"2.0","id":-1.5e3,"method":"initialize"}`:      `-1.5e3`,
		`{"jsonrpc":"2.0","id":"a-1","method":"initialize"}`:       `"a-1"`,
		`{"jsonrpc":"2.0","ID":7,"method":"initialize"}`:           `null`,
		`{"jsonrpc":"2.0","Id":"x","method":"initialize"}`:         `null`,
		`{"jsonrpc":"2.0","id":{"a":[1,2]},"method":"initialize"}`: `null`,
		`{"jsonrpc":"2.0","id":[1],"method":"initialize"}`:         `null`,
		`{"jsonrpc":"2.0","id":true,"method":"initialize"}`:        `null`,
		`{"jsonrpc":"2.0","id":null,"method":"initialize"}`:        `null`,
		`[{"jsonrpc":"2.0","id":1,"method":"initialize"}]`:         `null`,
		`not json`: `null`,
	} {
		w := httptest.NewRecorder()
		refuse(w, httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body)),
			&refusal{reason: RefusedBridgeCap, limit: 1, retryAfter: time.Second})
		var e tooMany
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
			t.Fatalf("refusal of %s: %v", body, err)
		}
		if string(e.ID) != want {
			t.Errorf("refusal of %s: id %s, want %s", body, e.ID, want)
		}
	}
}

// Retry-After says when waiting will make room, or is left out when
// waiting will not: a client whose sessions are all legacy SSE streams
// (never closed for being idle) gets none.
func TestSessionsRetryAfterTruthful(t *testing.T) {
	const client = "192.0.2.1"
	s, clk, h := newTestSessions(SessionLimits{Max: 10, MaxPerClient: 2, IdleTimeout: time.Hour, MinIdle: time.Minute})
	refused := func() (int, http.Header, string) {
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(initBody(1)))
		r.RemoteAddr = client + ":1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Header(), w.Body.String()
	}
	for range 2 {
		if no := s.admit(client); no != nil {
			t.Fatal(no)
		}
		s.addSSE(client)
	}
	clk.add(time.Hour)
	code, hdr, body := refused()
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "" || strings.Contains(body, "retry_after_seconds") ||
		!strings.Contains(body, "SSE") {
		t.Errorf("at its cap with SSE sessions only: %d, Retry-After %q, %s", code, hdr.Get("Retry-After"), body)
	}

	s, clk, h = newTestSessions(SessionLimits{Max: 10, MaxPerClient: 2, IdleTimeout: time.Hour, MinIdle: time.Minute})
	if no := s.admit(client); no != nil {
		t.Fatal(no)
	}
	s.addSSE(client)
	open(h, client+":1")
	clk.add(20 * time.Second)
	if code, hdr, body := refused(); code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "40" {
		t.Errorf("at its cap with a session idle 20 s: %d, Retry-After %q, %s", code, hdr.Get("Retry-After"), body)
	}
}
