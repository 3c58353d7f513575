package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A nil *Metrics records nothing, and says so by not panicking.
func TestNilRecordsNothing(t *testing.T) {
	var m *Metrics
	m.Run("ok", "docker", true, true, time.Millisecond, time.Second)
	m.SessionEnded("idle")
	m.ToolCall("s", "t", true, true, "allowed", true, time.Millisecond)
	m.Ask("accepted")
	m.Cutoff("budgets.max_calls_per_run")
	m.SkillSave("saved")
	m.Watch(State{})
}

// Tool names are labels only when the catalog has them, and at most
// MaxToolLabels pairs: a run that calls a million made-up names leaves the
// label set as it was.
func TestToolLabelsBounded(t *testing.T) {
	m := New("test")
	for i := range MaxToolLabels + 50 {
		m.ToolCall("srv", fmt.Sprintf("tool%d", i), true, true, "allowed", true, time.Millisecond)
	}
	for i := range 1000 {
		m.ToolCall("srv", fmt.Sprintf("made-up-%d", i), true, false, "denied", false, 0)
		m.ToolCall(fmt.Sprintf("server-%d", i), "x", false, false, "denied", false, 0)
	}
	if n := testutil.CollectAndCount(m.toolCalls); n != MaxToolLabels+3 {
		t.Fatalf("%d tool call series, want %d (the catalog's first %d, %q, and two %q)", n, MaxToolLabels+3, MaxToolLabels, Other, Unknown)
	}
	if v := testutil.ToFloat64(m.toolCalls.WithLabelValues("srv", Other, "allowed")); v != 50 {
		t.Errorf("calls counted under %q: %v, want 50", Other, v)
	}
	if v := testutil.ToFloat64(m.toolCalls.WithLabelValues(Unknown, Unknown, "denied")); v != 1000 {
		t.Errorf("calls to unknown servers: %v, want 1000", v)
	}
	if v := testutil.ToFloat64(m.toolCalls.WithLabelValues("srv", Unknown, "denied")); v != 1000 {
		t.Errorf("calls to unknown tools: %v, want 1000", v)
	}
	// Only calls that went upstream are timed.
	if n := testutil.CollectAndCount(m.toolDuration); n != 1 {
		t.Errorf("%d duration series, want 1 (server srv)", n)
	}
}

// A run is counted by status and engine; its time goes to the pool-take
// histogram when warm and to the container-start one when cold; a call
// refused before it got a container is counted, not timed.
func TestRunCounted(t *testing.T) {
	m := New("test")
	m.Run("ok", "docker", true, true, 5*time.Millisecond, 50*time.Millisecond)
	m.Run("ok", "docker", true, false, 300*time.Millisecond, time.Second)
	m.Run("busy", "", false, false, 0, 0)
	if v := testutil.ToFloat64(m.runs.WithLabelValues("ok", "docker")); v != 2 {
		t.Errorf("ok runs: %v, want 2", v)
	}
	if v := testutil.ToFloat64(m.runs.WithLabelValues("busy", None)); v != 1 {
		t.Errorf("busy answers: %v, want 1", v)
	}
	body := scrape(t, m)
	for _, want := range []string{
		`bridge_pool_take_seconds_count{engine="docker"} 1`,
		`bridge_container_start_seconds_count{engine="docker"} 1`,
		`bridge_run_duration_seconds_count{engine="docker"} 2`,
		`bridge_build_info{version="test"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

// State is read at each scrape, and a part that is not wired is absent.
func TestStateReadAtScrape(t *testing.T) {
	m := New("test")
	running := 0
	m.Watch(State{
		Load: func() Load { running++; return Load{Running: running, Waiting: 3, Sessions: 1} },
		Pool: func() (PoolState, bool) { return PoolState{Target: 4, Ready: 2, Hits: 7}, true },
		Host: func() (HostState, bool) {
			return HostState{ContainersAlive: 5, Cutoffs: map[string]int64{"runner_stalled": 2}}, true
		},
		Upstreams: func() []UpstreamState {
			return []UpstreamState{{Server: "everything", Tried: true, Up: true, Restarts: 1}, {Server: "unused"}}
		},
	})
	scrape(t, m)
	body := scrape(t, m)
	for _, want := range []string{
		"bridge_runs_in_flight 2", "bridge_queue_depth 3", "bridge_sessions_open 1",
		"bridge_pool_target 4", "bridge_pool_ready 2", "bridge_pool_hits_total 7",
		"bridge_containers_alive 5", `bridge_host_cutoffs_total{budget="runner_stalled"} 2`,
		`bridge_upstream_up{server="everything"} 1`, `bridge_upstream_restarts_total{server="everything"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}
	for _, absent := range []string{"bridge_policy_generation", "bridge_artifacts_kept_bytes", `bridge_upstream_up{server="unused"}`} {
		if strings.Contains(body, absent) {
			t.Errorf("scrape has %s, which was not wired", absent)
		}
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// The names docs/operations.md lists are the names the code can export,
// and the alert rules and the dashboard use none other: the docs stay true.
func TestDocsListEveryMetric(t *testing.T) {
	m := New("test")
	m.Watch(State{})
	code := map[string]bool{}
	ch := make(chan *prometheus.Desc, 1000)
	for _, c := range []prometheus.Collector{m.runs, m.runDuration, m.containerStart, m.poolTake, m.sessionsEnded, m.toolCalls,
		m.toolDuration, m.asks, m.cutoffs, m.skills, &stateCollector{d: newDescs()}, newHTTPSessionsCollector(nil)} {
		c.Describe(ch)
	}
	close(ch)
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		code[fq.FindStringSubmatch(d.String())[1]] = true
	}
	code["bridge_build_info"] = true
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(bridge_[a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	for name := range code {
		if !listed[name] {
			t.Errorf("%s is exported but not in the table of docs/operations.md", name)
		}
	}
	for name := range listed {
		if !code[name] {
			t.Errorf("docs/operations.md lists %s, which the code does not export", name)
		}
	}
	for _, f := range []string{"examples/bridge-alerts.yml", "examples/grafana-dashboard.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`bridge_[a-z_]+`).FindAllString(string(b), -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
			if !code[base] {
				t.Errorf("docs/%s uses %s, which the code does not export", f, m)
			}
		}
	}
}

// BenchmarkScrape is one scrape of a bridge's /metrics with every part
// wired and a few hundred series (the Go runtime's and the process's
// included): what a scraper costs the bridge each time it comes.
func BenchmarkScrape(b *testing.B) {
	m := New("bench")
	m.Watch(State{
		Load: func() Load { return Load{Running: 1} },
		Pool: func() (PoolState, bool) { return PoolState{Target: 2, Ready: 2}, true },
		Host: func() (HostState, bool) {
			return HostState{Cutoffs: map[string]int64{"runner_stalled": 0, "host_time": 0}}, true
		},
		Policy:    func() PolicyState { return PolicyState{Generation: 1} },
		Upstreams: func() []UpstreamState { return []UpstreamState{{Server: "everything", Tried: true, Up: true}} },
		Artifacts: func() ArtifactState { return ArtifactState{} },
	})
	for i := range 40 {
		m.ToolCall("everything", fmt.Sprintf("tool%d", i), true, true, "allowed", true, time.Millisecond)
	}
	m.Run("ok", "docker", true, true, time.Millisecond, 10*time.Millisecond)
	m.Run("ok", "docker", true, false, 300*time.Millisecond, time.Second)
	h := m.Handler()
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	}
}
