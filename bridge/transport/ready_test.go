package transport

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type readyBody struct {
	Status string  `json:"status"`
	Detail string  `json:"detail"`
	Checks []Check `json:"checks"`
}

func getReadyz(t *testing.T, base, auth string) (int, readyBody) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b readyBody
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatalf("/readyz body: %v", err)
	}
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("/readyz Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
	return resp.StatusCode, b
}

// /readyz: 200 when every check is OK; 503 naming what is wrong (the
// detail only with the token); 503 "draining" once the drain started,
// without asking the checks.
func TestHTTPReadyz(t *testing.T) {
	const token = "readyz-token-0123456789abcdef"
	var ok atomic.Bool
	ok.Store(true)
	var asked atomic.Int32
	d := NewDrain()
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Token: token, Drain: d,
		Readiness: func(context.Context) []Check {
			asked.Add(1)
			if ok.Load() {
				return []Check{{Name: "engine", OK: true, State: "ready"}}
			}
			return []Check{{Name: "engine", OK: true, State: "ready"}, {Name: "pool", State: "failing", Detail: "no space left in /var/lib/docker"}}
		}})

	code, b := getReadyz(t, h.base, "")
	if code != http.StatusOK || b.Status != "ready" || len(b.Checks) != 1 {
		t.Fatalf("ready: %d %+v", code, b)
	}
	ok.Store(false)
	code, b = getReadyz(t, h.base, "")
	if code != http.StatusServiceUnavailable || b.Status != "not ready" || len(b.Checks) != 2 || b.Checks[1].State != "failing" {
		t.Fatalf("not ready: %d %+v", code, b)
	}
	if b.Checks[1].Detail != "" {
		t.Errorf("the detail is shown without the token: %+v", b.Checks[1])
	}
	_, b = getReadyz(t, h.base, "Bearer "+token)
	if !strings.Contains(b.Checks[1].Detail, "no space left") {
		t.Errorf("the detail is not shown with the token: %+v", b.Checks[1])
	}

	n := asked.Load()
	d.Start()
	code, b = getReadyz(t, h.base, "")
	if code != http.StatusServiceUnavailable || b.Status != "draining" || !strings.Contains(b.Detail, "shutting down") {
		t.Fatalf("draining: %d %+v", code, b)
	}
	if asked.Load() != n {
		t.Error("the checks were asked while draining")
	}
}

// Without Readiness, /readyz is 200 until the drain.
func TestHTTPReadyzWithoutChecks(t *testing.T) {
	d := NewDrain()
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Drain: d})
	if code, b := getReadyz(t, h.base, ""); code != http.StatusOK || b.Status != "ready" {
		t.Fatalf("%d %+v", code, b)
	}
	d.Start()
	if code, _ := getReadyz(t, h.base, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("draining: %d", code)
	}
}

// Draining, a request for a new session gets 503 with Retry-After and a
// message; the session that exists goes on being served, and the call
// in flight finishes.
func TestHTTPDrainRefusesNewSessions(t *testing.T) {
	d := NewDrain()
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Drain: d})
	cs, err := connectStreamable(t, t.Context(), h.base+"/mcp", "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// A call in flight when the drain starts.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = cs.CallTool(ctx, &mcp.CallToolParams{Name: "block"})
	}()
	deadline := time.Now().Add(2 * time.Second)
	for d.InFlight() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call in flight is not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.Start()

	resp, body := get(t, http.MethodPost, h.base+"/mcp", "")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "draining") {
		t.Errorf("a new session while draining: %d, Retry-After %q, %q", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, _ := get(t, http.MethodGet, h.base+"/sse", ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a new SSE session while draining: %d", resp.StatusCode)
	}
	if _, err := connectStreamable(t, t.Context(), h.base+"/mcp", ""); err == nil {
		t.Error("a client opened a session while draining")
	}
	listAndCall(t, t.Context(), cs) // the session that exists

	qctx, qcancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer qcancel()
	if err := d.Quiet(qctx, 10*time.Millisecond); err == nil {
		t.Error("Quiet with a call in flight")
	}
	cancel()
	wg.Wait()
	qctx, qcancel = context.WithTimeout(t.Context(), 2*time.Second)
	defer qcancel()
	if err := d.Quiet(qctx, 50*time.Millisecond); err != nil {
		t.Errorf("not quiet once the call ended: %v (%d in flight)", err, d.InFlight())
	}
}

// CachedCheck calls its check once per ttl, once for concurrent callers,
// and does not keep an answer its caller's ctx cut short.
func TestCachedCheck(t *testing.T) {
	var calls atomic.Int32
	gate := make(chan struct{})
	c := CachedCheck("engine", 100*time.Millisecond, func(ctx context.Context) Check {
		calls.Add(1)
		select {
		case <-gate:
		case <-ctx.Done():
			return Check{State: "not answering"}
		}
		return Check{OK: true, State: "ready"}
	})
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := c(context.Background()); !got.OK || got.Name != "engine" {
				t.Errorf("got %+v", got)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("5 concurrent callers made %d calls, want 1", n)
	}
	c(context.Background())
	if n := calls.Load(); n != 1 {
		t.Fatalf("a caller within ttl made a call (%d)", n)
	}
	time.Sleep(120 * time.Millisecond)
	c(context.Background())
	if n := calls.Load(); n != 2 {
		t.Fatalf("after ttl: %d calls, want 2", n)
	}

	// A call cut short by its ctx is not kept.
	var slow atomic.Int32
	block := make(chan struct{})
	defer close(block)
	c2 := CachedCheck("x", time.Hour, func(ctx context.Context) Check {
		slow.Add(1)
		select {
		case <-block:
		case <-ctx.Done():
		}
		return Check{State: "not answering"}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	c2(ctx)
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	c2(ctx)
	cancel()
	if n := slow.Load(); n != 2 {
		t.Fatalf("an answer cut short was kept: %d calls, want 2", n)
	}
}
