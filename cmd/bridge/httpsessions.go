package main

import (
	"github.com/bridge-mcp/bridge/bridge/transport"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/policy"
)

// httpSessions bounds the MCP sessions served at addr (--http) by the
// policy in force (its http section, read at each new session: a reload
// applies at once), and exports their counts in m (nil: none). Nil when
// addr is "": stdio has no such sessions.
func httpSessions(addr string, store *policy.Store, m *metrics.Metrics) *transport.Sessions {
	if addr == "" {
		return nil
	}
	s := transport.NewSessions(func() transport.SessionLimits {
		h := store.Current().Policy.HTTP
		return transport.SessionLimits{Max: h.MaxSessions, MaxPerClient: h.MaxSessionsPerClient,
			IdleTimeout: h.SessionIdleTimeout, MinIdle: h.SessionMinIdle}
	})
	m.WatchHTTPSessions(func() metrics.HTTPSessionState {
		st := s.Stats()
		return metrics.HTTPSessionState{Open: st.Open, Max: st.Max, IdleTimeout: st.IdleTimeout.Seconds(),
			Refused: st.Refused, Closed: st.Closed}
	})
	return s
}
