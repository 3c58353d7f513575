package proxy

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/internal/metrics"
)

// Each tool call is counted once with its decision: allowed, denied by a
// rule, refused by a budget (which is counted as a cut-off too); a tool
// name the catalog lacks is never a label value.
func TestMetricsCountDecisions(t *testing.T) {
	store, _ := policyStore(t, `
version: 1
tools:
  rules:
    - server: alpha
      tool: crash
      action: deny
budgets:
  max_calls_per_run: 5
  max_argument_bytes: 1Ki
`)
	m := metrics.New("test")
	p, c, _ := startProxy(t, Options{Policy: store, Metrics: m}, stdioServer(t, "alpha"))
	m.Watch(metrics.State{Upstreams: p.UpstreamStates})
	if _, err := c.Catalog(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := callRun(t, c, "r1", "echo", `{"message":"x"}`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := callRun(t, c, "r1", "crash", `{}`); kindOf(err) != KindDenied {
		t.Fatalf("crash: %v", err)
	}
	if _, err := callRun(t, c, "r1", "echo", `{"message":"`+strings.Repeat("x", 2000)+`"}`); kindOf(err) != KindLimit {
		t.Fatalf("big arguments: %v", err)
	}
	// The fifth call is the last the budget allows; the sixth is refused.
	if _, err := callRun(t, c, "r1", "echo", `{"message":"x"}`); err != nil {
		t.Fatal(err)
	}
	if _, err := callRun(t, c, "r1", "echo", `{"message":"x"}`); kindOf(err) != KindLimit {
		t.Fatalf("sixth call: %v", err)
	}
	body := scrapeText(t, m)
	for _, want := range []string{
		`bridge_tool_calls_total{decision="allowed",server="alpha",tool="echo"} 3`,
		`bridge_tool_calls_total{decision="denied",server="alpha",tool="crash"} 1`,
		`bridge_tool_calls_total{decision="refused",server="alpha",tool="echo"} 2`,
		`bridge_budget_cutoffs_total{budget="budgets.max_argument_bytes"} 1`,
		`bridge_budget_cutoffs_total{budget="budgets.max_calls_per_run"} 1`,
		`bridge_tool_call_duration_seconds_count{server="alpha"} 3`,
		`bridge_upstream_up{server="alpha"} 1`,
		`bridge_upstream_restarts_total{server="alpha"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

func scrapeText(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "bridge_") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n") + "\n"
}
