package transport

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// Defaults of SessionLimits.
const (
	DefaultMaxSessions          = 1000
	DefaultMaxSessionsPerClient = 100
	DefaultSessionIdleTimeout   = 30 * time.Minute
	DefaultSessionMinIdle       = time.Minute
)

// SessionLimits bound the MCP sessions an HTTP server keeps. A session
// costs the server memory as long as it is open (a few KB of the SDK's and
// the bridge's state when idle; 12,000 grew a server by about 90 MB), so a
// client that opens sessions and never closes them must not be able to
// grow it without end.
type SessionLimits struct {
	// Max is how many sessions may be open at once, over all clients
	// (DefaultMaxSessions if 0).
	Max int
	// MaxPerClient is how many one client may hold (see [ClientOf];
	// DefaultMaxSessionsPerClient if 0; at most Max).
	MaxPerClient int
	// IdleTimeout closes a session that had no request for that long
	// (DefaultSessionIdleTimeout if 0) while at most half of Max is open.
	// Past half, the timeout shrinks in proportion to the sessions open,
	// down to MinIdle at Max: under pressure the sessions idle longest go
	// first.
	IdleTimeout time.Duration
	// MinIdle is how long a session must have been idle before it may be
	// closed to make room for a new one (DefaultSessionMinIdle if 0; at
	// most IdleTimeout).
	MinIdle time.Duration
}

// withDefaults fills in what l leaves unset and keeps its parts in
// order.
func (l SessionLimits) withDefaults() SessionLimits {
	if l.Max <= 0 {
		l.Max = DefaultMaxSessions
	}
	if l.MaxPerClient <= 0 {
		l.MaxPerClient = DefaultMaxSessionsPerClient
	}
	l.MaxPerClient = min(l.MaxPerClient, l.Max)
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultSessionIdleTimeout
	}
	if l.MinIdle <= 0 {
		l.MinIdle = DefaultSessionMinIdle
	}
	l.MinIdle = min(l.MinIdle, l.IdleTimeout)
	return l
}

// idleTimeout is the idle timeout with open sessions: IdleTimeout up to
// half of Max, then less in proportion, MinIdle from Max on.
func (l SessionLimits) idleTimeout(open int) time.Duration {
	half := l.Max / 2
	switch {
	case open <= half:
		return l.IdleTimeout
	case open >= l.Max:
		return l.MinIdle
	}
	frac := float64(open-half) / float64(l.Max-half)
	return l.IdleTimeout - time.Duration(frac*float64(l.IdleTimeout-l.MinIdle))
}

// Why a new session was refused, as metrics label it.
const (
	RefusedBridgeCap = "bridge_cap" // SessionLimits.Max
	RefusedClientCap = "client_cap" // SessionLimits.MaxPerClient
)

// Why the server closed a session, as metrics label it.
const (
	ClosedIdle     = "idle"     // idle for SessionLimits.IdleTimeout
	ClosedPressure = "pressure" // idle for less, closed under pressure
)

// SessionStats are what a scrape reads of Sessions.
type SessionStats struct {
	Open        int           // sessions open, and being opened
	Max         int           // SessionLimits.Max in force
	IdleTimeout time.Duration // the idle timeout now: shorter under pressure
	Refused     map[string]int64
	Closed      map[string]int64
}

// Sessions counts the MCP sessions of one HTTP server by client, refuses
// a new one past SessionLimits, and closes the idle ones (see
// SessionLimits.IdleTimeout). Pass one in HTTPOptions.Sessions; it is
// safe for concurrent use, and serves one server.
//
// A Streamable HTTP session is counted from the POST that opens it until
// its client deletes it, the server closes it, or it turns out not to
// exist (an opening request that was not initialize). A legacy SSE
// session is counted while its GET stream lasts; it is never closed for
// being idle: that transport answers a call on the stream, so the bridge
// cannot tell an idle session from one whose call is running.
type Sessions struct {
	limits func() SessionLimits
	now    func() time.Time

	mu      sync.Mutex
	srv     *mcp.Server
	log     zerolog.Logger
	entries map[string]*sessionEntry // by key: mcpKey(id), or "sse:N"
	// closing are the sessions the server is closing (idle, or to make
	// room), no longer counted: their room went to others. They stay
	// known until Close returns, so that a request arriving meanwhile is
	// refused as the SDK refuses one of a closed session, not served
	// untracked and cut off.
	closing map[string]*sessionEntry
	clients map[string]int // sessions and reservations by client
	pending int            // reservations: sessions being opened
	dirty   bool           // a session may have closed unseen
	serial  int64          // of the SSE sessions' keys
	refused map[string]int64
	closed  map[string]int64
	// refusing counts the refusals since a session was last let in:
	// their start and end are logged, not each one.
	refusing int64
}

// sessionEntry is one open session.
type sessionEntry struct {
	key, client string
	sse         bool
	last        time.Time // when a request last began or ended
	busy        int       // its requests in flight
}

// NewSessions returns Sessions bounded by limits, which is read at each
// new session (so that a policy reload applies); nil: the defaults.
func NewSessions(limits func() SessionLimits) *Sessions {
	if limits == nil {
		limits = func() SessionLimits { return SessionLimits{} }
	}
	return &Sessions{limits: limits, now: time.Now, entries: map[string]*sessionEntry{}, closing: map[string]*sessionEntry{},
		clients: map[string]int{}, refused: map[string]int64{}, closed: map[string]int64{}, log: zerolog.Nop()}
}

// Stats are the counts now.
func (s *Sessions) Stats() SessionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limits().withDefaults()
	open := s.openLocked()
	// Every reason, 0 or not: a counter a scrape sees from the start.
	return SessionStats{Open: open, Max: l.Max, IdleTimeout: l.idleTimeout(open),
		Refused: map[string]int64{RefusedBridgeCap: s.refused[RefusedBridgeCap], RefusedClientCap: s.refused[RefusedClientCap]},
		Closed:  map[string]int64{ClosedIdle: s.closed[ClosedIdle], ClosedPressure: s.closed[ClosedPressure]}}
}

// ClientOf is who a request comes from, for SessionLimits.MaxPerClient:
// its remote address, without the port (a client opens connections from
// any port it likes). The bridge has one bearer token: it tells a client
// from a stranger, not one client from another, so it is no identity.
//
//   - Every loopback address (127.0.0.0/8, ::1) is one client,
//     "loopback": a process on the machine can connect from any of them,
//     and the machine's users all share them. On loopback the per-client
//     cap is the cap of everything local.
//   - An IPv6 address counts by its /64: a host picks any address of its
//     network's /64.
//   - Clients behind one balancer or NAT share its address, so they are
//     one client: raise max_sessions_per_client there.
func ClientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "unknown"
	}
	ip = ip.Unmap().WithZone("")
	switch {
	case ip.IsLoopback():
		return "loopback"
	case ip.Is6():
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// bind ties s to the server whose sessions it counts, and starts closing
// idle sessions until ctx ends.
func (s *Sessions) bind(ctx context.Context, srv *mcp.Server, log zerolog.Logger) {
	s.mu.Lock()
	s.srv, s.log = srv, log
	s.mu.Unlock()
	go s.sweepEvery(ctx)
}

// sweepEvery closes the idle sessions (sweep) every quarter of MinIdle,
// between 100 ms and 15 s, until ctx ends.
func (s *Sessions) sweepEvery(ctx context.Context) {
	for {
		every := min(max(s.limits().withDefaults().MinIdle/4, 100*time.Millisecond), 15*time.Second)
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		s.sweep()
	}
}

// sweep closes the Streamable HTTP sessions idle for longer than the idle
// timeout of the moment, the longest idle first; each one closed relieves
// the pressure, so the timeout of the next is recomputed.
func (s *Sessions) sweep() {
	s.mu.Lock()
	l := s.limits().withDefaults()
	s.reconcileLocked()
	now := s.now()
	open := s.openLocked()
	var victims []*sessionEntry
	for _, e := range s.idleLocked("") {
		idle := now.Sub(e.last)
		if idle < l.idleTimeout(open) {
			break
		}
		reason := ClosedPressure
		if idle >= l.IdleTimeout {
			reason = ClosedIdle
		}
		s.dropLocked(e, reason)
		victims = append(victims, e)
		open--
	}
	s.mu.Unlock()
	s.close(victims)
}

// idleLocked are the Streamable HTTP sessions (of client, or of all when
// "") with no request in flight, the longest idle first.
func (s *Sessions) idleLocked(client string) []*sessionEntry {
	var idle []*sessionEntry
	for _, e := range s.entries {
		if !e.sse && e.busy == 0 && (client == "" || e.client == client) {
			idle = append(idle, e)
		}
	}
	slices.SortFunc(idle, func(a, b *sessionEntry) int { return a.last.Compare(b.last) })
	return idle
}

// reconcileLocked forgets the sessions that closed without s seeing it:
// an opening request that was not an initialize leaves none.
func (s *Sessions) reconcileLocked() {
	if !s.dirty || s.srv == nil {
		return
	}
	live := map[string]bool{}
	for ss := range s.srv.Sessions() {
		live[mcpKey(ss.ID())] = true
	}
	for k, e := range s.entries {
		if !e.sse && !live[k] {
			s.forgetLocked(e)
		}
	}
	s.dirty = false
}

// dropLocked forgets e, which the server is about to close for reason
// (see s.closing; s.close ends that).
func (s *Sessions) dropLocked(e *sessionEntry, reason string) {
	s.forgetLocked(e)
	s.closing[e.key] = e
	s.closed[reason]++
	s.log.Debug().Str("client", e.client).Str("reason", reason).Msg("closing an idle MCP session")
}

func (s *Sessions) forgetLocked(e *sessionEntry) {
	if _, ok := s.entries[e.key]; !ok {
		return
	}
	delete(s.entries, e.key)
	s.release(e.client)
}

// release gives back a session of client.
func (s *Sessions) release(client string) {
	if s.clients[client]--; s.clients[client] <= 0 {
		delete(s.clients, client)
	}
}

// close closes the Streamable HTTP sessions of victims (dropped by
// dropLocked), outside s.mu: closing waits for the session's handlers.
// Once closed, they are no longer closing.
func (s *Sessions) close(victims []*sessionEntry) {
	if len(victims) == 0 {
		return
	}
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range victims {
			delete(s.closing, e.key)
		}
	}()
	if srv == nil {
		return
	}
	keys := map[string]bool{}
	for _, e := range victims {
		keys[e.key] = true
	}
	for ss := range srv.Sessions() {
		if keys[mcpKey(ss.ID())] {
			ss.Close()
		}
	}
}

// refusal says why a new session was refused, and when to try again.
type refusal struct {
	reason     string
	limit      int
	retryAfter time.Duration
	// noRetry: no session open would make room by waiting (they are all
	// legacy SSE streams, never closed for being idle), so no time to
	// retry after can be told.
	noRetry bool
}

// admit reserves room for a new session of client; else it says why not
// (the bridge's cap first when both are reached). Both caps are decided
// before any session is closed to make room (see roomLocked), so that a
// refused client never closes anyone's session.
func (s *Sessions) admit(client string) *refusal {
	s.mu.Lock()
	l := s.limits().withDefaults()
	if s.openLocked() >= l.Max || s.clients[client] >= l.MaxPerClient {
		s.reconcileLocked()
	}
	var victims []*sessionEntry
	defer func() { s.close(victims) }() // after the Unlock below
	defer s.mu.Unlock()
	v, no := s.roomLocked(client, l)
	if no != nil {
		return s.refuseLocked(client, no)
	}
	if v != nil {
		s.dropLocked(v, ClosedPressure)
		victims = append(victims, v)
	}
	s.pending++
	s.clients[client]++
	if s.refusing > 0 {
		s.log.Info().Int64("refused", s.refusing).Msg("MCP sessions: taking new sessions again")
		s.refusing = 0
	}
	return nil
}

// roomLocked decides whether a new session of client fits: (nil, nil) if
// it does; a session to close for it; or why not. A session is closed for
// another only when it has been idle for MinIdle with no request in
// flight, and only one that does not just move the shortage elsewhere:
//
//   - At the client's own cap, only its own (closing one makes room under
//     both caps; another client's would make none under this one).
//   - At the bridge's cap, one of the client that holds the most sessions,
//     the longest idle of them, counting the asking client as holding the
//     session it asks for; never one of a client that holds fewer than
//     that (a client is never squeezed to make room for a bigger one).
func (s *Sessions) roomLocked(client string, l SessionLimits) (*sessionEntry, *refusal) {
	atClient, atBridge := s.clients[client] >= l.MaxPerClient, s.openLocked() >= l.Max
	if !atClient && !atBridge {
		return nil, nil
	}
	if v := s.victimLocked(client, l.MinIdle, atClient); v != nil {
		return v, nil
	}
	no := &refusal{reason: RefusedClientCap, limit: l.MaxPerClient}
	if atBridge {
		no = &refusal{reason: RefusedBridgeCap, limit: l.Max}
	}
	// What will make room: one of its own sessions going, at its cap;
	// else any, closed by the sweep at the bridge's.
	scope := client
	if !atClient {
		scope = ""
	}
	wait, ok := s.waitLocked(scope, l.MinIdle)
	no.retryAfter, no.noRetry = wait, !ok
	return nil, no
}

// victimLocked is the session to close for a new one of client (see
// roomLocked; own: its own sessions only), or nil.
func (s *Sessions) victimLocked(client string, minIdle time.Duration, own bool) *sessionEntry {
	after := s.clients[client] + 1
	// holds is how many sessions e's client holds, the asking client's
	// counted with the one it asks for.
	holds := func(e *sessionEntry) int {
		if e.client == client {
			return after
		}
		return s.clients[e.client]
	}
	now := s.now()
	var best *sessionEntry
	for _, e := range s.entries {
		if e.sse || e.busy > 0 || now.Sub(e.last) < minIdle || own && e.client != client || holds(e) < after {
			continue
		}
		if best == nil || holds(e) > holds(best) || holds(e) == holds(best) && e.last.Before(best.last) {
			best = e
		}
	}
	return best
}

// openLocked is how many sessions are open or being opened.
func (s *Sessions) openLocked() int { return len(s.entries) + s.pending }

// waitLocked is how long until the first Streamable HTTP session of
// client ("" any) will have been idle for minIdle, and may be closed: one
// with a request in flight (or still being opened) not before minIdle.
// False when there is none (only SSE sessions): waiting alone makes no
// room.
func (s *Sessions) waitLocked(client string, minIdle time.Duration) (time.Duration, bool) {
	now := s.now()
	wait, ok := minIdle, false
	held := 0 // client's entries; the rest of s.clients[client] are being opened
	for _, e := range s.entries {
		if client != "" && e.client != client {
			continue
		}
		held++
		switch {
		case e.sse:
		case e.busy > 0:
			ok = true
		default:
			wait, ok = min(wait, max(0, minIdle-now.Sub(e.last))), true
		}
	}
	if client == "" && s.pending > 0 || client != "" && s.clients[client] > held {
		ok = true
	}
	return wait, ok
}

// refuseLocked counts r, logs when refusals begin, and returns r.
func (s *Sessions) refuseLocked(client string, r *refusal) *refusal {
	s.refused[r.reason]++
	if s.refusing == 0 {
		s.log.Warn().Str("client", client).Str("reason", r.reason).Int("limit", r.limit).Int("open", s.openLocked()).
			Msg("MCP sessions: refusing new sessions at the cap (logged once until one is taken again)")
	}
	s.refusing++
	return r
}

// opened turns client's reservation into the session id, as soon as the
// answer that names it goes out (before the opening request ends: its
// client may use the session at once, and a request then must find it
// counted and busy). The session is busy until the func it returns is
// called, at the end of the opening request.
func (s *Sessions) opened(client, id string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	k := mcpKey(id)
	e := &sessionEntry{key: k, client: client, last: s.now(), busy: 1}
	s.entries[k] = e
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.busy--
		e.last = s.now()
		// The SDK closes the session of an opening request that was not
		// an initialize as that request ends: the next reconcile finds
		// out.
		s.dirty = true
	}
}

// settle ends client's reservation when no answer went out during the
// opening request: the server opened the session id (when not ""), or
// none.
func (s *Sessions) settle(client, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	if id == "" {
		s.release(client)
		return
	}
	// It may already be closed (an opening request that was not
	// initialize): the next reconcile finds out.
	s.dirty = true
	k := mcpKey(id)
	s.entries[k] = &sessionEntry{key: k, client: client, last: s.now()}
}

// begin marks a request of the session under key in flight; the func it
// returns marks its end. It returns nil when the session is being closed:
// the request must not reach it.
func (s *Sessions) begin(key string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.closing[key]; ok {
		return nil
	}
	e, ok := s.entries[key]
	if !ok {
		return func() {}
	}
	e.busy++
	e.last = s.now()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		e.busy--
		e.last = s.now()
	}
}

// deleted ends the session under key once its client's DELETE was
// answered status. Only a 2xx means the server closed it: the SDK answers
// a DELETE it refuses (an unsupported Mcp-Protocol-Version: 400) before it
// looks the session up, and that session goes on, so it must stay counted
// (else a client could open sessions past every cap, and the sweep would
// never close them). Any other answer only makes the next reconcile check
// (a 404: the server may have closed it unseen).
func (s *Sessions) deleted(key string, status int) {
	if status >= 200 && status < 300 {
		s.forget(key)
		return
	}
	s.mu.Lock()
	s.dirty = true
	s.mu.Unlock()
}

// forget drops the session under key, which ended.
func (s *Sessions) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[key]; ok {
		s.forgetLocked(e)
	}
}

// addSSE counts a legacy SSE session of client, reserved by admit, and
// returns its key.
func (s *Sessions) addSSE(client string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending--
	s.serial++
	k := "sse:" + strconv.FormatInt(s.serial, 10)
	s.entries[k] = &sessionEntry{key: k, client: client, sse: true, last: s.now()}
	return k
}

func mcpKey(id string) string { return "mcp:" + id }

// count is how many sessions are open, and how many of them idle (for
// tests).
func (s *Sessions) count() (open, idle int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.openLocked(), len(s.idleLocked(""))
}
