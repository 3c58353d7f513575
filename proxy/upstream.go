package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/metrics"
)

// Backoff after failed connects: the first retry may come after
// minBackoff, each further failure doubles the wait up to maxBackoff.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// upstream is one configured MCP server and the session to it. The session
// is opened on first use, shared by every caller, and reopened after the
// server exits or the connection drops; failed connects back off.
type upstream struct {
	cfg  ServerConfig
	opts *Options
	log  zerolog.Logger
	// changed is called (from its own goroutine) when the server's tool list
	// may have changed: a notifications/tools/list_changed, or a reconnect.
	changed func(name string)
	// connected, if set, gets each new session's initialize answer before
	// the session is used (the proxy pins what the server says of itself).
	connected func(info *mcp.InitializeResult)
	base      context.Context // cancelled by close: aborts connects
	// scrubber takes the secrets of the URL, the headers and the env out
	// of errors and of what the server writes to stderr.
	scrubber *Scrubber
	// raw holds the big results of calls that want them raw (raw.go).
	raw *rawResults
	// resCache holds the server's last resource listing
	// (resources_upstream.go).
	resCache resourceCache

	mu         sync.Mutex
	sess       *mcp.ClientSession
	sessDone   chan struct{} // closed when sess ends
	sessGen    uint64        // sess's generation (gen when it connected)
	info       *mcp.InitializeResult
	connecting chan struct{} // non-nil while a connect runs; closed when it ends
	lastErr    error         // why the last connect failed, or why the session ended
	failures   int           // connects failed in a row
	connects   int64         // connects that succeeded
	failed     int64         // connects that failed, in all
	retryAt    time.Time     // no new connect before this
	closed     bool
	procs      sync.WaitGroup // stderr readers and watchers

	// gen counts the sessions that connected: each new one (a restarted
	// server, a new process) gets the next number. Written under mu.
	gen atomic.Uint64
	// synced is the generation of the session whose tool list the proxy
	// last checked against the pins (Proxy.sync), written under the
	// proxy's regMu: a call goes only on a session of this generation,
	// whose server text was checked when it connected (checkedSession).
	synced atomic.Uint64

	// refreshing and refreshAgain coalesce tool-list refreshes (see
	// [Proxy].refreshServer).
	refreshing, refreshAgain atomic.Bool

	toolsMu  sync.Mutex
	tools    []*mcp.Tool // the last complete tools/list; nil until one succeeded
	toolsGen uint64      // the generation of the session that listed tools
	stale    bool        // list_changed since tools was read
}

// live is a session a caller got (upstream.session), with its generation.
type live struct {
	s    *mcp.ClientSession
	done <-chan struct{} // closed when s ends
	gen  uint64
}

func newUpstream(base context.Context, cfg ServerConfig, opts *Options, log zerolog.Logger, changed func(string)) *upstream {
	return &upstream{
		cfg:      cfg,
		opts:     opts,
		log:      log.With().Str("server", cfg.Name).Logger(),
		changed:  changed,
		base:     base,
		scrubber: NewScrubber([]string{cfg.URL}, append(mapValues(cfg.Headers), mapValues(cfg.Env)...)),
		raw:      newRawResults(),
	}
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, m[k])
	}
	return out
}

// Error kinds of an UpstreamError; they match the relay protocol's error
// types so the bridge can pass them on.
const (
	KindUpstream    = "upstream"
	KindTimeout     = "timeout"
	KindUnknownTool = "unknown_tool"
	KindUnknownSrv  = "unknown_server"
	KindLimit       = "limit"
	KindDenied      = "denied"
	// KindUnknownResource: no server has the resource, or several do and
	// the caller named none.
	KindUnknownResource = "unknown_resource"
)

// Error is a failure of the proxy or an upstream (not a tool's own error,
// which is a result with isError). Kind is one of the Kind constants.
type Error struct {
	Kind    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func errorf(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// session returns the live session, connecting if there is none. The
// connect runs on its own, so every caller (the one that started it too)
// waits for it only as long as its ctx allows. After a failed connect, or
// after sessions that died young twice in a row, calls fail at once until
// the backoff has passed.
func (u *upstream) session(ctx context.Context) (live, error) {
	u.mu.Lock()
	if u.sess != nil {
		l := live{u.sess, u.sessDone, u.sessGen}
		u.mu.Unlock()
		return l, nil
	}
	if u.closed {
		u.mu.Unlock()
		return live{}, errorf(KindUpstream, "server %q: the proxy is shutting down", u.cfg.Name)
	}
	ch := u.connecting
	if ch == nil {
		if wait := time.Until(u.retryAt); wait > 0 {
			err := u.lastErr
			u.mu.Unlock()
			return live{}, u.unavailable(err, wait)
		}
		ch = make(chan struct{})
		u.connecting = ch
		// Counted before the lock is released: close() waits for it.
		u.procs.Add(1)
		go u.connectAsync(ch)
	}
	u.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return live{}, u.ctxError(ctx, "waiting for the server to start")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sess == nil {
		if u.lastErr == nil {
			return live{}, errorf(KindUpstream, "server %q: the proxy is shutting down", u.cfg.Name)
		}
		return live{}, u.unavailable(u.lastErr, 0)
	}
	return live{u.sess, u.sessDone, u.sessGen}, nil
}

// connectAsync makes one connect attempt and records its outcome; ch is
// closed when it is known.
func (u *upstream) connectAsync(ch chan struct{}) {
	defer u.procs.Done()
	sess, err := u.connect()
	if err == nil && u.connected != nil {
		u.connected(sess.InitializeResult())
	}
	u.mu.Lock()
	defer func() {
		u.connecting = nil
		close(ch)
		u.mu.Unlock()
	}()
	if err != nil {
		err = u.scrub(err)
		u.failures++
		u.failed++
		u.lastErr = err
		u.retryAt = time.Now().Add(backoff(u.failures))
		// The one record of a failed start, at a level `bridge run` shows:
		// the stderr lines before it were logged at info.
		ev := u.log.Warn().Err(err).Dur("retry_in", backoff(u.failures))
		if u.cfg.Source != "" {
			ev = ev.Str("config", u.cfg.Source)
		}
		ev.Msg("upstream: cannot connect")
		return
	}
	if u.closed {
		go func() { _ = sess.Close() }()
		return
	}
	u.lastErr = nil
	u.connects++
	u.sess = sess
	u.sessGen = u.gen.Add(1)
	u.sessDone = make(chan struct{})
	u.info = sess.InitializeResult()
	u.procs.Add(1)
	go u.watch(sess, u.sessDone, time.Now())
	// A new process may offer other tools than the one before it: its
	// list is read again, here for the code's listings, and by the first
	// call on it before that call goes (Proxy.checkedSession).
	u.toolsMu.Lock()
	hadTools := u.tools != nil
	u.stale = true
	u.toolsMu.Unlock()
	if hadTools {
		go u.changed(u.cfg.Name)
	}
}

// scrub takes the secrets of the server's URL and headers out of an
// error's text (net/http quotes the URL whole, re-encoded; see [Scrubber]),
// and those of any other URL in it.
func (u *upstream) scrub(err error) error { return u.scrubber.Error(err) }

func backoff(failures int) time.Duration {
	d := minBackoff
	for i := 1; i < failures && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

func (u *upstream) unavailable(err error, retryIn time.Duration) error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	if retryIn > 0 {
		return errorf(KindUpstream, "server %q is unavailable (next attempt in %s): %v", u.cfg.Name, retryIn.Round(100*time.Millisecond), err)
	}
	return errorf(KindUpstream, "server %q is unavailable: %v", u.cfg.Name, err)
}

func (u *upstream) ctxError(ctx context.Context, doing string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errorf(KindTimeout, "server %q: timed out %s", u.cfg.Name, doing)
	}
	return errorf(KindUpstream, "server %q: cancelled while %s", u.cfg.Name, doing)
}

// youngDeath is how long a session must live for its end not to count as
// a failed start: a server that dies on arrival again and again is backed
// off like one that cannot start.
const youngDeath = 5 * time.Second

// watch waits for the session to end and forgets it, so the next use
// reconnects. done is closed only after that: a call that saw the session
// end must find it forgotten (and any backoff started) when it comes back.
func (u *upstream) watch(s *mcp.ClientSession, done chan struct{}, started time.Time) {
	defer u.procs.Done()
	defer close(done)
	err := s.Wait()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sess != s {
		return
	}
	u.sess = nil
	if u.closed {
		return
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = errors.New("the server closed the connection")
	}
	u.lastErr = u.scrub(err)
	if time.Since(started) < youngDeath {
		// The first early end is forgiven (a call may have crashed it);
		// the second in a row starts the backoff.
		u.failures++
		if u.failures >= 2 {
			u.retryAt = time.Now().Add(backoff(u.failures - 1))
		}
	} else {
		u.failures = 0
	}
	u.log.Warn().Err(u.lastErr).Msg("upstream: session ended; it is reopened on next use")
}

// connect opens a new session. It runs under the proxy's own context, not
// a caller's: a caller that gives up must not abort a connect others wait on.
// That context outlives the connect (the SSE transport's event stream is
// the request Connect makes): it ends with the session, or with the proxy.
func (u *upstream) connect() (*mcp.ClientSession, error) {
	ctx, cancel := context.WithCancel(u.base)
	timer := time.AfterFunc(u.opts.ConnectTimeout, cancel)
	if err := u.base.Err(); err != nil {
		cancel()
		return nil, errors.New("the proxy is shutting down")
	}
	t, proc, err := u.transport()
	if err != nil {
		cancel()
		return nil, err
	}
	t = &rawTransport{Transport: t, results: u.raw}
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-proxy", Version: u.opts.Version}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			u.toolsMu.Lock()
			u.stale = true
			u.toolsMu.Unlock()
			u.log.Debug().Msg("upstream: tool list changed")
			go u.changed(u.cfg.Name)
		},
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			u.resCache.invalidate()
		},
	})
	start := time.Now()
	s, err := client.Connect(ctx, t, nil)
	timedOut := !timer.Stop()
	if err == nil && timedOut {
		_ = s.Close()
		err = ctx.Err()
	}
	if err != nil {
		cancel()
		if u.base.Err() != nil {
			return nil, err
		}
		// A server that hung up before the bridge closed anything exited,
		// even if the timeout passed while the SDK closed the connection
		// (which waits for the process, and for its stderr up to WaitDelay).
		exited := proc != nil && (errors.Is(err, mcp.ErrConnectionClosed) || timedOut) && proc.serverHungUp()
		if timedOut && !exited {
			err = fmt.Errorf("no answer to initialize within %s", u.opts.ConnectTimeout)
		}
		if proc != nil {
			err = proc.startError(err, exited)
		}
		return nil, err
	}
	go func() { _ = s.Wait(); cancel() }()
	info := s.InitializeResult()
	ev := u.log.Info().Dur("took", time.Since(start))
	if info != nil && info.ServerInfo != nil {
		ev = ev.Str("name", info.ServerInfo.Name).Str("version", info.ServerInfo.Version)
	}
	ev.Msg("upstream: connected")
	return s, nil
}

// transport makes the transport to the server; for a stdio server, proc is
// the process it starts.
func (u *upstream) transport() (t mcp.Transport, proc *stdioProc, err error) {
	switch u.cfg.Type {
	case TypeStdio:
		cmd := exec.Command(u.cfg.Command, u.cfg.Args...)
		cmd.Dir = u.cfg.Cwd
		cmd.Env = upstreamEnviron(os.Environ())
		for _, k := range sortedKeys(u.cfg.Env) {
			cmd.Env = append(cmd.Env, k+"="+u.cfg.Env[k])
		}
		// Its own process group, so closing it also ends what it started
		// (npx runs node as a child); killed with the bridge if it dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		// A child that left the group but kept stderr open must not keep
		// Wait (and so Close) waiting.
		cmd.WaitDelay = time.Second
		pr, pw := io.Pipe()
		cmd.Stderr = pw
		proc := newStdioProc()
		u.procs.Add(1)
		go u.logStderr(pr, proc)
		// The SDK reads at most maxUpstreamMessage (16 MiB) per line from
		// the server: CommandTransport always uses mcp.DefaultMaxLineLength.
		return &closingTransport{
			// The SDK's own escalation signals only the group leader;
			// closingConn signals the whole group, sooner.
			CommandTransport: &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Minute},
			cmd:              cmd,
			proc:             proc,
			done: func(state *os.ProcessState) {
				proc.ended(state)
				killGroup(cmd)
				_ = pw.Close()
			},
		}, proc, nil
	case TypeHTTP:
		return &mcp.StreamableClientTransport{Endpoint: u.cfg.URL, HTTPClient: u.httpClient(), MaxRetries: -1,
			MaxEventSize: maxUpstreamMessage}, nil, nil
	case TypeSSE:
		return &mcp.SSEClientTransport{Endpoint: u.cfg.URL, HTTPClient: u.httpClient(), MaxEventSize: maxUpstreamMessage}, nil, nil
	}
	return nil, nil, fmt.Errorf("unknown transport type %q", u.cfg.Type)
}

// inheritedEnv are the variables a stdio server gets from the bridge's
// environment, the set the MCP SDKs' stdio clients pass (and so what
// servers written for Claude Desktop expect); everything else it needs is
// in its entry's "env". The bridge's own secrets (BRIDGE_HTTP_TOKEN,
// BRIDGE_PROXY_TOKEN) and whatever else the bridge was started with stay
// out.
var inheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}

// upstreamEnviron keeps the inheritedEnv variables of env.
func upstreamEnviron(env []string) []string {
	out := make([]string, 0, len(inheritedEnv))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(inheritedEnv, k) {
			out = append(out, kv)
		}
	}
	return out
}

// closingTransport runs done when the connection it made is closed (or
// could not be made), to end the process group and the stderr reader; done
// gets the process's state if it was waited for.
type closingTransport struct {
	*mcp.CommandTransport
	cmd  *exec.Cmd
	proc *stdioProc
	done func(*os.ProcessState)
}

func (t *closingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.CommandTransport.Connect(ctx)
	if err != nil {
		t.done(nil)
		return nil, err
	}
	return &closingConn{Connection: c, cmd: t.cmd, proc: t.proc, done: t.done}, nil
}

// How long a stdio server gets to exit once its stdin is closed, and then
// once its process group got SIGTERM, before SIGKILL.
const (
	stdinGrace   = 2 * time.Second
	sigtermGrace = 2 * time.Second
)

type closingConn struct {
	mcp.Connection
	cmd  *exec.Cmd
	proc *stdioProc
	once sync.Once
	done func(*os.ProcessState)
}

// Read and Write tell proc how they failed, so that an error can say
// whether the server hung up (exited) or the bridge gave up on it.
func (c *closingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err != nil {
		c.proc.ioFailed(err)
	}
	return m, err
}

func (c *closingConn) Write(ctx context.Context, m jsonrpc.Message) error {
	err := c.Connection.Write(ctx, m)
	if err != nil {
		c.proc.ioFailed(err)
	}
	return err
}

// Close closes the server's stdin (the SDK's Close, which then waits for
// the process); if the process group has not ended after stdinGrace it gets
// SIGTERM, and SIGKILL after sigtermGrace more.
func (c *closingConn) Close() error {
	c.proc.closeStarted()
	closed := make(chan error, 1)
	go func() { closed <- c.Connection.Close() }()
	var err error
	select {
	case err = <-closed:
	case <-time.After(stdinGrace):
		signalGroup(c.cmd, syscall.SIGTERM)
		select {
		case err = <-closed:
		case <-time.After(sigtermGrace):
			signalGroup(c.cmd, syscall.SIGKILL)
			err = <-closed
		}
	}
	c.once.Do(func() { c.done(waitedState(c.cmd, err)) })
	return err
}

// killGroup ends what is left of a stdio server's process group.
func killGroup(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGKILL) }

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process != nil && cmd.Process.Pid > 0 {
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	}
}

// httpClient sends the configured headers to the server's URL, and to no
// other, and bounds each answer; see newHTTPClient.
func (u *upstream) httpClient() *http.Client {
	return newHTTPClient(u.cfg.URL, u.cfg.Headers, maxUpstreamMessage)
}

// Bounds of one server's tool list: tools/list pages (each at most
// maxUpstreamMessage), tools, and the size of their definitions as JSON.
// The largest real servers list a few hundred tools in one page; a server
// past any bound is broken or hostile (one listed 99,500 tools, 275 MiB,
// in 5 s, following nextCursor forever), and the bridge refuses it rather
// than keep the tools so far: a cut list would be an arbitrary part that
// looks whole to the code. See listTools.
const (
	maxToolPages     = 100
	maxTools         = 10_000
	maxToolListBytes = 32 << 20
)

// listTools returns the server's tools and the generation of the session
// that listed them, from the cache unless the server said they changed (or
// a new session started). A server whose list goes past maxToolPages,
// maxTools or maxToolListBytes is refused (see refuse): the error says
// which bound, and no tool of it is listed.
func (u *upstream) listTools(ctx context.Context) ([]*mcp.Tool, uint64, error) {
	u.toolsMu.Lock()
	if u.tools != nil && !u.stale && u.toolsGen == u.gen.Load() {
		t, gen := u.tools, u.toolsGen
		u.toolsMu.Unlock()
		return t, gen, nil
	}
	u.toolsMu.Unlock()
	l, err := u.session(ctx)
	if err != nil {
		t, gen := u.cachedList()
		return t, gen, err
	}
	return u.listOn(ctx, l)
}

// listOn lists the tools of session l (see listTools), and keeps them
// unless a newer session's list is kept already. On an error it returns
// the last list kept, if any, and its generation.
func (u *upstream) listOn(ctx context.Context, l live) ([]*mcp.Tool, uint64, error) {
	u.toolsMu.Lock()
	u.stale = false // a change from now on marks it stale again
	u.toolsMu.Unlock()
	tools, err := u.fetchTools(ctx, l.s)
	var long *toolListTooLong
	switch {
	case errors.As(err, &long):
		refusal := errorf(KindUpstream, "server %q lists more tools than the bridge accepts (%s stopped the listing); "+
			"the bridge takes at most %d pages of tools/list, %d tools and %d MiB of tool definitions from one server, "+
			"and leaves this one out until it lists fewer: fix the server, or take it out of the servers config",
			u.cfg.Name, long.why, maxToolPages, maxTools, maxToolListBytes>>20)
		return u.refuse(l, refusal), l.gen, refusal
	case err != nil:
		u.toolsMu.Lock()
		u.stale = true
		u.toolsMu.Unlock()
		t, gen := u.cachedList()
		if ctx.Err() != nil {
			return t, gen, u.ctxError(ctx, "listing tools")
		}
		return t, gen, errorf(KindUpstream, "server %q: listing tools: %v", u.cfg.Name, u.scrub(err))
	}
	u.keepTools(tools, l.gen)
	return tools, l.gen, nil
}

// keepTools keeps the list of the session of generation gen, unless a
// newer session's list is kept already (a listing that outlived its
// session ended after the next one's).
func (u *upstream) keepTools(tools []*mcp.Tool, gen uint64) {
	u.toolsMu.Lock()
	defer u.toolsMu.Unlock()
	if gen >= u.toolsGen {
		u.tools, u.toolsGen = tools, gen
	}
}

// toolListTooLong is fetchTools' error for a list past a bound; why names
// the bound.
type toolListTooLong struct{ why string }

func (e *toolListTooLong) Error() string { return e.why }

// fetchTools follows the pages of tools/list within the bounds.
func (u *upstream) fetchTools(ctx context.Context, s *mcp.ClientSession) ([]*mcp.Tool, error) {
	tools := []*mcp.Tool{}
	size := 0
	params := &mcp.ListToolsParams{}
	for page := 1; ; page++ {
		res, err := s.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		js, err := json.Marshal(res.Tools)
		if err != nil {
			return nil, err
		}
		size += len(js)
		tools = append(tools, res.Tools...)
		switch {
		case len(tools) > maxTools:
			return nil, &toolListTooLong{fmt.Sprintf("tool %d", maxTools+1)}
		case size > maxToolListBytes:
			return nil, &toolListTooLong{fmt.Sprintf("%d MiB of definitions", maxToolListBytes>>20)}
		case res.NextCursor == "":
			return tools, nil
		case page == maxToolPages:
			return nil, &toolListTooLong{fmt.Sprintf("a nextCursor on page %d", maxToolPages)}
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
}

// refuse ends session l of a server that broke a bound, and returns the
// tools it lists now: none. The server is unavailable with err and
// tried again after the backoff, like one that cannot start; calls fail at
// once with err meanwhile.
func (u *upstream) refuse(l live, err *Error) []*mcp.Tool {
	s := l.s
	u.mu.Lock()
	if u.sess == s {
		u.sess = nil // watch leaves lastErr alone: s is not the session
		u.lastErr = err
		u.failures++
		u.retryAt = time.Now().Add(backoff(u.failures))
	}
	u.mu.Unlock()
	// Empty, not nil: the proxy then drops the tools it listed before.
	none := []*mcp.Tool{}
	u.keepTools(none, l.gen)
	u.toolsMu.Lock()
	u.stale = true
	u.toolsMu.Unlock()
	u.log.Warn().Str("error", err.Message).Msg("upstream: refused")
	go func() { _ = s.Close() }()
	return none
}

func (u *upstream) cachedTools() []*mcp.Tool {
	t, _ := u.cachedList()
	return t
}

// cachedList is the last list kept, and the generation of the session
// that listed it.
func (u *upstream) cachedList() ([]*mcp.Tool, uint64) {
	u.toolsMu.Lock()
	defer u.toolsMu.Unlock()
	return u.tools, u.toolsGen
}

// metricsState is the server's state for /metrics.
func (u *upstream) metricsState() metrics.UpstreamState {
	u.mu.Lock()
	defer u.mu.Unlock()
	return metrics.UpstreamState{Server: u.cfg.Name, Tried: u.connects+u.failed > 0, Up: u.sess != nil,
		Restarts: max(u.connects-1, 0), ConnectFailures: u.failed}
}

// status reports whether the server is connected, and the last error.
func (u *upstream) status() (connected bool, info *mcp.InitializeResult, lastErr error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sess != nil, u.info, u.lastErr
}

// call calls a tool; timeout bounds the call (the proxy's CallTool
// timeout when zero). With wantRaw, a big result comes back as the JSON the
// server sent (raw, with res an empty stand-in) rather than decoded
// (raw.go); a small one is decoded either way.
func (u *upstream) call(ctx context.Context, tool string, args any, timeout time.Duration, wantRaw bool) (res *mcp.CallToolResult, raw []byte, err error) {
	l, err := u.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	return u.callOn(ctx, l, tool, args, timeout, wantRaw)
}

// callOn is call on session l: the one the policy's gate checked, never
// another that replaced it since (a call on a session that ended fails).
func (u *upstream) callOn(ctx context.Context, l live, tool string, args any, timeout time.Duration, wantRaw bool) (res *mcp.CallToolResult, raw []byte, err error) {
	if timeout <= 0 {
		timeout = u.opts.CallTimeout
	}
	s, done := l.s, l.done
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	var tok string
	if wantRaw {
		tok = u.raw.expect()
		params.Meta = mcp.Meta{metaRawCall: tok}
	}
	res, err = s.CallTool(ctx, params)
	if tok != "" {
		raw = u.raw.take(tok)
	}
	if err == nil {
		return res, raw, nil
	}
	raw = nil
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, nil, errorf(KindTimeout, "server %q: tool %q did not answer within %s", u.cfg.Name, tool, timeout)
	case ctx.Err() != nil:
		return nil, nil, errorf(KindUpstream, "server %q: tool %q: call cancelled", u.cfg.Name, tool)
	}
	// Did the session end under the call? Then say so first: that is what
	// the user needs to know. The transport's wording follows, as it may
	// say why (an answer over maxUpstreamMessage).
	select {
	case <-done:
		return nil, nil, errorf(KindUpstream, "server %q exited or disconnected during the call to %q; it is restarted on next use (%v)", u.cfg.Name, tool, u.scrub(err))
	case <-time.After(50 * time.Millisecond):
	}
	return nil, nil, errorf(KindUpstream, "server %q: tool %q: %v", u.cfg.Name, tool, u.scrub(err))
}

// close ends the session and the server process, and waits for the
// goroutines that watch them.
func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	s := u.sess
	u.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
	u.procs.Wait()
}
