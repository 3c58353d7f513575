package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// The HTTP sessions' state is exported as it is read, by fixed reasons.
func TestHTTPSessionsExported(t *testing.T) {
	m := New("test")
	m.WatchHTTPSessions(func() HTTPSessionState {
		return HTTPSessionState{Open: 7, Max: 10, IdleTimeout: 90,
			Refused: map[string]int64{"bridge_cap": 3, "client_cap": 0}, Closed: map[string]int64{"idle": 2, "pressure": 1}}
	})
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Body)
	for _, line := range []string{
		"bridge_http_sessions_open 7", "bridge_http_sessions_max 10", "bridge_http_session_idle_timeout_seconds 90",
		`bridge_http_sessions_refused_total{reason="bridge_cap"} 3`, `bridge_http_sessions_refused_total{reason="client_cap"} 0`,
		`bridge_http_sessions_closed_total{reason="idle"} 2`, `bridge_http_sessions_closed_total{reason="pressure"} 1`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("no %q in:\n%s", line, body)
		}
	}
	var nilMetrics *Metrics
	nilMetrics.WatchHTTPSessions(nil)
}
