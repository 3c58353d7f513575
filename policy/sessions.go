package policy

import (
	"time"

	"go.yaml.in/yaml/v3"
)

var sessionsKeys = []string{"enabled", "max", "max_per_principal", "idle_timeout", "max_lifetime", "max_calls"}

// Sessions are opt-in: with them, run_python takes a session name, and the
// calls that give the same one run in one container and interpreter, which
// keeps variables, imports and /tmp between them. Each session belongs to
// the MCP client session that made it.
type Sessions struct {
	// Enabled turns sessions on; off by default, and every call then runs
	// in a fresh container.
	Enabled bool
	// Max is how many sessions may exist at once, over all clients; 4
	// (1 to 64). Each holds a container.
	Max int
	// MaxPerPrincipal is how many of them one principal (a bearer token's
	// name, or the local user) may hold; 0, the default, is Max.
	MaxPerPrincipal int
	// IdleTimeout ends a session no call used for that long; 10m (10s to
	// 24h).
	IdleTimeout time.Duration
	// MaxLifetime ends a session that old, idle or not; 1h (1m to 7 days).
	MaxLifetime time.Duration
	// MaxCalls ends a session after that many calls; 200 (1 to 100000).
	MaxCalls int
}

// Bounds of the sessions keys.
const (
	maxSessions        = 64
	minSessionIdle     = 10 * time.Second
	maxSessionIdle     = 24 * time.Hour
	minSessionLifetime = time.Minute
	maxSessionLifetime = 7 * 24 * time.Hour
	maxSessionCalls    = 100000
)

func defaultSessions() Sessions {
	return Sessions{Max: 4, IdleTimeout: 10 * time.Minute, MaxLifetime: time.Hour, MaxCalls: 200}
}

// sessions reads the sessions section.
func (p *parser) sessions(k, v *yaml.Node, s *Sessions) {
	p.keys(k, v, "sessions", sessionsKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "enabled":
			s.Enabled = p.boolean(k, v, name, s.Enabled)
		case "max":
			s.Max = int(p.integer(k, v, name, int64(s.Max), 1, maxSessions))
		case "max_per_principal":
			s.MaxPerPrincipal = int(p.integer(k, v, name, int64(s.MaxPerPrincipal), 0, maxSessions))
		case "idle_timeout":
			s.IdleTimeout = p.durationIn(k, v, name, s.IdleTimeout, minSessionIdle, maxSessionIdle)
		case "max_lifetime":
			s.MaxLifetime = p.durationIn(k, v, name, s.MaxLifetime, minSessionLifetime, maxSessionLifetime)
		case "max_calls":
			s.MaxCalls = int(p.integer(k, v, name, int64(s.MaxCalls), 1, maxSessionCalls))
		}
	})
}

// PerPrincipal is how many sessions one principal may hold.
func (s Sessions) PerPrincipal() int {
	if s.MaxPerPrincipal == 0 || s.MaxPerPrincipal > s.Max {
		return s.Max
	}
	return s.MaxPerPrincipal
}
