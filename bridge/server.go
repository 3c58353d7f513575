// Package bridge is the MCP server an agent talks to: one tool, run_python,
// whose calls run in the sandbox. It owns the tool's definition and how a
// run's result is rendered (tool.go), a run's steps from its slot to its
// result, through the [Instances] it is given (run.go), asking the human and
// the run's trace (oversight.go, detached.go), sessions (sessions.go), and
// the limits on concurrent runs and shutdown (server.go). How it is served
// is package bridge/transport; what the code asks over the relay, package
// bridge/toolhost.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/bridge/snapshots"
	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Options configure a [Server].
type Options struct {
	// Instances gives each run its sandbox (see [Instances]).
	Instances Instances
	// Runs, if set, is where each run is registered while its code runs,
	// for the tool calls it makes ([toolhost.New] with the same Runs): they
	// ask the run's human and go in its trace.
	Runs *toolhost.Runs
	// Limits are the limits of each run. Limits.Timeout is the default
	// timeout, used when a call gives none.
	Limits sandbox.Limits
	// MaxTimeout is the largest timeout_seconds a call may ask for.
	MaxTimeout time.Duration
	// MaxCodeBytes bounds the code of one call (default 1 MiB); with a
	// Policy, its sandbox.max_code_bytes does.
	MaxCodeBytes int64
	// Policy, if set, replaces Limits and MaxTimeout with the policy in
	// force when each call arrives (hot-reloaded); each run is pinned to it
	// for its tool calls, and audited.
	Policy *policy.Store
	// MaxConcurrent runs at once (default 4); QueueLength more wait for a
	// slot (default 16); a call beyond that gets a busy error at once.
	MaxConcurrent int
	QueueLength   int
	// Artifacts bound the files a run sends back, when there is no
	// Policy (artifacts.DefaultLimits() when zero); with a Policy, its
	// artifacts section does.
	Artifacts artifacts.Limits
	// Store, if set, keeps the files that are returned by reference, and
	// the server answers resources/list and resources/read from it.
	Store *artifacts.Store
	// Resources, if set, reads the upstream servers' resources a call
	// passes in by URI (inputs), through the proxy under the policy.
	Resources ResourceReader
	// Snapshots, if set, keeps sessions' snapshots: with sessions and
	// snapshots.enabled on, run_python takes snapshot and restore.
	Snapshots *snapshots.Store
	// Tasks are the tasks section used when there is no Policy (tasks
	// off when zero); with a Policy, its tasks section is.
	Tasks policy.Tasks
	// Instance names this bridge among others behind one balancer: task
	// ids start with it, so that the balancer can send a task's polls to
	// the bridge that runs it. "" for a lone bridge.
	Instance string
	// Principal names who is calling a request: the owner of the
	// sessions, snapshots and stored files it makes. Nil: the request's
	// bearer token's [auth.TokenInfo] UserID (cmd/bridge puts the
	// principal of a token of --principals there). A request without one
	// is the local user's, "local": the one user of a stdio bridge, and of
	// the server's own bearer token.
	Principal func(mcp.Request) string
	// DataScience says the runner image holds the datascience variant's
	// packages (numpy, pandas, matplotlib...): the tool's description
	// says so.
	DataScience bool
	// ProgressInterval is the least time between two progress
	// notifications of one call (default 1 s).
	ProgressInterval time.Duration
	// Metrics, if set, counts the runs (by status and engine, with their
	// durations) and the sessions' ends.
	Metrics *metrics.Metrics
	// Tracer, if set, traces each call of run_python under the client's
	// span (traceparent in its _meta): its queue place, its instance, its
	// code's run, whose tool calls' spans ([toolhost.Options] Tracer) go
	// under it (tracing.go). Nil: nothing is traced.
	Tracer  trace.Tracer
	Version string
	Logger  zerolog.Logger
}

// Server is the bridge's MCP server. It is safe for concurrent use.
type Server struct {
	opts  Options
	mcp   *mcp.Server
	log   zerolog.Logger
	slots chan struct{} // a token per run allowed at once
	queue chan struct{} // a token per call allowed to wait or run

	// base is the parent of every call's run: Shutdown cancels it.
	base     context.Context
	stopBase context.CancelFunc
	// owners says which client session made each run's stored files.
	owners owners
	// reads are the resources/read answers being made: a token each.
	reads chan struct{}
	// sessions are the live sessions, when the policy enables them.
	sessions *sessions
	// detached are the runs that ask their human through results.
	detached detachedRuns
	// tasks are the calls answered by a task handle (tasks.go).
	tasks *taskStore
	// approved are the calls each client's human allowed for the rest of
	// its connection (tools.ask_remember: connection).
	approved connApprovals

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	// draining is set by Drain: new calls are refused. busy counts the
	// calls being handled and the runs tracked (a detached run outlives
	// its call); drained is closed when it is 0 while draining.
	draining bool
	busy     int
	drained  chan struct{}
}

// ErrBusy is returned to a call when every slot and queue place is taken.
var ErrBusy = errors.New("bridge is busy")

// CodeDraining is the JSON-RPC error code of a tools/call refused because
// the bridge drains (see [Server.Drain]).
const CodeDraining = -32000

// errDraining is the error of a call made while the bridge drains.
var errDraining = &jsonrpc.Error{Code: CodeDraining, Message: "the bridge is draining (shutting down) and takes no new calls; " +
	"the calls in flight finish. Reconnect (open a new MCP session; a 2026-07-28 client just calls again) to continue: behind a balancer the call goes to another instance, " +
	"where the sessions of this one do not exist: their state is lost, and a call naming one starts a new session"}

// New returns a [Server] with the run_python tool registered.
func New(opts Options) (*Server, error) {
	if opts.Instances == nil {
		return nil, errors.New("bridge: no Instances to run code in")
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if opts.MaxCodeBytes == 0 {
		opts.MaxCodeBytes = 1 << 20
	}
	if opts.MaxTimeout == 0 {
		opts.MaxTimeout = 5 * time.Minute
	}
	if opts.MaxTimeout < time.Second {
		return nil, fmt.Errorf("bridge: the maximum timeout must be at least 1s, got %s", opts.MaxTimeout)
	}
	if opts.MaxTimeout < opts.Limits.Timeout {
		return nil, fmt.Errorf("bridge: the default timeout %s is above the maximum %s", opts.Limits.Timeout, opts.MaxTimeout)
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 4
	}
	if opts.QueueLength < 0 {
		return nil, errors.New("bridge: queue length must not be negative")
	}
	if opts.ProgressInterval == 0 {
		opts.ProgressInterval = time.Second
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Tracer == nil {
		opts.Tracer = noop.Tracer{}
	}
	if opts.Artifacts == (artifacts.Limits{}) {
		opts.Artifacts = artifacts.DefaultLimits()
	}
	s := &Server{
		opts:  opts,
		log:   opts.Logger,
		slots: make(chan struct{}, opts.MaxConcurrent),
		queue: make(chan struct{}, opts.MaxConcurrent+opts.QueueLength),
		reads: make(chan struct{}, maxReadsAtOnce),
	}
	s.sessions = newSessions(opts.Logger)
	s.sessions.metrics = opts.Metrics
	s.base, s.stopBase = context.WithCancel(context.Background())
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: opts.Policy != nil}}
	if opts.Store != nil {
		caps.Resources = &mcp.ResourceCapabilities{}
	}
	if opts.Instance != "" && !instancePattern.MatchString(opts.Instance) {
		return nil, fmt.Errorf("instance %q: a bridge's name is 1 to 32 letters, digits, _ or . (--instance, $BRIDGE_INSTANCE)", opts.Instance)
	}
	s.tasks = newTaskStore(opts.Instance)
	if _, on := s.taskSettings(); on {
		caps.AddExtension(TasksExtension, nil)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "bridge", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Capabilities: caps,
	})
	if opts.Store != nil {
		s.mcp.AddReceivingMiddleware(s.resourcesMiddleware)
	}
	s.mcp.AddReceivingMiddleware(s.tasksMiddleware)
	if err := s.addTaskMethods(); err != nil {
		return nil, err
	}
	var snap *policy.Snapshot
	if opts.Policy != nil {
		snap = opts.Policy.Current()
	}
	registered := s.toolInfo(snap)
	s.mcp.AddTool(runPythonTool(registered), s.handleRunPython)
	if opts.Policy != nil {
		// The tool's definition states the largest timeout, whether
		// sessions exist and where the mounts are: keep it true. A
		// change is announced to clients (notifications/tools/list_changed).
		var mu sync.Mutex
		opts.Policy.OnChange(func(snap *policy.Snapshot) {
			mu.Lock()
			defer mu.Unlock()
			if ti := s.toolInfo(snap); !ti.equal(registered) {
				registered = ti
				s.mcp.AddTool(runPythonTool(ti), s.handleRunPython)
			}
		})
	}
	return s, nil
}

// toolInfo is what the tool's definition states under the policy snap
// (nil: the one in force, or [Options] without a policy).
func (s *Server) toolInfo(snap *policy.Snapshot) toolInfo {
	l, maxTimeout := s.limits(snap)
	ti := toolInfo{maxTimeout: maxTimeout, dataScience: s.opts.DataScience}
	if s.opts.Policy != nil {
		if snap == nil {
			snap = s.opts.Policy.Current()
		}
		ti.sessions = snap.Policy.Sessions.Enabled
		ti.snapshots = ti.sessions && snap.Policy.Snapshots.Enabled && s.opts.Snapshots != nil
	}
	for _, m := range l.Mounts {
		ti.mounts = append(ti.mounts, m.Path)
	}
	return ti
}

func (a toolInfo) equal(b toolInfo) bool {
	return a.maxTimeout == b.maxTimeout && a.sessions == b.sessions && a.snapshots == b.snapshots && a.dataScience == b.dataScience && slices.Equal(a.mounts, b.mounts)
}

// limits returns the limits of a run and the largest timeout a call may
// ask for: from the run's policy snapshot when there is a policy (the one
// in force when snap is nil), else from [Options].
func (s *Server) limits(snap *policy.Snapshot) (sandbox.Limits, time.Duration) {
	if s.opts.Policy == nil {
		return s.opts.Limits, s.opts.MaxTimeout
	}
	if snap == nil {
		snap = s.opts.Policy.Current()
	}
	return LimitsFrom(snap.Policy), snap.Policy.Sandbox.MaxTimeout
}

// maxCode is the most code one call may send, and the setting that says so.
func (s *Server) maxCode() (int64, string) {
	if s.opts.Policy == nil {
		return s.opts.MaxCodeBytes, "the bridge's Options.MaxCodeBytes"
	}
	return s.opts.Policy.Current().Policy.Sandbox.MaxCodeBytes, "sandbox.max_code_bytes"
}

// LimitsFrom are the sandbox limits a policy sets: its sandbox section and
// its mounts.
func LimitsFrom(pol *policy.Policy) sandbox.Limits {
	p := pol.Sandbox
	l := sandbox.DefaultLimits()
	l.Timeout, l.Memory, l.CPUs, l.Pids, l.TmpfsSize = p.Timeout, p.Memory, p.CPUs, p.Pids, p.TmpfsSize
	l.OutputBytes = int(p.OutputLimit)
	l.NProc = max(l.NProc, uint64(p.Pids))
	for _, m := range pol.Mounts {
		l.Mounts = append(l.Mounts, sandbox.DataMount{Host: m.Host, Path: m.Path})
	}
	return l
}

// MCP returns the MCP server to serve over a transport.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// track registers a call in flight and ties its ctx to the server's base
// context; the returned func unregisters it. It fails once Shutdown has
// begun.
func (s *Server) track(cancel context.CancelFunc) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the bridge is shutting down")
	}
	s.wg.Add(1)
	s.busy++
	stop := context.AfterFunc(s.base, cancel)
	return func() {
		stop()
		s.leave()
		s.wg.Done()
	}, nil
}

// enter registers a call being handled, unless the bridge drains: then
// only the answers of a detached run in flight (resume) are taken. The
// returned func unregisters it.
func (s *Server) enter(resume bool) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining && !resume {
		return nil, errDraining
	}
	s.busy++
	return s.leave, nil
}

// leave ends what enter or track registered.
func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	if s.busy == 0 && s.draining && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// Drain refuses new calls from now on (with a JSON-RPC error, code
// [CodeDraining], telling the client to reconnect), lets the calls and
// runs in flight go on, and returns a channel closed when none is left.
// The answers to the questions of a detached run in flight are still
// taken. Shutdown then ends what is left. It may be called more than once.
func (s *Server) Drain() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
	done := make(chan struct{})
	if s.busy == 0 {
		close(done)
		return done
	}
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	return s.drained
}

// InFlight is how many calls are being handled, and runs going on.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.busy
}

// sessionConfig is the sessions section of the policy in force, and
// whether sessions are on (never without a policy).
func (s *Server) sessionConfig() (policy.Sessions, bool) {
	if s.opts.Policy == nil {
		return policy.Sessions{}, false
	}
	cfg := s.opts.Policy.Current().Policy.Sessions
	return cfg, cfg.Enabled
}

// Sessions is how many sessions exist now.
func (s *Server) Sessions() int { return s.sessions.count() }

// Shutdown refuses new calls, cancels those in flight, ends the sessions,
// and waits until their containers are removed or ctx ends. It may be
// called more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stopBase()
	serr := s.sessions.closeAll(ctx)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		// A session whose container was still starting is removed by the
		// call that started it, which has ended now.
		if err := s.sessions.wait(ctx); err != nil {
			return err
		}
		return serr
	case <-ctx.Done():
		return fmt.Errorf("runs still in flight at shutdown: %w", ctx.Err())
	}
}

// Load is the work the Server has now, for /metrics.
func (s *Server) Load() metrics.Load {
	running := len(s.slots)
	return metrics.Load{Running: running, Waiting: max(len(s.queue)-running, 0), Sessions: s.sessions.count()}
}
