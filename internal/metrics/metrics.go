// Package metrics is what the bridge and its proxy tell Prometheus: counts
// and latencies recorded as things happen, and the state of the pool, the
// queue, the sessions, the host budgets and the upstreams read when a
// scrape asks (docs/operations.md lists them all).
//
// No label takes a value a client or the code chose: no run ids, session
// names or arguments. Servers and tools are labels only when the proxy's
// catalog has them, and at most [MaxToolLabels] tools; the rest count
// under "_other" (and a name the catalog lacks under "_unknown").
//
// A nil *Metrics records nothing, so the packages that record need no
// check: metrics off cost a nil test.
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxToolLabels is how many distinct server/tool pairs get their own
// label values; later ones count under tool "_other".
const MaxToolLabels = 256

// Label values that stand for what is not named.
const (
	Other   = "_other"   // a tool past MaxToolLabels
	Unknown = "_unknown" // a server or tool the catalog does not have
	None    = "none"     // no engine (it could not be opened)
)

// Buckets of the latency histograms, in seconds: from a warm pool take
// (milliseconds) to a long run (minutes).
func runBuckets() []float64 {
	return []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
}
func startBuckets() []float64 {
	return []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
}
func callBuckets() []float64 {
	return []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
}

// Metrics records the bridge's metrics in its own registry (never
// Prometheus's global one). Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	runs           *prometheus.CounterVec
	runDuration    *prometheus.HistogramVec
	containerStart *prometheus.HistogramVec
	poolTake       *prometheus.HistogramVec
	sessionsEnded  *prometheus.CounterVec
	toolCalls      *prometheus.CounterVec
	toolDuration   *prometheus.HistogramVec
	asks           *prometheus.CounterVec
	cutoffs        *prometheus.CounterVec
	skills         *prometheus.CounterVec

	toolsMu sync.Mutex
	tools   map[[2]string]bool // the server/tool pairs with their own labels
}

// New returns Metrics with the Go runtime's and the process's own
// collectors, and bridge_build_info for version.
func New(version string) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg, tools: map[[2]string]bool{}}
	f := factory{reg}
	m.runs = f.counterVec("bridge_runs_total",
		"run_python calls answered, by how they ended (ok, error, timeout, memory, cancelled, busy, unavailable) and engine.", "status", "engine")
	m.runDuration = f.histogramVec("bridge_run_duration_seconds",
		"From asking for a run's container to giving it up: start or pool take, the code, the removal handed off.", runBuckets(), "engine")
	m.containerStart = f.histogramVec("bridge_container_start_seconds",
		"Runs that started cold: from asking for a container until the code was handed to the runner.", startBuckets(), "engine")
	m.poolTake = f.histogramVec("bridge_pool_take_seconds",
		"Runs that took a ready container from the warm pool: until the code was handed to the runner.", startBuckets(), "engine")
	m.sessionsEnded = f.counterVec("bridge_sessions_ended_total",
		"Sessions ended, by reason (idle, lifetime, max_calls, interpreter_gone, reset, shutdown).", "reason")
	m.toolCalls = f.counterVec("bridge_tool_calls_total",
		"Tool calls of the code, by server, tool and the policy's decision: allowed, denied (a rule), refused (a budget, a rate, an invalid request) or asked (a human, or ask_fallback, decided: bridge_asks_total says how).",
		"server", "tool", "decision")
	m.toolDuration = f.histogramVec("bridge_tool_call_duration_seconds",
		"Tool calls that went to their upstream: from the policy's gate to the result, the upstream's time included.", callBuckets(), "server")
	m.asks = f.counterVec("bridge_asks_total",
		"Tool calls the policy asked a human about, by outcome (accepted, declined, cancelled, timeout, remembered, fallback).", "outcome")
	m.cutoffs = f.counterVec("bridge_budget_cutoffs_total",
		"Tool calls refused by one of the policy's budgets (budgets.max_calls_per_run, budgets.max_argument_bytes, budgets.max_result_bytes, a rate); the host's own budgets are bridge_host_cutoffs_total.", "budget")
	m.skills = f.counterVec("bridge_skill_saves_total", "save_skill calls, by outcome (saved, replaced, refused).", "outcome")
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridge_build_info", Help: "Always 1; the bridge's version as a label.",
			ConstLabels: prometheus.Labels{"version": version}}, func() float64 { return 1 }),
	)
	return m
}

// factory makes metrics and registers them.
type factory struct{ reg *prometheus.Registry }

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

// Handler serves the metrics in Prometheus's text format (or
// OpenMetrics, when the scraper asks for it).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true, MaxRequestsInFlight: 4})
}

// Register adds c, a collector of state read at scrape time (see
// [State]). It panics on a metric name registered twice, as a wiring
// mistake.
func (m *Metrics) Register(c prometheus.Collector) { m.reg.MustRegister(c) }

// Run records a run_python call's end: status as the result says it, the
// engine ("" before one could be opened), and for a run that got a
// container, how long it took (d) and its start (warm: a pool take).
func (m *Metrics) Run(status, engine string, ran bool, warm bool, startup, d time.Duration) {
	if m == nil {
		return
	}
	if engine == "" {
		engine = None
	}
	m.runs.WithLabelValues(status, engine).Inc()
	if !ran {
		return
	}
	m.runDuration.WithLabelValues(engine).Observe(d.Seconds())
	if warm {
		m.poolTake.WithLabelValues(engine).Observe(startup.Seconds())
	} else if startup > 0 {
		m.containerStart.WithLabelValues(engine).Observe(startup.Seconds())
	}
}

// SessionEnded records a session's end, for reason (a fixed word).
func (m *Metrics) SessionEnded(reason string) {
	if m == nil {
		return
	}
	m.sessionsEnded.WithLabelValues(reason).Inc()
}

// ToolCall records one tool call's decision. serverKnown says server is
// configured, toolKnown that the proxy's catalog has the tool (a name
// that is not is never a label value); wentUp that the call went to its
// upstream, which took d from the gate to the result.
func (m *Metrics) ToolCall(server, tool string, serverKnown, toolKnown bool, decision string, wentUp bool, d time.Duration) {
	if m == nil {
		return
	}
	if !serverKnown {
		server = Unknown
	}
	server, tool = m.toolLabels(server, tool, serverKnown && toolKnown)
	m.toolCalls.WithLabelValues(server, tool, decision).Inc()
	if wentUp {
		m.toolDuration.WithLabelValues(server).Observe(d.Seconds())
	}
}

// toolLabels are the label values of a call to server/tool: the names
// themselves for the first MaxToolLabels pairs the catalog has.
func (m *Metrics) toolLabels(server, tool string, known bool) (string, string) {
	if !known {
		return server, Unknown
	}
	k := [2]string{server, tool}
	m.toolsMu.Lock()
	defer m.toolsMu.Unlock()
	if m.tools[k] {
		return server, tool
	}
	if len(m.tools) >= MaxToolLabels {
		return server, Other
	}
	m.tools[k] = true
	return server, tool
}

// Ask records how a question to the human ended.
func (m *Metrics) Ask(outcome string) {
	if m == nil {
		return
	}
	m.asks.WithLabelValues(outcome).Inc()
}

// Cutoff records a tool call refused by one of the policy's budgets (its
// key, or a rate's name).
func (m *Metrics) Cutoff(budget string) {
	if m == nil {
		return
	}
	m.cutoffs.WithLabelValues(budget).Inc()
}

// SkillSave records a save_skill call's outcome.
func (m *Metrics) SkillSave(outcome string) {
	if m == nil {
		return
	}
	m.skills.WithLabelValues(outcome).Inc()
}
