package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// sessionNameRule is what a session name may be (the agent picks it): 1
// to 64 letters, digits, '_', '.' or '-', starting with a letter or digit.
// The tool's input schema states it as the session's pattern; \w is
// [A-Za-z0-9_] in Go's regexp and in JSON Schema's (ECMA-262) alike.
const sessionNameRule = `^[A-Za-z0-9][\w.-]{0,63}$`

var sessionNamePattern = regexp.MustCompile(sessionNameRule)

// sessionBusyWait bounds how long a call waits for its session's previous
// call to end before it is answered busy (the call's own timeout, if
// shorter, bounds it too).
const sessionBusyWait = 10 * time.Second

// sessionKey names a session and who calls it: the principal (a bearer
// token's name, or the local user) that owns it, and the name it gave. A
// name is the bridge's: another principal naming it is refused
// (errSessionOwned), never given a session of its own by that name.
type sessionKey struct {
	owner string
	name  string
}

// session is one container and interpreter kept across calls.
type session struct {
	key sessionKey
	// id names the session's container (its run id) and its log lines.
	id      string
	created time.Time
	// lock is held by the call running in the session, and by its start.
	lock chan struct{}
	// approved are the calls the human allowed for the rest of the session.
	approved approvals
	// vault holds the personal values its calls' tool results held
	// (tokenize): a placeholder kept in a variable keeps its meaning. A
	// remote MCP proxy keeps them under vaultKey until vaultEnds, when the
	// session ends at the latest (sessions.max_lifetime).
	vault     policy.VaultSlot
	vaultKey  string
	vaultEnds time.Time

	// Under sessions.mu.
	inst  sandbox.Instance // nil until started
	calls int
	ended bool
	why   string      // why it ended
	timer *time.Timer // idle timeout, then max lifetime
}

// sessions are the live sessions of a [Server].
type sessions struct {
	log     zerolog.Logger
	metrics *metrics.Metrics // counts the sessions' ends; nil: not counted

	mu       sync.Mutex
	m        map[string]*session // by name
	closed   bool
	removing sync.WaitGroup // containers of ended sessions being removed
}

func newSessions(log zerolog.Logger) *sessions {
	return &sessions{log: log, m: map[string]*session{}}
}

// errSessionsClosed is open's refusal once the bridge shuts down;
// errTooManySessions when sessions.max exist; errSessionCancelled when the
// call gave up while it waited to get in.
var (
	errSessionsClosed   = errors.New("the bridge is shutting down")
	errTooManySessions  = errors.New("too many sessions")
	errSessionEnded     = errors.New("session ended")
	errSessionCancelled = errors.New("cancelled while waiting for the session")
	errSessionExists    = errors.New("the session exists")
	errSessionOwned     = errors.New("the session belongs to another principal")
)

// ownedError is the refusal of a call naming another principal's
// session: it says no more than that the name is taken.
func ownedError(name string) error {
	return fmt.Errorf("%w: session %q is held by another principal on this bridge; it can be neither used nor ended by you: name another session", errSessionOwned, name)
}

// check refuses key when its name is another principal's session.
func (ss *sessions) check(key sessionKey) error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.m[key.name]; s != nil && s.key.owner != key.owner {
		return ownedError(key.name)
	}
	return nil
}

// heldBy is how many sessions owner holds. ss.mu is held.
func (ss *sessions) heldBy(owner string) int {
	n := 0
	for _, s := range ss.m {
		if s.key.owner == owner {
			n++
		}
	}
	return n
}

// sessionCall is one call's way into its session, as [Instances]: Acquire
// gets the call into the session (waiting while another call runs there),
// starting the session, its container from the [Instances] under it, when
// it does not exist; the Instance it returns runs the call's code in the
// session's interpreter, and its Close lets the next call in, or ends the
// session on its limits.
type sessionCall struct {
	ss       *sessions
	key      sessionKey
	cfg      policy.Sessions
	busyWait time.Duration
	under    Instances

	// fresh: the call starts a new session (a restore), never joins one
	// that another call opened meanwhile.
	fresh bool

	s *session // once in
	// isNew says the session had no call that ran before this one: a new
	// session, with no state of earlier calls.
	isNew bool
	ran   bool
	why   string // why the session ended with this call ("" if it lives on)
}

// call makes the way in of one call to key's session.
func (ss *sessions) call(key sessionKey, cfg policy.Sessions, busyWait time.Duration, under Instances) *sessionCall {
	return &sessionCall{ss: ss, key: key, cfg: cfg, busyWait: busyWait, under: under}
}

// Acquire gets the call into its session; a new session's container is
// under's instance of limits l. runID names that container.
func (c *sessionCall) Acquire(ctx context.Context, l sandbox.Limits, _ string) (sandbox.Instance, error) {
	s, err := c.ss.open(ctx, c.key, c.cfg, c.busyWait, c.fresh, func(id string) (sandbox.Instance, error) {
		return c.under.Acquire(ctx, l, id)
	})
	switch {
	case err == nil && ctx.Err() != nil:
		// In the session, but the call was cancelled meanwhile: run nothing.
		c.ss.done(s, c.cfg, false)
		return nil, errSessionCancelled
	case err != nil && ctx.Err() != nil:
		return nil, errSessionCancelled
	case err != nil:
		return nil, err
	}
	c.s = s
	c.ss.mu.Lock()
	c.isNew = s.calls == 0
	c.ss.mu.Unlock()
	return c, nil
}

// Exec runs x in the session's interpreter. An error because the session
// was ended under the call (reset, its client gone, shutdown) is that, a
// cancelled call, not an engine's failure.
func (c *sessionCall) Exec(ctx context.Context, x sandbox.ExecRequest) (sandbox.Result, error) {
	c.ran = true
	res, err := c.s.inst.Exec(ctx, x)
	if err != nil && c.s.inst.Closed() {
		res.Status, res.ExitCode, res.Message, err = sandbox.StatusCancelled, -1, "the session ended during the call", nil
	}
	return res, err
}

// Pack packs the session's /tmp ([sandbox.Packer]).
func (c *sessionCall) Pack(ctx context.Context, w io.Writer, maxBytes int64) (int64, error) {
	p, ok := c.s.inst.(sandbox.Packer)
	if !ok {
		return 0, errors.New("this session's sandbox cannot be packed")
	}
	return p.Pack(ctx, w, maxBytes)
}

// MemoryTag is the session's [sandbox.MemorySaver.MemoryTag].
func (c *sessionCall) MemoryTag(ctx context.Context) (string, error) {
	m, ok := c.s.inst.(sandbox.MemorySaver)
	if !ok {
		return "", sandbox.ErrNoCheckpoint
	}
	return m.MemoryTag(ctx)
}

// SaveMemory saves the session whole ([sandbox.MemorySaver]).
func (c *sessionCall) SaveMemory(ctx context.Context, dir string) error {
	m, ok := c.s.inst.(sandbox.MemorySaver)
	if !ok {
		return sandbox.ErrNoCheckpoint
	}
	return m.SaveMemory(ctx, dir)
}

// has reports whether key's session exists (whoever owns it).
func (ss *sessions) has(key sessionKey) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[key.name]
	return s != nil && !s.ended
}

// Kept reports whether the session's interpreter is there for a next call.
func (c *sessionCall) Kept() bool { return c.s.inst.Kept() }

// Closed reports whether the session's container was closed.
func (c *sessionCall) Closed() bool { return c.s.inst.Closed() }

// Close lets the session's next call in, or ends the session (why says
// why); its container is not this call's to close.
func (c *sessionCall) Close(context.Context) error {
	c.why = c.ss.done(c.s, c.cfg, c.ran)
	return nil
}

// ended is the note the result of a call whose session ended with it
// carries, "" when it lives on (or the call had no session: c is nil).
func (c *sessionCall) ended(name string) string {
	if c == nil || c.why == "" {
		return ""
	}
	return fmt.Sprintf("session %q ended: %s; its state is lost, and the next call with this session starts a new one", name, c.why)
}

// open finds the client's session name, or makes it, and returns it with
// its lock held (the caller runs in it, then calls done). A new session's
// container is started by start.
func (ss *sessions) open(ctx context.Context, key sessionKey, cfg policy.Sessions, busyWait time.Duration, fresh bool, start func(id string) (sandbox.Instance, error)) (s *session, err error) {
	for {
		ss.mu.Lock()
		if ss.closed {
			ss.mu.Unlock()
			return nil, errSessionsClosed
		}
		s = ss.m[key.name]
		if s != nil && s.key.owner != key.owner {
			ss.mu.Unlock()
			return nil, ownedError(key.name)
		}
		if s == nil {
			if len(ss.m) >= cfg.Max {
				ss.mu.Unlock()
				return nil, fmt.Errorf("%w: %d sessions exist, the most the policy allows (sessions.max): end one with reset, or call without session", errTooManySessions, cfg.Max)
			}
			if most := cfg.PerPrincipal(); ss.heldBy(key.owner) >= most {
				ss.mu.Unlock()
				return nil, fmt.Errorf("%w: you hold %d sessions, the most one principal may (sessions.max_per_principal): end one with reset, or call without session", errTooManySessions, most)
			}
			now := time.Now()
			s = &session{key: key, id: sandbox.NewRunID(), created: now, lock: make(chan struct{}, 1),
				vaultKey: sandbox.NewRunID() + sandbox.NewRunID(), vaultEnds: now.Add(cfg.MaxLifetime)}
			s.lock <- struct{}{} // the start holds it
			ss.m[key.name] = s
			ss.mu.Unlock()
			inst, err := start(s.id)
			ss.mu.Lock()
			if err != nil {
				s.ended = true
				if ss.m[key.name] == s { // a reset meanwhile may have let another take the name
					delete(ss.m, key.name)
				}
				ss.mu.Unlock()
				<-s.lock
				return nil, err
			}
			s.inst = inst
			ended, why := s.ended, s.why
			ss.mu.Unlock()
			if ended { // reset or shut down meanwhile: endLocked could not remove it
				ss.remove(s, inst)
				<-s.lock
				return nil, fmt.Errorf("%w: the session ended while its container started (%s)", errSessionEnded, why)
			}
			ss.log.Info().Str("session", s.id).Str("name", key.name).Msg("session started")
			return s, nil
		}
		ss.mu.Unlock()
		if fresh {
			return nil, fmt.Errorf("%w: session %q was started by another call meanwhile; restore starts a new session: name another one", errSessionExists, key.name)
		}

		wait := time.NewTimer(busyWait)
		select {
		case s.lock <- struct{}{}:
			wait.Stop()
		case <-wait.C:
			return nil, fmt.Errorf("%w: session %q is still running another call (one call at a time per session); try again when it has answered", ErrBusy, key.name)
		case <-ctx.Done():
			wait.Stop()
			return nil, ctx.Err()
		}
		ss.mu.Lock()
		gone := s.ended
		if !gone && s.timer != nil {
			s.timer.Stop() // no idle timeout while a call runs
		}
		ss.mu.Unlock()
		if !gone {
			return s, nil
		}
		<-s.lock // it ended while we waited: make a new one
	}
}

// done is called when the call that opened s ended (ran: it ran code in
// it): it releases the session for the next call, or ends it, and says why
// it ended ("" if it lives on).
func (ss *sessions) done(s *session, cfg policy.Sessions, ran bool) (ended string) {
	ss.mu.Lock()
	if ran {
		s.calls++
	}
	reason := ""
	switch {
	case s.ended:
		ended = s.why
	case !s.inst.Kept():
		reason, ended = "interpreter_gone", "its interpreter is gone"
	case s.calls >= cfg.MaxCalls:
		reason, ended = "max_calls", fmt.Sprintf("it made the %d calls a session may make (sessions.max_calls)", cfg.MaxCalls)
	case time.Since(s.created) >= cfg.MaxLifetime:
		reason, ended = "lifetime", fmt.Sprintf("it reached the %s a session may live (sessions.max_lifetime)", cfg.MaxLifetime)
	}
	if ended != "" {
		ss.endLocked(s, reason, ended)
		ss.mu.Unlock()
		<-s.lock
		return ended
	}
	ss.mu.Unlock()
	<-s.lock
	// Idle for IdleTimeout, or its lifetime's end, whichever comes first.
	// Armed once the lock is free, so that expire finds it so; a call that
	// took it meanwhile stopped no timer, and its own end arms the next.
	wait := min(cfg.IdleTimeout, cfg.MaxLifetime-time.Since(s.created))
	reason, why := "idle", fmt.Sprintf("idle for %s (sessions.idle_timeout)", cfg.IdleTimeout)
	if wait < cfg.IdleTimeout {
		reason, why = "lifetime", fmt.Sprintf("it reached the %s a session may live (sessions.max_lifetime)", cfg.MaxLifetime)
	}
	t := time.AfterFunc(wait, func() { ss.expire(s, reason, why) })
	ss.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = t
	if s.ended {
		t.Stop()
	}
	ss.mu.Unlock()
	return ""
}

// expire ends s from its timer, unless a call is running in it (that
// call's end sets the next timer).
func (ss *sessions) expire(s *session, reason, why string) {
	select {
	case s.lock <- struct{}{}:
	default:
		return
	}
	ss.mu.Lock()
	ss.endLocked(s, reason, why)
	ss.mu.Unlock()
	<-s.lock
}

// reset ends the principal's session name, if there is one; a call
// running in it is cut short. It reports whether there was one, and
// refuses another principal's.
func (ss *sessions) reset(key sessionKey) (bool, error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[key.name]
	if s == nil {
		return false, nil
	}
	if s.key.owner != key.owner {
		return false, ownedError(key.name)
	}
	ss.endLocked(s, "reset", "reset by the agent")
	return true, nil
}

// endLocked ends s for reason (a word for /metrics; why says it to the
// agent): it leaves the map at once, and its container is removed in the
// background (closeAll waits for that). ss.mu is held.
func (ss *sessions) endLocked(s *session, reason, why string) {
	if s.ended {
		return
	}
	s.ended, s.why = true, why
	ss.metrics.SessionEnded(reason)
	if s.timer != nil {
		s.timer.Stop()
	}
	if ss.m[s.key.name] == s {
		delete(ss.m, s.key.name)
	}
	if s.inst != nil {
		ss.log.Info().Str("session", s.id).Str("name", s.key.name).Int("calls", s.calls).Str("why", why).Msg("session ended")
		ss.remove(s, s.inst)
	}
}

// remove closes inst in the background.
func (ss *sessions) remove(s *session, inst sandbox.Instance) {
	ss.removing.Add(1)
	go func() {
		defer ss.removing.Done()
		if err := inst.Close(context.Background()); err != nil {
			ss.log.Warn().Err(err).Str("session", s.id).Msg("removing a session's container")
		}
	}()
}

// count is how many sessions exist.
func (ss *sessions) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.m)
}

// closeAll ends every session and waits until their containers are
// removed or ctx ends. No session starts afterwards.
func (ss *sessions) closeAll(ctx context.Context) error {
	ss.mu.Lock()
	ss.closed = true
	for _, s := range ss.m {
		ss.endLocked(s, "shutdown", "the bridge is shutting down")
	}
	ss.mu.Unlock()
	return ss.wait(ctx)
}

// wait waits until the containers of ended sessions are removed, or ctx
// ends.
func (ss *sessions) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		ss.removing.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sessions' containers were not all removed in time (the next start of the bridge removes them): %w", ctx.Err())
	}
}
