package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The HTTP doors of issue 33, tried as an attacker would against the real
// binary, with the warm pool on: a DNS rebinding page (a foreign Host on
// loopback) reaches no endpoint of `serve --http`, `proxy --http`,
// --metrics-addr or --debug-addr; a client that opens thousands of idle
// MCP sessions is refused past the caps, with an error that says what to
// do, while the sessions open go on running code, and the server's
// resident memory stays bounded.

// doorsPolicy writes a policy with the warm pool on (size 1) and extra
// sections, and returns its path.
func doorsPolicy(t *testing.T, e *engine, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\n" + sandboxSection(e) + "pool:\n  size: 1\n  max: 1\n" + extra
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startDoorsProxy runs `bridge proxy --http 127.0.0.1:0` on config with
// extra flags, and returns its address and pid.
func startDoorsProxy(t *testing.T, config string, extra ...string) (string, int) {
	t.Helper()
	addr, _, pid := startProxyEnv(t, config, []string{"BRIDGE_LOG_LEVEL=info", "XDG_CONFIG_HOME=" + filepath.Join(filepath.Dir(testSuite.bridgeBin), "xdg-config")}, extra...)
	return addr, pid
}

// hostStatus GETs url with the Host header host and returns the status.
func hostStatus(t *testing.T, url, host string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", url, host, err)
	}
	resp.Body.Close() // an SSE stream ends here
	return resp.StatusCode
}

// checkDoors asks every path of addr with a rebinding page's Host (403
// wanted) and with the address itself and localhost as Host (anything but
// 403: 200 for what only reads).
func checkDoors(t *testing.T, what string, addr string, paths ...string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	for _, path := range paths {
		url := "http://" + addr + path
		for _, host := range []string{"rebind.evil.example", "rebind.evil.example:" + port, "127.0.0.1.nip.io:" + port} {
			if code := hostStatus(t, url, host); code != http.StatusForbidden {
				t.Errorf("%s: GET %s with Host %s: %d, want 403", what, path, host, code)
			}
		}
		for _, host := range []string{addr, "localhost:" + port} {
			code := hostStatus(t, url, host)
			// What only reads answers 200; /mcp and /sse want more than a
			// GET, /readyz may be 503, and an unknown path is 404.
			reads := path == "/metrics" || path == "/healthz" || strings.HasPrefix(path, "/debug/")
			if code == http.StatusForbidden || (reads && code != http.StatusOK) {
				t.Errorf("%s: GET %s with Host %s: %d, want it answered", what, path, host, code)
			}
		}
	}
}

// A foreign Host on loopback (a DNS rebinding page) is refused on every
// endpoint: serve --http (with --metrics-addr and --debug-addr) and proxy
// --http (with --metrics-addr); the bridge still runs code for a client
// that names it properly.
func TestDoorsHTTPForeignHost(t *testing.T) {
	forEngines(t, aboveEngine("the HTTP transport's host check"), func(t *testing.T, e *engine) {
		metricsAddr, debugAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
		cs, _, addr := connectHTTPArgs(t, e, nil, "--policy", doorsPolicy(t, e, ""),
			"--metrics-addr", metricsAddr, "--debug-addr", debugAddr)
		if out, _ := runCode(t, cs, "print(6 * 7)"); out != "42\n" {
			t.Fatalf("run: %q", out)
		}
		checkDoors(t, "serve --http", addr, "/mcp", "/sse", "/metrics", "/healthz", "/readyz", "/no-such-path")
		checkDoors(t, "serve --metrics-addr", metricsAddr, "/metrics")
		checkDoors(t, "serve --debug-addr", debugAddr, "/debug/stats", "/debug/pprof/heap")

		proxyMetrics := freeLoopbackAddr(t)
		proxyAddr, _ := startDoorsProxy(t, misbehaveServers(t), "--metrics-addr", proxyMetrics)
		checkDoors(t, "proxy --http", proxyAddr, "/mcp", "/sse", "/metrics", "/healthz", "/readyz")
		checkDoors(t, "proxy --metrics-addr", proxyMetrics, "/metrics")
	})
}

// openRawSession POSTs an initialize to url, as a client that opens a
// session and never uses it, and returns the status, the session's id and
// the body.
func openRawSession(c *http.Client, url string, id int) (int, string, string, error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`, id)
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b), nil
}

// flood is what a flood of n new sessions got.
type flood struct {
	accepted, refused int
	other             map[int]int // status: count
	refusal           string      // the body of the first refusal
	took              time.Duration
}

// floodSessions opens n sessions at url, one after another (a bound of a
// few seconds for thousands on loopback), and sorts what came back:
// 200 accepted, refusedStatus refused (whose body must be the JSON-RPC
// error with the initialize's id).
func floodSessions(t *testing.T, url string, n, refusedStatus int) flood {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	f := flood{other: map[int]int{}}
	start := time.Now()
	for i := range n {
		code, sid, body, err := openRawSession(c, url, 1000+i)
		if err != nil {
			t.Fatalf("session %d of the flood: %v", i+1, err)
		}
		switch {
		case code == http.StatusOK && sid != "":
			f.accepted++
		case code == refusedStatus:
			f.refused++
			if f.refusal == "" {
				f.refusal = body
			}
			var e struct {
				ID    int `json:"id"`
				Error struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.ID != 1000+i || e.Error.Code != -32001 {
				t.Fatalf("refusal of session %d: %q", i+1, body)
			}
		default:
			f.other[code]++
		}
	}
	f.took = time.Since(start)
	return f
}

// runWhile runs code in cs, again and again, until stop is closed; it
// returns how many runs ended ok printing want, and the first failure.
func runWhile(cs *mcp.ClientSession, code, want string, stop <-chan struct{}) (ok int, failure string) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": code}})
		cancel()
		switch {
		case err != nil:
			return ok, err.Error()
		case res.IsError || !strings.Contains(contentText(res), want):
			return ok, contentText(res)
		}
		ok++
		select {
		case <-stop:
			return ok, ""
		default:
		}
	}
}

// metricValue reads one sample of a /metrics answer ("" when absent).
func metricValue(t *testing.T, addr, sample string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			return v
		}
	}
	return ""
}

// warmUpBytes is what the first sessions of a flood may add to a server's
// resident memory whatever their number: its heap grows from its small
// start (measured: 12 MB for 99 sessions, 36 MB for 999).
const warmUpBytes = 24 << 20

// sessionCapCase is one server flooded with sessions.
type sessionCapCase struct {
	name           string
	url            string // its /mcp
	metrics        string // its metrics address
	pid            int
	cs             *mcp.ClientSession // a session open before the flood, that runs code
	code, want     string             // what it runs during the flood, and prints
	cap            int                // sessions the flood gets: the cap less those already open
	refusedStatus  int
	limit, reason  string // the key the refusal names; its label in the metrics
	floodN         int
	maxPerSession  int64 // bytes of resident memory a session may cost
	maxPastTheCapB int64 // bytes the refused part of the flood may add
}

// flood floods c's server while c.cs runs code, and checks the refusals,
// the runs and the resident memory, which it logs.
func (c sessionCapCase) flood(t *testing.T) {
	t.Helper()
	if out, _ := runCode(t, c.cs, "print('before')"); out != "before\n" {
		t.Fatalf("run before the flood: %q", out)
	}
	rss0 := vmRSS(c.pid)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var runsOK int
	var failure string
	wg.Go(func() { runsOK, failure = runWhile(c.cs, c.code, c.want, stop) })
	first := floodSessions(t, c.url, c.cap, c.refusedStatus)
	rss1 := vmRSS(c.pid)
	rest := floodSessions(t, c.url, c.floodN-c.cap, c.refusedStatus)
	rss2 := vmRSS(c.pid)
	close(stop)
	wg.Wait()
	t.Logf("%s: %d sessions opened in %s (RSS %.1f → %.1f MB); %d more refused in %s (RSS → %.1f MB); %d runs ok meanwhile",
		c.name, first.accepted, first.took.Round(time.Millisecond), mb(rss0), mb(rss1),
		rest.refused, rest.took.Round(time.Millisecond), mb(rss2), runsOK)
	if first.accepted != c.cap || first.refused != 0 || len(first.other) != 0 {
		t.Errorf("%s: up to the cap: %d accepted, %d refused, others %v; want %d accepted", c.name, first.accepted, first.refused, first.other, c.cap)
	}
	if rest.accepted != 0 || rest.refused != c.floodN-c.cap || len(rest.other) != 0 {
		t.Errorf("%s: past the cap: %d accepted, %d refused, others %v; want all %d refused with %d", c.name, rest.accepted, rest.refused, rest.other, c.floodN-c.cap, c.refusedStatus)
	}
	if !strings.Contains(rest.refusal, "DELETE /mcp") || !strings.Contains(rest.refusal, c.limit+";") && !strings.Contains(rest.refusal, c.limit+")") {
		t.Errorf("%s: the refusal does not say what to do: %s", c.name, rest.refusal)
	}
	if failure != "" || runsOK == 0 {
		t.Errorf("%s: the session open before the flood, running code during it: %d runs ok, failure %q", c.name, runsOK, failure)
	}
	if out, _ := runCode(t, c.cs, "print('after')"); out != "after\n" {
		t.Errorf("%s: run after the flood: %q", c.name, out)
	}
	// The first sessions cost the most (the heap grows from its small
	// start): a fixed allowance, then a bound a session.
	if grew, bound := rss1-rss0, warmUpBytes+int64(c.cap)*c.maxPerSession; grew > bound {
		t.Errorf("%s: %d sessions grew RSS by %.1f MB, more than %.0f MB (%.0f MB, then %d KB a session)",
			c.name, c.cap, mb(grew), mb(bound), mb(warmUpBytes), c.maxPerSession>>10)
	}
	if grew := rss2 - rss1; grew > c.maxPastTheCapB {
		t.Errorf("%s: %d refused sessions grew RSS by %.1f MB (bound %.0f MB): a refusal must hold nothing", c.name, rest.refused, mb(grew), mb(c.maxPastTheCapB))
	}
	if v := metricValue(t, c.metrics, `bridge_http_sessions_refused_total{reason="`+c.reason+`"}`); v != fmt.Sprint(rest.refused) {
		t.Errorf("%s: bridge_http_sessions_refused_total{reason=%q} = %q, want %d", c.name, c.reason, v, rest.refused)
	}
}

// A client that opens thousands of idle sessions: `serve --http` with
// http.max_sessions 1000 (as many per client: on loopback every client is
// one) takes 1000 and refuses the rest with 503; `proxy --http` with the
// defaults (100 a client) takes 100 and refuses the rest with 429. In
// both, the session open before the flood runs code all along (through
// the proxy, a tool call), and the server's resident memory stays bounded:
// a few KB a session, nothing for a refusal.
func TestDoorsHTTPSessionCap(t *testing.T) {
	scope := aboveEngine("the HTTP transports' session caps")
	runsOn(t, scope)
	const floodN = 6000
	forEngines(t, scope, func(t *testing.T, e *engine) {
		t.Run("serve", func(t *testing.T) {
			pol := doorsPolicy(t, e, "http:\n  max_sessions: 1000\n  max_sessions_per_client: 1000\n")
			cs, pid, addr := connectHTTPArgs(t, e, nil, "--policy", pol)
			sessionCapCase{name: "serve --http", url: "http://" + addr + "/mcp", metrics: addr, pid: pid, cs: cs,
				code: "print(sum(range(10**6)))", want: "499999500000",
				// The test's own client speaks 2026-07-28: stateless, it holds
				// none of the 1000 MCP sessions.
				cap: 1000, refusedStatus: http.StatusServiceUnavailable, limit: "http.max_sessions", reason: "bridge_cap", floodN: floodN,
				maxPerSession: 32 << 10, maxPastTheCapB: 16 << 20}.flood(t)
		})
		t.Run("proxy", func(t *testing.T) {
			proxyAddr, proxyPID := startDoorsProxy(t, misbehaveServers(t))
			// The bridge's own session with the proxy (2025-11-25: the
			// proxy link keeps one) opens at its first tool call, before the
			// flood.
			cs, _, _ := connectStdioArgs(t, e, nil, "--proxy-url", "http://"+proxyAddr+"/mcp", "--policy", doorsPolicy(t, e, ""))
			if out, _ := runCode(t, cs, "import mcp_tools\nprint(mcp_tools.call('misbehave', 'echo', message='hi')['message'])"); out != "hi\n" {
				t.Fatalf("a tool call through the proxy: %q", out)
			}
			c := sessionCapCase{name: "proxy --http", url: "http://" + proxyAddr + "/mcp", metrics: proxyAddr, pid: proxyPID, cs: cs,
				code: "import mcp_tools\nprint(mcp_tools.call('misbehave', 'echo', message='during')['message'])", want: "during",
				cap: 99, refusedStatus: http.StatusTooManyRequests, limit: "http.max_sessions_per_client", reason: "client_cap", floodN: floodN,
				maxPerSession: 32 << 10, maxPastTheCapB: 16 << 20}
			c.flood(t)
			out, _ := runCode(t, cs, "import mcp_tools\nprint(mcp_tools.call('misbehave', 'echo', message='still')['message'])")
			if out != "still\n" {
				t.Errorf("a tool call through the proxy after the flood: %q", out)
			}
		})
	})
}
