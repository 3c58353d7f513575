package integration

// A real Prometheus (Debian's package) scrapes a running `bridge serve
// --http` with the configuration and alert rules docs/operations.md shows,
// and what it stored is read back through its HTTP API.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// prometheusBin is Debian's prometheus: a failure in CI when missing.
func prometheusBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if ci() {
			t.Fatalf("prometheus is not on PATH (%v): integration/env/setup.sh installs Debian's prometheus package", err)
		}
		t.Skipf("prometheus is not on PATH (%v): apt-get install prometheus, or run make setup", err)
	}
	return p
}

// promServer is a Prometheus started by a test.
type promServer struct {
	url string
}

// startPrometheus runs Prometheus with docs/examples/prometheus.yml and
// its alert rules, scraping target (host:port of a bridge) every second.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	bin := prometheusBin(t)
	dir := t.TempDir()
	docs := filepath.Join(repoRoot(), "docs", "examples")
	cfg, err := os.ReadFile(filepath.Join(docs, "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join(docs, "bridge-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(cfg)
	for old, repl := range map[string]string{`scrape_interval: 15s`: `scrape_interval: 1s`, `evaluation_interval: 15s`: `evaluation_interval: 1s`,
		`"127.0.0.1:8808"`: strconv.Quote(target)} {
		if !strings.Contains(text, old) {
			t.Fatalf("docs/examples/prometheus.yml no longer has %s, which the test replaces", old)
		}
		text = strings.ReplaceAll(text, old, repl)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bridge-alerts.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs)
		}
	})
	p := &promServer{url: "http://" + addr}
	waitFor(t, 30*time.Second, "prometheus to be ready", func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// api GETs path (with query q) from Prometheus's HTTP API into out (its
// "data").
func (p *promServer) api(t *testing.T, path string, q url.Values, out any) {
	t.Helper()
	resp, err := http.Get(p.url + path + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
		t.Fatalf("prometheus %s %v: %s (%v)", path, q, body, err)
	}
	if err := json.Unmarshal(r.Data, out); err != nil {
		t.Fatalf("prometheus %s: %v in %s", path, err, r.Data)
	}
}

// value is the single value of an instant query, -1 when it has none.
func (p *promServer) value(t *testing.T, query string) float64 {
	t.Helper()
	var d struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	p.api(t, "/api/v1/query", url.Values{"query": {query}}, &d)
	if len(d.Result) == 0 {
		return -1
	}
	if len(d.Result) > 1 {
		t.Fatalf("%s has %d series, want one", query, len(d.Result))
	}
	v, err := strconv.ParseFloat(d.Result[0].Value[1].(string), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// await waits until every query has its value in Prometheus (scraped every
// second), and fails with the values it last had.
func (p *promServer) await(t *testing.T, want map[string]float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]float64{}
		ok := true
		for q, v := range want {
			got[q] = p.value(t, q)
			ok = ok && got[q] == v
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for q, v := range want {
				if got[q] != v {
					t.Errorf("%s = %v, want %v", q, got[q], v)
				}
			}
			t.FailNow()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestMetricsPrometheus: runs, tool calls by decision, asks and budget
// cut-offs are counted with the right numbers as a real Prometheus stored
// them; its alert rules load and are healthy; and 1,000 runs in sessions of
// random names leave the label set as it was (no name is a label value).
func TestMetricsPrometheus(t *testing.T) {
	scope := aboveEngine("the metrics, their alert rules and dashboard")
	runsOn(t, scope)
	if rootless() {
		t.Skip("metrics do not depend on the engine's mode; TestMetricsPrometheus runs in the rootful pass")
	}
	var labelsOnce atomic.Bool
	forEngines(t, scope, func(t *testing.T, e *engine) {
		npm := npmPeers(t)
		servers := filepath.Join(t.TempDir(), "servers.json")
		writeServers(t, servers, map[string]any{
			"everything": map[string]any{"command": "node", "args": []string{filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
		})
		pol := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(pol, []byte("version: 1\n"+sandboxSection(e)+`  max_concurrent: 8
  queue: 64
pool:
  size: 4
sessions:
  enabled: true
  max: 16
  max_calls: 2
tools:
  rules:
    - {server: everything, tool: get-env, action: deny, reason: "no environment"}
    - {server: everything, tool: get-sum, action: ask, reason: "sums need a human"}
  ask_timeout: 10s
budgets:
  max_argument_bytes: 1Ki
`), 0o644); err != nil {
			t.Fatal(err)
		}
		h := &human{}
		cs, _, addr := connectHTTPArgs(t, e, &mcp.ClientOptions{ElicitationHandler: h.handle}, "--policy", pol, "--servers-config", servers)
		prom := startPrometheus(t, addr)

		const runs = 4
		code := `import mcp_tools
for m in ("a", "b"):
    mcp_tools.call("everything", "echo", message=m)
try:
    mcp_tools.call("everything", "get-env")
except mcp_tools.ToolDeniedError:
    pass
print(mcp_tools.call("everything", "get-sum", a=2, b=3))
try:
    mcp_tools.call("everything", "echo", message="x" * 2000)
except mcp_tools.LimitExceededError:
    pass
`
		ctx := context.Background()
		for i := range runs {
			h.tell(accept(false))
			if res, out := callRunPython(t, ctx, cs, code, nil); res.IsError || out.Status != "ok" {
				t.Fatalf("run %d: %s", i, contentText(res))
			}
		}
		engineLabel := fmt.Sprintf(`engine=%q`, e.cand.Engine)
		prom.await(t, map[string]float64{
			`sum(bridge_runs_total{status="ok",` + engineLabel + `})`:                                      runs,
			`bridge_tool_calls_total{server="everything",tool="echo",decision="allowed"}`:                  2 * runs,
			`bridge_tool_calls_total{server="everything",tool="echo",decision="refused"}`:                  runs,
			`bridge_tool_calls_total{server="everything",tool="get-env",decision="denied"}`:                runs,
			`bridge_tool_calls_total{server="everything",tool="get-sum",decision="asked"}`:                 runs,
			`bridge_asks_total{outcome="accepted"}`:                                                        runs,
			`bridge_budget_cutoffs_total{budget="budgets.max_argument_bytes"}`:                             runs,
			`bridge_tool_call_duration_seconds_count{server="everything"}`:                                 3 * runs,
			`bridge_upstream_up{server="everything"}`:                                                      1,
			`sum(bridge_run_duration_seconds_count{` + engineLabel + `})`:                                  runs,
			`sum(bridge_pool_take_seconds_count) + sum(bridge_container_start_seconds_count or vector(0))`: runs,
			`bridge_policy_generation`:                                                                     1,
			`up{job="bridge"}`:                                                                             1,
			`bridge_runs_in_flight`:                                                                        0,
			`bridge_pool_size`:                                                                             4,
			`count(bridge_containers_alive)`:                                                               1,
		})

		// The alert rules load, are healthy, and none fires on a bridge
		// that works.
		var rules struct {
			Groups []struct {
				Rules []struct {
					Name, Health, State, LastError string
				} `json:"rules"`
			} `json:"groups"`
		}
		prom.api(t, "/api/v1/rules", nil, &rules)
		n := 0
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health != "ok" && r.Health != "unknown" || r.LastError != "" {
					t.Errorf("rule %s: health %s, %s", r.Name, r.Health, r.LastError)
				}
				if r.State == "firing" {
					t.Errorf("alert %s fires on a working bridge", r.Name)
				}
			}
		}
		if n < 8 {
			t.Errorf("prometheus loaded %d rules from bridge-alerts.yml, want its 10", n)
		}

		// The dashboard's queries are valid PromQL here, and those of the
		// runs, the pool and the tool calls have data.
		dash, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "examples", "grafana-dashboard.json"))
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Title   string
				Targets []struct{ Expr string }
			}
		}
		if err := json.Unmarshal(dash, &d); err != nil {
			t.Fatalf("grafana-dashboard.json: %v", err)
		}
		queries := 0
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				var r struct {
					Result []json.RawMessage `json:"result"`
				}
				prom.api(t, "/api/v1/query", url.Values{"query": {tg.Expr}}, &r)
				queries++
				if strings.Contains(tg.Expr, "bridge_runs_total") || strings.Contains(tg.Expr, "bridge_pool_ready") ||
					strings.Contains(tg.Expr, "bridge_tool_calls_total") {
					// rate() needs two scrapes of a series: a second or two.
					for deadline := time.Now().Add(15 * time.Second); len(r.Result) == 0 && time.Now().Before(deadline); {
						time.Sleep(500 * time.Millisecond)
						prom.api(t, "/api/v1/query", url.Values{"query": {tg.Expr}}, &r)
					}
					if len(r.Result) == 0 {
						t.Errorf("dashboard panel %q: %s has no data after %d runs", p.Title, tg.Expr, runs)
					}
				}
			}
		}
		if queries < 10 {
			t.Errorf("the dashboard has %d queries; it had 20", queries)
		}

		// 1,000 runs in sessions of random names (two runs each): the
		// series stop growing, and no name is a label value. On the first
		// engine only: the label set does not depend on it, and each
		// session starts a container.
		if !labelsOnce.CompareAndSwap(false, true) {
			return
		}
		names := sessionRuns(t, cs, 250, 2, 8)
		series := `count({job="bridge",__name__=~"bridge_.+"})`
		prom.await(t, map[string]float64{`sum(bridge_runs_total{status="ok"})`: runs + 500})
		first := prom.value(t, series)
		names = append(names, sessionRuns(t, cs, 250, 2, 8)...)
		prom.await(t, map[string]float64{
			`sum(bridge_runs_total{status="ok"})`:             runs + 1000,
			`bridge_sessions_ended_total{reason="max_calls"}`: 500,
			series: first,
		})
		if first > 400 {
			t.Errorf("the bridge exports %v series: more than the 400 a bounded label set has", first)
		}
		var labels []string
		prom.api(t, "/api/v1/labels", nil, &labels)
		for _, l := range labels {
			var values []string
			prom.api(t, "/api/v1/label/"+l+"/values", nil, &values)
			for _, v := range values {
				for _, name := range names {
					if strings.Contains(v, name) {
						t.Fatalf("label %s has the value %q, which holds the session name %q", l, v, name)
					}
				}
			}
		}
	})
}

// sessionRuns opens n sessions of random names and makes calls
// run_python calls in each, one after the other, from workers goroutines
// at once; it returns the names.
func sessionRuns(t *testing.T, cs *mcp.ClientSession, n, calls, workers int) []string {
	t.Helper()
	names := make([]string, n)
	for i := range names {
		b := make([]byte, 6)
		rand.Read(b)
		names[i] = "s" + hex.EncodeToString(b)
	}
	var wg sync.WaitGroup
	next := make(chan string)
	errs := make(chan string, n*calls)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				for range calls {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "x = 1", "session": name}})
					cancel()
					if err != nil {
						errs <- err.Error()
					} else if res.IsError {
						errs <- contentText(res)
					}
				}
			}
		}()
	}
	for _, name := range names {
		next <- name
	}
	close(next)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("a session run failed: %s", e)
	}
	return names
}
