package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// The run path in two halves: a [Container] is started, its runner connected
// and waiting, not yet given code (its limits were fixed when it was
// created); Exec runs one piece of code in it. A warm pool keeps [Containers]
// ahead of time, a session runs several Execs in one, and Run is Acquire +
// Exec + Close.

// Instance is a sandbox that code runs in, however it was got: a [Container]
// started for the run ([Executor.Acquire]), one a [Pool] had ready
// ([Pool.Acquire]), a session's (the bridge keeps those). Exec runs code in
// it: once, or, when its first Exec asked for a session, again and again
// while Kept says the interpreter is there. Close gives it up; it must be
// called on every [Instance] an Acquire returns.
type Instance interface {
	Exec(ctx context.Context, x ExecRequest) (Result, error)
	// Kept reports whether a session's interpreter is there for another
	// Exec.
	Kept() bool
	// Closed reports whether Close was called (by anyone).
	Closed() bool
	Close(ctx context.Context) error
}

var (
	_ Instance = (*Container)(nil)
	_ Instance = (*Lease)(nil)
)

// maxSocketPath is the size of sun_path on Linux, terminating NUL included.
const maxSocketPath = 108

// ErrStartCancelled is Start's error when ctx ended before the runner
// connected; the container made so far is removed.
var ErrStartCancelled = errors.New("cancelled before the code started")

// errNotHandedOver is Exec's error when the code could not be given to the
// runner: the instance died while it waited (a pooled one may), nothing
// ran, and the code may run in another.
var errNotHandedOver = errors.New("the sandbox ended before it received the code")

// Container is one started container with its runner connected, waiting
// for code. Exec runs code in it once (or a session's code, again and
// again); Close removes it. Close must be called on every [Container] Start
// returns.
type Container struct {
	e    *Executor
	name string // the container's name part and label (LabelRunID)
	id   string // the engine's container id
	dir  string // the run directory holding the socket
	// limits are those the container was created with.
	limits Limits
	// mounted are its data mounts' host folders as they were when it was
	// created (nil where a stat failed: the create fails then), in the
	// order of limits.Mounts: a pooled container whose folders are no
	// longer these must not run code (mountsChanged).
	mounted []os.FileInfo
	conn    *runnerConn
	log     zerolog.Logger
	start   time.Time // when Start began
	// exited delivers the container's end, once; gone is closed at the
	// same moment, for those who only ask whether it ended (the pool);
	// stopWait ends the wait.
	exited   chan waitResult
	gone     chan struct{}
	stopWait context.CancelFunc

	mu     sync.Mutex
	used   bool // an Exec began
	closed bool
	// A session's instance runs one Exec after another: session is set by
	// its first Exec, busy while one runs, and kept false once an Exec
	// ended in a way that leaves no interpreter to go on with.
	session bool
	busy    bool
	kept    bool
	// restores counts the sandboxes SaveMemory restored it as: each is
	// named after the container with its count.
	restores int
}

// ID is the container's name: the run id it was started under (container
// label LabelRunID).
func (i *Container) ID() string { return i.name }

// ended reports whether the container is known to have stopped.
func (i *Container) ended() bool {
	select {
	case <-i.gone:
		return true
	default:
		return false
	}
}

// Python is the interpreter version the runner reported.
func (i *Container) Python() string { return i.conn.hello.Python }

// claim names the run that took a container a pool started ahead, for its
// log lines.
func (i *Container) claim(runID string) {
	i.mu.Lock()
	i.log = i.log.With().Str("run_id", runID).Logger()
	i.mu.Unlock()
}

// Acquire starts a container for one run (Start), as an [Instance].
func (e *Executor) Acquire(ctx context.Context, l Limits, runID string) (Instance, error) {
	return e.Start(ctx, l, runID)
}

// Start creates and starts a container with limits l (l.Timeout and
// l.OutputBytes are not used: they belong to each Exec) and waits for its
// runner to connect. name names the container (a run id: 1 to 32
// lower-case letters and digits). On any error, everything made so far is
// removed before Start returns; a ctx that ends first returns an error
// wrapping ErrStartCancelled.
func (e *Executor) Start(ctx context.Context, l Limits, name string) (*Container, error) {
	return e.start(ctx, l, name, false)
}

// start is Start; pooled labels the container as made ahead of time
// (LabelPooled). Its steps: the run directory and its socket, the
// container created, started, and its runner connected.
func (e *Executor) start(ctx context.Context, l Limits, name string, pooled bool) (inst *Container, err error) {
	start := time.Now()
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("invalid limits: %w", err)
	}
	if !validRunID(name) {
		return nil, fmt.Errorf("invalid run id %q: 1 to 32 lower-case letters and digits", name)
	}
	if !e.enforce.All() && !e.opts.AllowUnenforcedLimits {
		return nil, fmt.Errorf("%w on %s: %s (to run anyway without these limits, pass --allow-unenforced-limits, or set require_enforced_limits: false in the policy)",
			ErrLimitsNotEnforced, e.rt.Name(), e.enforce.Reason)
	}
	key := "run_id"
	if pooled {
		key = "pooled" // Pool.Acquire adds the run_id of the run that takes it
	}
	log := e.log.With().Str(key, name).Str("engine", e.rt.Name()).Logger()
	i := &Container{e: e, name: name, log: log, start: start, limits: l}
	defer func() {
		if err != nil {
			if cerr := i.Close(ctx); cerr != nil {
				log.Warn().Err(cerr).Msg("cleaning up a container that failed to start")
			}
		}
	}()
	ln, err := i.makeRunDir()
	if err != nil {
		return nil, err
	}
	// One runner per container: the listener is closed once it connected,
	// or when Start gives up.
	defer ln.Close()
	token := newID(16)
	if err := i.create(ctx, token, pooled); err != nil {
		return nil, err
	}
	if err := i.startAndConnect(ctx, ln, token); err != nil {
		return nil, err
	}
	return i, nil
}

// makeRunDir makes the container's run directory, and the relay socket in
// it that its runner connects to.
func (i *Container) makeRunDir() (*net.UnixListener, error) {
	dir, err := os.MkdirTemp(i.e.runRoot, i.e.dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating run directory: %w", err)
	}
	i.dir = dir
	// The container's uid must enter the directory and connect to the socket.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "relay.sock")
	if len(sock) >= maxSocketPath {
		return nil, fmt.Errorf("relay socket path %s is %d bytes, over the %d a unix socket allows: set XDG_RUNTIME_DIR (or TMPDIR) to a shorter directory", sock, len(sock), maxSocketPath-1)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("creating relay socket: %w", err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// create makes the container from its hardened spec. It runs to its end
// even when ctx is cancelled (an engine that made a container must never
// leave it unknown to us), bounded by StartTimeout instead.
func (i *Container) create(ctx context.Context, token string, pooled bool) error {
	e := i.e
	spec := i.spec(token, pooled)
	i.mounted = statDataMounts(i.limits.Mounts)
	engineCtx := context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(engineCtx, e.opts.StartTimeout)
	id, err := e.rt.Create(cctx, spec)
	cancel()
	if err != nil {
		// A create cut short may still have made the container: remove it
		// by name, which the engines accept as well as an id.
		e.remove(engineCtx, spec.Name, i.log)
		if errors.Is(err, ErrImageNotFound) {
			return fmt.Errorf("%w; %s", err, imageHint(e.opts, e.rt.Name()))
		}
		return e.withHint(fmt.Errorf("creating container: %w", err))
	}
	i.id = id
	e.host.created(id)
	if ctx.Err() != nil {
		return ErrStartCancelled
	}
	return nil
}

// spec is the container's hardened spec, its runner to say hello with
// token; pooled labels it as made ahead of time.
func (i *Container) spec(token string, pooled bool) ContainerSpec {
	e := i.e
	spec := NewSpec(i.name, e.opts.Image, i.dir, token, i.limits)
	spec.OCIRuntime = e.runtime
	if e.effective == OCIRuntimeRunsc {
		spec.ForGVisor()
	}
	if e.owner != "" {
		spec.Labels[LabelOwner] = e.owner
	}
	if pooled {
		spec.Labels[LabelPooled] = "true"
	}
	if dropped := dropUnenforced(&spec, e.enforce); len(dropped) > 0 {
		// Only reachable with AllowUnenforcedLimits: ask for nothing the
		// engine would drop, so what runs is what the spec says.
		i.log.Warn().Strs("limits", dropped).Msg("running without limits the engine cannot enforce")
	}
	return spec
}

// startAndConnect starts the container and waits for its runner to
// connect with token, watching the container's end from then on.
func (i *Container) startAndConnect(ctx context.Context, ln *net.UnixListener, token string) error {
	e := i.e
	startDone := make(chan struct{})
	defer close(startDone)
	accepted := make(chan *runnerConn)
	go acceptRunner(ln, token, false, accepted, startDone, i.log)

	engineCtx := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(engineCtx, e.opts.StartTimeout)
	err := e.rt.Start(sctx, i.id)
	cancel()
	if err != nil {
		return e.withHint(fmt.Errorf("starting container: %w", err))
	}
	// Engines answer a wait on a created container at once, so it starts
	// after Start.
	i.watch(engineCtx)

	startTimer := time.NewTimer(e.opts.StartTimeout)
	defer startTimer.Stop()
	select {
	case i.conn = <-accepted:
		return i.confirm(engineCtx)
	case w := <-i.exited:
		return e.earlyExit(ctx, i.id, w, i.limits)
	case <-startTimer.C:
		return fmt.Errorf("the runner did not connect within %s of the container starting; run `bridge doctor`", e.opts.StartTimeout)
	case <-ctx.Done():
		return ErrStartCancelled
	}
}

// watch waits on the container in the background for its whole life (or
// until a checkpoint ends it: [Container.SaveMemory] watches the restored
// one anew).
func (i *Container) watch(ctx context.Context) {
	waitCtx, stopWait := context.WithCancel(ctx)
	exited, gone, id := make(chan waitResult, 1), make(chan struct{}), i.id
	i.stopWait, i.exited, i.gone = stopWait, exited, gone
	go func() {
		st, err := i.e.rt.Wait(waitCtx, id)
		exited <- waitResult{st, err}
		close(gone)
	}()
}

// Confirmer is a [Runtime] that can tell whether a container's runner came
// from the container it started: on Kubernetes, a pod's name (and so its
// run folder) passes to another pod once it is deleted.
type Confirmer interface {
	Confirm(ctx context.Context, id string) error
}

// confirm closes a runner connection that did not come from the
// container started for it.
func (i *Container) confirm(ctx context.Context) error {
	c, ok := i.e.rt.(Confirmer)
	if !ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, i.e.opts.StartTimeout)
	defer cancel()
	if err := c.Confirm(cctx, i.id); err != nil {
		i.conn.Close()
		i.conn = nil
		return fmt.Errorf("the runner that connected: %w", err)
	}
	return nil
}

// ExecRequest is one piece of code to run in an [Instance].
type ExecRequest struct {
	// RunID names the execution for tool calls and logs.
	RunID string
	Code  string
	// Timeout bounds the code's execution, from the moment it is handed
	// to the runner; the container is killed when it passes.
	Timeout time.Duration
	// OutputBytes caps each of stdout and stderr.
	OutputBytes int
	// Files bound the files sent back; the zero value sends none.
	Files FileLimits
	// Sink receives output and files as they arrive; NoSink when nil.
	Sink Sink
	// Began is when the run began, from which [Result.Startup] counts (the
	// container's start when zero): a run that took a ready container
	// waited only for that.
	Began time.Time
	// Session keeps the interpreter (variables, imports, /tmp) for the
	// next Exec of this instance. Its timeout or cancellation interrupts
	// the code (KeyboardInterrupt) rather than killing the container,
	// unless the code does not stop within the interrupt grace.
	Session bool
	// Script runs the code as `python3 FILE` would, not as a notebook
	// cell: the value of its last expression is not shown, and figures
	// left open do not come back.
	Script bool
	// Inputs are put in the sandbox's inputs folder before the code runs;
	// one the runner cannot write fails the run before the code starts.
	Inputs []InputFile
}

// Exec runs x.Code in the instance and reports how it ended. An instance
// runs code once, unless its first Exec asked for a session (x.Session):
// then it runs one Exec after another, in the same interpreter, for as
// long as Kept says so. Failures of the code are in the [Result]; an error
// means the code could not be run, or the engine failed mid-run. Exec
// does not remove the container: Close does. Its steps: the code handed
// over, the runner's frames served, the end awaited, the outcome told.
func (i *Container) Exec(ctx context.Context, x ExecRequest) (res Result, err error) {
	res.RunID = x.RunID
	first, err := i.begin(x)
	if err != nil {
		return res, err
	}
	kept := false // the interpreter is there for the next Exec of a session
	defer func() { i.finish(kept && err == nil) }()
	if x.Timeout <= 0 {
		return res, fmt.Errorf("timeout must be positive, got %s", x.Timeout)
	}
	if x.Sink == nil {
		x.Sink = NoSink{}
	}
	execStart := time.Now()
	defer func() {
		if res.Duration == 0 {
			res.Duration = time.Since(execStart)
		}
	}()
	res.Python = i.conn.hello.Python
	if cancelled, err := i.handOver(ctx, x); cancelled || err != nil {
		if cancelled {
			res.Status, res.ExitCode, res.Message = StatusCancelled, -1, "cancelled before the code started"
		}
		return res, err
	}
	if first {
		res.Startup = time.Since(cmpTime(x.Began, i.start))
	}
	run := i.serve(ctx, x)
	defer run.stopServe()
	killedFor, interrupted, err := run.await(ctx)
	if err != nil {
		return res, err
	}
	run.out.fill(&res)
	if killedFor != "" {
		kept = interrupted
		return stopped(res, x, killedFor, interrupted), nil
	}
	kept = x.Session && run.rr.err == nil && run.rr.exit != nil && !i.ended()
	return i.e.outcome(ctx, i.id, run.rr, run.w, res, i.limits, i.log)
}

// begin marks the instance busy with an Exec, or says why it cannot run
// one; first is whether it is its first.
func (i *Container) begin(x ExecRequest) (first bool, err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	switch {
	case i.closed:
		return false, errors.New("this sandbox instance was closed")
	case i.busy:
		return false, errors.New("this sandbox instance is running code")
	case i.used && !(i.session && i.kept && x.Session):
		return false, errors.New("this sandbox instance already ran code")
	}
	first = !i.used
	i.used, i.busy, i.session, i.kept = true, true, x.Session, false
	return first, nil
}

// finish marks the Exec done; kept says a session's interpreter is there
// for the next.
func (i *Container) finish(kept bool) {
	i.mu.Lock()
	i.busy, i.kept = false, kept
	i.mu.Unlock()
}

// handOver sends the runner the code. cancelled is true when ctx ended
// first; an error wrapping errNotHandedOver means the runner did not get
// it whole, so it ran nothing.
func (i *Container) handOver(ctx context.Context, x ExecRequest) (cancelled bool, err error) {
	// A runner that never reads must not hold the bridge: the write is
	// bounded, and cancelling ctx closes the connection.
	conn := i.conn
	unhook := context.AfterFunc(ctx, func() { conn.Close() })
	err = conn.putInputs(x.Inputs, i.e.opts.StartTimeout)
	if err == nil {
		err = conn.exec(relay.Exec{Code: x.Code, OutputLimit: x.OutputBytes, Session: x.Session, Script: x.Script, Inputs: len(x.Inputs),
			Files: relay.FileLimits{MaxFiles: x.Files.MaxFiles, MaxFileBytes: x.Files.MaxFileBytes, MaxBytes: x.Files.MaxBytes}}, i.e.opts.StartTimeout)
	}
	if !unhook() || ctx.Err() != nil {
		return true, nil
	}
	if errors.Is(err, errInputSource) {
		// Not the sandbox's fault, and not to be retried elsewhere; the
		// runner holds part of an input, so it runs nothing more.
		conn.Close()
		return false, err
	}
	if err != nil {
		// The runner cannot run a frame it did not wholly receive.
		return false, fmt.Errorf("%w: sending code to the runner: %w", errNotHandedOver, err)
	}
	return false, nil
}

// execution is one Exec from the code handed over to its end: the
// runner's frames served in the background, and what the reader and the
// engine said of the end.
type execution struct {
	i        *Container
	x        ExecRequest
	deadline time.Time
	out      *output
	exitSeen chan struct{}   // closed when the runner reported its exit
	done     chan readResult // the reader's end
	timeout  *time.Timer
	// stopServe stops the reader waiting for a tool-call slot and cancels
	// the calls in flight: done when the container is gone.
	stopServe context.CancelFunc
	rr        readResult
	w         waitResult
}

// serve starts reading the runner's frames of x, answering its requests.
func (i *Container) serve(ctx context.Context, x ExecRequest) *execution {
	run := &execution{i: i, x: x, deadline: time.Now().Add(x.Timeout), out: newOutput(x.OutputBytes, x.Sink),
		exitSeen: make(chan struct{}), done: make(chan readResult, 1), timeout: time.NewTimer(x.Timeout)}
	serveCtx, stop := context.WithCancel(ctx)
	run.stopServe = func() {
		stop()
		run.timeout.Stop()
	}
	go func() {
		run.done <- i.e.serve(serveCtx, x.RunID, run.deadline, i.conn, run.out, x.Files, x.Session, run.exitSeen)
	}()
	return run
}

// await waits for the end of the code: its timeout or cancellation (then
// killedFor says which, and interrupted whether a session's code stopped
// on an interrupt and keeps its interpreter), the runner's report and
// hang-up, or the container's end. An error is the engine's failure.
func (run *execution) await(ctx context.Context) (killedFor Status, interrupted bool, err error) {
	i := run.i
	select {
	case <-run.timeout.C:
		return StatusTimeout, run.interrupt(), nil
	case <-ctx.Done():
		return StatusCancelled, run.interrupt(), nil
	case <-run.exitSeen:
		// The runner reported; give it a moment to hang up on its own.
		grace := time.NewTimer(i.e.exitGrace)
		defer grace.Stop()
		select {
		case run.rr = <-run.done:
			run.w = i.settle(run.rr, run.kill)
		case <-grace.C:
			run.stop()
		}
	case run.rr = <-run.done:
		run.w = i.settle(run.rr, run.kill)
	case run.w = <-i.exited:
		if run.w.err != nil {
			// The engine, not the code, failed: say so.
			run.kill()
			i.conn.Close()
			run.stopServe()
			<-run.done
			return "", false, fmt.Errorf("waiting for the container: %w", run.w.err)
		}
		// The container ended first. Its end closes the connection; the
		// deadline covers a peer that kept it open (it never should).
		_ = i.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		time.AfterFunc(2*time.Second, run.stopServe)
		run.rr = <-run.done
	}
	return "", false, nil
}

// kill kills the container, bounded.
func (run *execution) kill() {
	i := run.i
	kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := i.e.rt.Kill(kctx, i.id); err != nil {
		i.log.Warn().Err(err).Msg("killing container")
	}
}

// stop kills the container and ends the connection, then collects what
// the reader and the engine have to say.
func (run *execution) stop() {
	i := run.i
	run.kill()
	i.conn.Close()
	run.stopServe()
	run.rr = <-run.done
	run.w = awaitExit(i.exited, 0, i.e.killWait, run.kill)
}

// interrupt asks a session's code to stop (KeyboardInterrupt) and reports
// whether it did within interruptGrace, its interpreter intact; otherwise
// (and for code outside a session at once) the container is killed.
func (run *execution) interrupt() bool {
	i := run.i
	if !run.x.Session {
		run.stop()
		return false
	}
	if err := i.conn.interrupt(i.e.writeTimeout); err == nil {
		grace := time.NewTimer(i.e.interruptGrace)
		defer grace.Stop()
		select {
		case run.rr = <-run.done:
			if run.rr.err == nil && run.rr.exit != nil {
				return true
			}
			run.kill()
			i.conn.Close()
			run.w = awaitExit(i.exited, 0, i.e.killWait, run.kill)
			return false
		case run.w = <-i.exited:
			run.kill()
			i.conn.Close()
			run.stopServe()
			run.rr = <-run.done
			return false
		case <-grace.C:
		}
	}
	run.stop()
	return false
}

// stopped is the [Result] of code stopped for killedFor (a timeout or a
// cancellation): interrupted when a session's code stopped on an
// interrupt and keeps its state, else killed with its container.
func stopped(res Result, x ExecRequest, killedFor Status, interrupted bool) Result {
	res.Status, res.ExitCode = killedFor, -1
	switch {
	case interrupted && killedFor == StatusCancelled:
		res.Message = "cancelled: the code was interrupted (KeyboardInterrupt) and stopped; the session keeps its state"
	case interrupted:
		res.Message = fmt.Sprintf("timed out after %s: the code was interrupted (KeyboardInterrupt) and stopped; the session keeps its state; output until then is kept", x.Timeout)
	case killedFor == StatusTimeout && x.Session:
		res.Message = fmt.Sprintf("timed out after %s and did not stop when interrupted: the container was killed and the session's state is lost; output until then is kept", x.Timeout)
	case killedFor == StatusTimeout:
		res.Message = fmt.Sprintf("timed out after %s: the container was killed; output until then is kept", x.Timeout)
	case x.Session:
		res.Message = "cancelled, and the code did not stop when interrupted: the container was killed and the session's state is lost"
	default:
		res.Message = "cancelled: the container was killed"
	}
	return res
}

// Closed reports whether Close was called.
func (i *Container) Closed() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.closed
}

// Kept reports whether the instance holds a session whose interpreter is
// there for another Exec: its last Exec ended with the runner's report
// (or an interrupt the code heeded) and the container still runs.
func (i *Container) Kept() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.session && i.kept && !i.closed && !i.ended()
}

// settle is what Exec waits for once the reader ended on its own. A
// runner that reported its exit and hung up cleanly has said all there
// is to say: the engine's word on the container's end (tens of ms on
// either engine) is not awaited, and Close kills whatever is left of it.
// Otherwise the engine says how it ended; a runner that broke the
// protocol gets no grace.
func (i *Container) settle(rr readResult, kill func()) waitResult {
	if rr.err == nil && rr.exit != nil {
		return waitResult{}
	}
	if rr.err != nil {
		kill()
	}
	return awaitExit(i.exited, i.e.exitGrace, i.e.killWait, kill)
}

// Close kills and removes the container, its socket and its directory.
// It is safe to call more than once and from any path; ctx bounds nothing
// but is where the removal takes its values from (removal outlives it). An
// error means the engine failed to remove the container: it is retried in
// the background (see [Executor.PendingRemovals]).
func (i *Container) Close(ctx context.Context) error {
	i.mu.Lock()
	closed := i.closed
	i.closed = true
	// A memory save may swap these (checkpoint.go); it does so under mu.
	conn, stopWait, id := i.conn, i.stopWait, i.id
	i.mu.Unlock()
	if closed {
		return nil
	}
	if conn != nil {
		conn.Close()
	}
	if stopWait != nil {
		stopWait()
	}
	var err error
	if id != "" {
		if rerr := i.e.remove(context.WithoutCancel(ctx), id, i.log); rerr != nil {
			err = fmt.Errorf("removing container %s: %w", id, rerr)
		}
	}
	if rerr := os.RemoveAll(i.dir); rerr != nil && err == nil {
		err = fmt.Errorf("removing run directory: %w", rerr)
	}
	return err
}

// cmpTime is t, or def when t is zero.
func cmpTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}
