package policy

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/units"
)

var httpKeys = []string{"max_sessions", "max_sessions_per_client", "session_idle_timeout", "session_min_idle"}

// HTTP bounds the MCP sessions that `bridge serve --http` and `bridge
// proxy --http` keep for their clients: each costs memory while it is
// open, so a client that opens sessions and leaves them must not grow the
// server without end.
type HTTP struct {
	// MaxSessions is how many sessions may be open at once, over all
	// clients; 1000 (1 to 100000). Past it a new session is refused (503).
	MaxSessions int
	// MaxSessionsPerClient is how many one client (its address; every
	// loopback address is one client) may hold; 100 (1 to 100000, at most
	// MaxSessions). Past it a new session is refused (429).
	MaxSessionsPerClient int
	// SessionIdleTimeout closes a session that had no request for that
	// long while at most half of MaxSessions is open; past half it shrinks
	// in proportion, down to SessionMinIdle at MaxSessions. 30m (10s to
	// 24h).
	SessionIdleTimeout time.Duration
	// SessionMinIdle is how long a session must have been idle before it
	// may be closed to make room for a new one; 1m (1s to 24h, at most
	// SessionIdleTimeout).
	SessionMinIdle time.Duration
}

// Bounds of the http keys.
const (
	maxHTTPSessions       = 100000
	minHTTPSessionIdle    = 10 * time.Second
	maxHTTPSessionIdle    = 24 * time.Hour
	minHTTPSessionMinIdle = time.Second
)

func defaultHTTP() HTTP {
	return HTTP{MaxSessions: 1000, MaxSessionsPerClient: 100, SessionIdleTimeout: 30 * time.Minute, SessionMinIdle: time.Minute}
}

// http reads the http section, then its cross-key rules.
func (p *parser) http(k, v *yaml.Node, h *HTTP) {
	nodes := map[string]*yaml.Node{}
	if !p.keys(k, v, "http", httpKeys, func(key, name string, k, v *yaml.Node) {
		nodes[key] = v
		switch key {
		case "max_sessions":
			h.MaxSessions = int(p.integer(k, v, name, int64(h.MaxSessions), 1, maxHTTPSessions))
		case "max_sessions_per_client":
			h.MaxSessionsPerClient = int(p.integer(k, v, name, int64(h.MaxSessionsPerClient), 1, maxHTTPSessions))
		case "session_idle_timeout":
			h.SessionIdleTimeout = p.durationIn(k, v, name, h.SessionIdleTimeout, minHTTPSessionIdle, maxHTTPSessionIdle)
		case "session_min_idle":
			h.SessionMinIdle = p.durationIn(k, v, name, h.SessionMinIdle, minHTTPSessionMinIdle, maxHTTPSessionIdle)
		}
	}) {
		return
	}
	if n := nodes["max_sessions_per_client"]; n != nil && h.MaxSessionsPerClient > h.MaxSessions {
		p.errorf(n, "http.max_sessions_per_client: %d is more than http.max_sessions (%d): one client cannot hold more than the bridge does", h.MaxSessionsPerClient, h.MaxSessions)
	}
	if nodes["max_sessions_per_client"] == nil {
		h.MaxSessionsPerClient = min(h.MaxSessionsPerClient, h.MaxSessions)
	}
	if n := nodes["session_min_idle"]; n != nil && h.SessionMinIdle > h.SessionIdleTimeout {
		p.errorf(n, "http.session_min_idle: %s is longer than http.session_idle_timeout (%s)", units.FormatDuration(h.SessionMinIdle), units.FormatDuration(h.SessionIdleTimeout))
	}
	if nodes["session_min_idle"] == nil {
		h.SessionMinIdle = min(h.SessionMinIdle, h.SessionIdleTimeout)
	}
}
