package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/transport"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// What /readyz checks (docs/operations.md#readiness).

// engineCheckTTL is how long an answer of the engine is reused: a balancer
// probing every second costs the engine one image lookup every two.
const engineCheckTTL = 2 * time.Second

// serveReadiness is what /readyz of `bridge serve --http` checks: the
// engine (open, answering, holding the runner image) and, when the policy
// keeps a warm pool, that the pool is not failing. It starts no container.
func serveReadiness(eng *sandbox.Engine, warm func() bool, log zerolog.Logger) func(ctx context.Context) []transport.Check {
	engine := transport.CachedCheck("engine", engineCheckTTL, func(ctx context.Context) transport.Check {
		return engineCheck(eng.Ready(ctx))
	})
	logged := newChangeLog(log)
	return func(ctx context.Context) []transport.Check {
		checks := []transport.Check{engine(ctx)}
		if warm() {
			checks = append(checks, poolCheck(eng.PoolStats()))
		}
		logged.note(checks)
		return checks
	}
}

// engineCheck is the engine's check after Ready answered err.
func engineCheck(err error) transport.Check {
	c := transport.Check{Name: "engine", OK: err == nil, State: "ready"}
	switch {
	case err == nil:
	case errors.Is(err, sandbox.ErrEngineOpening):
		c.State = "opening"
	case errors.Is(err, sandbox.ErrImageNotFound):
		c.State = "image missing"
	case errors.Is(err, sandbox.ErrEngineUnreachable):
		c.State = "unreachable"
	case errors.Is(err, context.DeadlineExceeded):
		c.State = "not answering"
	default:
		c.State = "unavailable"
	}
	if err != nil {
		c.Detail = err.Error()
	}
	return c
}

// poolCheck is the warm pool's check: ready or filling is fine (a run
// that finds it empty starts a container of its own); failing, with no
// container ready and its last start failed, is not: the next run's start
// would likely fail the same way.
func poolCheck(st *sandbox.PoolStats) transport.Check {
	c := transport.Check{Name: "pool", OK: true}
	switch {
	case st == nil:
		c.State = "not started" // the engine is not open yet; its check says why
	case st.Ready == 0 && st.LastError != "":
		c.OK, c.State, c.Detail = false, "failing", st.LastError
	case st.Ready < st.Size:
		c.State, c.Detail = "filling", fmt.Sprintf("%d of %d ready, %d starting", st.Ready, st.Size, st.Starting)
	default:
		c.State, c.Detail = "ready", fmt.Sprintf("%d of %d ready", st.Ready, st.Size)
	}
	return c
}

// upstreamsRefresh is how often /readyz of `bridge proxy` has the upstream
// servers' states refreshed, and how long a refresh may take.
const (
	upstreamsRefresh        = 5 * time.Second
	upstreamsRefreshTimeout = 30 * time.Second
)

// proxyReadiness is what /readyz of `bridge proxy --http` checks: the
// upstream servers the policy reaches. It is ready once their states are
// known (the first probe connects them) and at least one is connected or
// none is configured: a server that fails alone is reported, and the
// calls to it fail, but the others are served. The states are refreshed
// in the background (statuses connects what is not connected: an npx
// server takes seconds to start, more than a probe waits).
func proxyReadiness(statuses func(context.Context) []proxy.ServerStatus, log zerolog.Logger) func(ctx context.Context) []transport.Check {
	var (
		mu      sync.Mutex
		last    []proxy.ServerStatus
		known   bool
		at      time.Time
		running bool
	)
	refresh := func() {
		ctx, cancel := context.WithTimeout(context.Background(), upstreamsRefreshTimeout)
		defer cancel()
		st := statuses(ctx)
		mu.Lock()
		last, known, at, running = st, true, time.Now(), false
		mu.Unlock()
	}
	logged := newChangeLog(log)
	return func(context.Context) []transport.Check {
		mu.Lock()
		if !running && time.Since(at) >= upstreamsRefresh {
			running = true
			go refresh()
		}
		st, k := last, known
		mu.Unlock()
		checks := []transport.Check{upstreamsCheck(st, k)}
		logged.note(checks)
		return checks
	}
}

// upstreamsCheck is the check of the upstream servers in states st
// (known: st was read at least once).
func upstreamsCheck(st []proxy.ServerStatus, known bool) transport.Check {
	c := transport.Check{Name: "upstreams", OK: true, State: "ready"}
	if !known {
		c.OK, c.State, c.Detail = false, "connecting", "the upstream servers are being connected"
		return c
	}
	ready, failed := 0, []string{}
	for _, s := range st {
		switch s.State {
		case "ready":
			ready++
		case "unavailable":
			failed = append(failed, s.Name+": "+s.Error)
		}
	}
	c.Detail = fmt.Sprintf("%d of %d connected", ready, len(st))
	switch {
	case len(st) == 0:
		c.State, c.Detail = "none configured", ""
	case ready == 0 && len(failed) == len(st):
		c.OK, c.State = false, "unavailable"
	case len(failed) > 0:
		c.State = "degraded"
	}
	for _, f := range failed {
		c.Detail += "; " + f
	}
	return c
}

// changeLog logs the checks when readiness changes (a balancer probing
// every second would fill the log otherwise): at warn when not ready, with
// what is wrong, at info when ready again.
type changeLog struct {
	log  zerolog.Logger
	mu   sync.Mutex
	last string
}

func newChangeLog(log zerolog.Logger) *changeLog { return &changeLog{log: log} }

func (l *changeLog) note(checks []transport.Check) {
	ok, key := true, ""
	for _, c := range checks {
		ok = ok && c.OK
		key += c.Name + "=" + c.State + ";"
	}
	l.mu.Lock()
	changed := key != l.last
	l.last = key
	l.mu.Unlock()
	if !changed {
		return
	}
	if ok {
		l.log.Info().Str("checks", key).Msg("ready")
		return
	}
	ev := l.log.Warn().Str("checks", key)
	for _, c := range checks {
		if !c.OK {
			ev = ev.Str(c.Name, c.Detail)
		}
	}
	ev.Msg("not ready")
}
