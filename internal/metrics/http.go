package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// HTTPSessionState is what a scrape reads of the MCP sessions an HTTP
// server keeps for its clients (http.max_sessions and its kin).
type HTTPSessionState struct {
	Open, Max   int
	IdleTimeout float64 // seconds: the idle timeout now, shorter under pressure
	// Refused by reason (bridge_cap, client_cap); Closed by the server,
	// by reason (idle, pressure). Fixed words only.
	Refused, Closed map[string]int64
}

// WatchHTTPSessions registers st, read at each scrape, as the
// bridge_http_sessions_* metrics.
func (m *Metrics) WatchHTTPSessions(st func() HTTPSessionState) {
	if m == nil {
		return
	}
	m.reg.MustRegister(newHTTPSessionsCollector(st))
}

func newHTTPSessionsCollector(st func() HTTPSessionState) *httpSessionsCollector {
	return &httpSessionsCollector{st: st,
		open: desc("bridge_http_sessions_open", "MCP sessions of HTTP clients open now, and being opened (each costs memory while open)."),
		max:  desc("bridge_http_sessions_max", "http.max_sessions in force: past it a new session is refused."),
		idle: desc("bridge_http_session_idle_timeout_seconds", "The idle timeout of MCP sessions now: http.session_idle_timeout, shorter past half of http.max_sessions."),
		refused: prometheus.NewDesc("bridge_http_sessions_refused_total",
			"New MCP sessions refused, by reason: bridge_cap (http.max_sessions), client_cap (http.max_sessions_per_client).", []string{"reason"}, nil),
		closed: prometheus.NewDesc("bridge_http_sessions_closed_total",
			"MCP sessions the server closed, by reason: idle (http.session_idle_timeout), pressure (idle for less, to make room).", []string{"reason"}, nil),
	}
}

type httpSessionsCollector struct {
	st                               func() HTTPSessionState
	open, max, idle, refused, closed *prometheus.Desc
}

func (c *httpSessionsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.open, c.max, c.idle, c.refused, c.closed} {
		ch <- d
	}
}

func (c *httpSessionsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.st()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(st.Open))
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(st.Max))
	ch <- prometheus.MustNewConstMetric(c.idle, prometheus.GaugeValue, st.IdleTimeout)
	for reason, n := range st.Refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), reason)
	}
	for reason, n := range st.Closed {
		ch <- prometheus.MustNewConstMetric(c.closed, prometheus.CounterValue, float64(n), reason)
	}
}
