package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/paths"
	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/units"
)

// Status is how a run ended.
type Status string

// Statuses of a run.
const (
	StatusOK        Status = "ok"        // the code finished with exit code 0
	StatusError     Status = "error"     // an exception, a non-zero exit, or a runner failure
	StatusTimeout   Status = "timeout"   // killed at the timeout
	StatusMemory    Status = "memory"    // killed by the memory limit
	StatusCancelled Status = "cancelled" // the caller cancelled the run
)

// Result is the outcome of one run. Stdout and Stderr hold at most
// [Limits.OutputBytes] each; the Cut fields count what was dropped beyond.
type Result struct {
	RunID     string           `json:"run_id"`
	Status    Status           `json:"status"`
	ExitCode  int              `json:"exit_code"`
	Stdout    string           `json:"stdout"`
	Stderr    string           `json:"stderr"`
	StdoutCut int64            `json:"stdout_cut,omitempty"`
	StderrCut int64            `json:"stderr_cut,omitempty"`
	Error     *relay.ErrorInfo `json:"error,omitempty"`
	// Message is a one-line explanation when the run did not succeed.
	Message  string        `json:"message,omitempty"`
	Python   string        `json:"python,omitempty"`
	Duration time.Duration `json:"duration"`
	// Startup is the time from the start of Run until the code was handed
	// to the runner: container creation, start and the runner's connect.
	Startup time.Duration `json:"startup"`
	// FilesSkipped counts files the runner skipped beyond those it
	// reported one by one to the [Sink].
	FilesSkipped int64 `json:"files_skipped,omitempty"`
	// Warm says the code ran in a container the pool had started ahead
	// of time.
	Warm bool `json:"warm,omitempty"`
	// Cold says why a run of a [Pool] did not get a ready container.
	Cold string `json:"cold,omitempty"`
}

// Request is one piece of code to run.
type Request struct {
	Code   string
	Limits Limits
	// RunID names the run (container labels, logs, tool calls); NewRunID
	// makes one when it is empty.
	RunID string
	// OnOutput, if set, receives each piece of output as it arrives
	// (stream is "stdout" or "stderr"), after the output cap is applied.
	// It is called from one goroutine at a time and must not block for long.
	OnOutput func(stream, data string)
	// Sink, if set, receives the output and the files of the run instead
	// of OnOutput.
	Sink Sink
	// Files bound the files the run sends back; the zero value sends none.
	Files FileLimits
	// Script runs the code as `python3 FILE` would ([ExecRequest.Script]).
	Script bool
}

// ToolHandler answers the code's tool calls and its questions about the
// tools there are. It is the seam to the MCP proxy. Both methods are called
// concurrently, with the run's id and a ctx that ends, at the latest, at
// the run's deadline; the ID of the answer is set by the caller.
type ToolHandler interface {
	CallTool(ctx context.Context, runID string, call relay.ToolCall) relay.ToolResult
	Query(ctx context.Context, runID string, q relay.Query) relay.ToolResult
}

// NoTools is the [ToolHandler] of a bridge without upstream servers.
type NoTools struct{}

var errNoTools = &relay.ToolError{
	Type:    relay.ErrToolsUnavailable,
	Message: "no upstream MCP servers are configured for this bridge (see --servers-config)",
}

// CallTool answers every call with a tools_unavailable error.
func (NoTools) CallTool(_ context.Context, _ string, call relay.ToolCall) relay.ToolResult {
	return relay.ToolResult{ID: call.ID, Error: errNoTools}
}

// Query answers every question with a tools_unavailable error.
func (NoTools) Query(_ context.Context, _ string, q relay.Query) relay.ToolResult {
	return relay.ToolResult{ID: q.ID, Error: errNoTools}
}

var _ ToolHandler = NoTools{}

// ExecutorOptions configure an [Executor].
type ExecutorOptions struct {
	// Image is the runner image reference.
	Image string
	// ImageHint says what to do when Image is not on the engine (engine is
	// its [Runtime.Name]): whether a command of the caller's builds it
	// depends on the image (images.MissingHint knows which ones `bridge
	// image build` makes). Nil gives a hint that fits any image.
	ImageHint func(image, engine string) string
	// RunRoot is the private directory under which each run gets its own
	// directory; DefaultRunRoot when empty.
	RunRoot string
	// Tools answers tool calls; NoTools when nil.
	Tools ToolHandler
	// AllowUnenforcedLimits lets code run on an engine that cannot enforce
	// memory, pids or CPU limits. Off by default: the bridge fails closed.
	AllowUnenforcedLimits bool
	// ResultBytes is the largest result Tools.CallTool returns, as JSON
	// ([relay.MaxResultBytes] when zero): each tool call in flight reserves
	// this much of the run's and the [Executor]'s result capacity (budget.go).
	ResultBytes int64
	// OCIRuntime is the runtime every container must run with: runc,
	// runsc (gVisor), or OCIRuntimeDefault ("" too) for the engine's
	// default. NewExecutor fails, wrapping ErrOCIRuntime, on an engine that
	// cannot run it; nothing falls back to another runtime.
	OCIRuntime string
	// StartTimeout bounds container start plus the runner's connect; 30 s
	// when zero.
	StartTimeout time.Duration
	Logger       zerolog.Logger
}

// Executor runs code, each request in a fresh container of one engine.
// It is safe for concurrent use.
type Executor struct {
	rt      Containers
	opts    ExecutorOptions
	enforce Enforcement
	// runtime is what each spec asks for ("" for the engine's default);
	// effective is the runtime that runs the containers.
	runtime, effective string
	runRoot            string
	log                zerolog.Logger
	// owner labels every container (LabelOwner); dirPrefix names run
	// directories. Both let Reap tell a dead bridge's leftovers apart.
	owner     string
	dirPrefix string
	// exitGrace, killWait and writeTimeout are exitGraceDefault,
	// killWaitDefault and writeTimeoutDefault; tests shorten them.
	exitGrace, killWait, writeTimeout time.Duration
	// interruptGrace is how long a session's code has to stop once
	// interrupted (interruptGraceDefault).
	interruptGrace time.Duration
	// parkTimeout bounds a runner's answer to park (parkTimeoutDefault).
	parkTimeout time.Duration
	// pending counts the answers of all runs that wait to be written;
	// results the result capacity reserved by their tool calls in flight.
	pending *reserve
	results *reserve
	// removals retries the removals that failed.
	removals *removals
	// host counts what HostStats reports.
	host hostCounters
}

// NewExecutor checks the engine and the image once and prepares the run
// root. A missing image fails with ErrImageNotFound and what
// opts.ImageHint says to do about it.
func NewExecutor(ctx context.Context, rt Containers, opts ExecutorOptions) (*Executor, error) {
	if opts.Image == "" {
		return nil, errors.New("no runner image configured")
	}
	if opts.Tools == nil {
		opts.Tools = NoTools{}
	}
	if opts.ResultBytes <= 0 {
		opts.ResultBytes = relay.MaxResultBytes
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	info, err := rt.Info(ctx)
	if err != nil {
		return nil, err
	}
	request, effective, err := ResolveOCIRuntime(info, opts.OCIRuntime)
	if err != nil {
		return nil, err
	}
	// A missing image fails here, with what to do about it, rather than at
	// the first run.
	if _, err := rt.ImageInfo(ctx, opts.Image); err != nil {
		if errors.Is(err, ErrImageNotFound) {
			return nil, fmt.Errorf("%w; %s", err, imageHint(opts, rt.Name()))
		}
		return nil, fmt.Errorf("runner image %s: %w", opts.Image, err)
	}
	root := opts.RunRoot
	if root == "" {
		root = DefaultRunRoot()
	}
	if err := paths.EnsurePrivateDir(root); err != nil {
		return nil, err
	}
	e := &Executor{rt: rt, opts: opts, enforce: info.Enforce, runtime: request, effective: effective,
		runRoot: root, log: opts.Logger, dirPrefix: "run-",
		exitGrace: exitGraceDefault, killWait: killWaitDefault, writeTimeout: writeTimeoutDefault,
		interruptGrace: interruptGraceDefault, parkTimeout: parkTimeoutDefault,
		pending: newReserve(maxBridgePendingBytes), results: newReserve(maxBridgeResultBytes),
		removals: newRemovals(rt, opts.Logger)}
	e.removals.removed = e.host.removed
	pid := os.Getpid()
	if e.owner = processOwner(pid); e.owner != "" {
		e.dirPrefix = fmt.Sprintf("run-%d.%s-", pid, processStart(pid))
	}
	// What a bridge that crashed left behind goes now.
	if _, err := Reap(ctx, rt, root, opts.Logger); err != nil {
		opts.Logger.Warn().Err(err).Msg("reaping leftovers of dead bridges")
	}
	return e, nil
}

// imageHint says what to do about opts.Image missing from engine.
func imageHint(opts ExecutorOptions, engine string) string {
	if opts.ImageHint != nil {
		return opts.ImageHint(opts.Image, engine)
	}
	return fmt.Sprintf("pull or build %s with %s (`bridge image build --runtime %s` makes only the bridge's own runner: `bridge image name`)",
		opts.Image, engine, engine)
}

// OCIRuntime is the runtime that runs the [Executor]'s containers (runc,
// runsc, crun), as the engine names it.
func (e *Executor) OCIRuntime() string { return e.effective }

// DefaultRunRoot is $XDG_RUNTIME_DIR/bridge, or bridge-UID in the temp dir.
func DefaultRunRoot() string { return paths.RunRoot() }

// Run runs one request in a fresh container and removes the container, its
// socket and its directory before it returns, on every path: Acquire, Exec
// and Close. Failures of the code (exceptions, timeouts, memory) are
// reported in the [Result]; an error means the code could not be run at all,
// or the engine failed mid-run.
func (e *Executor) Run(ctx context.Context, req Request) (Result, error) {
	return run(ctx, e.Acquire, req)
}

// AcquireFunc gets the [Instance] a run of limits l named runID runs in:
// [Executor.Acquire], [Pool.Acquire], [Engine.Acquire].
type AcquireFunc func(ctx context.Context, l Limits, runID string) (Instance, error)

// run is one request from acquire to close: the instance acquired, the code
// run, the instance given up, whatever happened.
func run(ctx context.Context, acquire AcquireFunc, req Request) (res Result, err error) {
	start := time.Now()
	x, err := req.exec()
	if err != nil {
		return res, err
	}
	x.Began = start
	res.RunID = x.RunID
	inst, err := acquire(ctx, req.Limits, res.RunID)
	if err != nil {
		return startFailed(res, err, start)
	}
	defer func() {
		if cerr := inst.Close(ctx); cerr != nil && err == nil {
			err = cerr
		}
		res.Duration = time.Since(start)
	}()
	return inst.Exec(ctx, x)
}

// exec checks req and makes its [ExecRequest], with a new run id when req
// has none.
func (req Request) exec() (ExecRequest, error) {
	if err := req.Limits.Validate(); err != nil {
		return ExecRequest{}, fmt.Errorf("invalid limits: %w", err)
	}
	id := req.RunID
	if id == "" {
		id = NewRunID()
	} else if !validRunID(id) {
		return ExecRequest{}, fmt.Errorf("invalid run id %q: 1 to 32 lower-case letters and digits", id)
	}
	sink := req.Sink
	if sink == nil {
		sink = outputSink{f: req.OnOutput}
	}
	return ExecRequest{RunID: id, Code: req.Code, Timeout: req.Limits.Timeout,
		OutputBytes: req.Limits.OutputBytes, Files: req.Files, Sink: sink, Script: req.Script}, nil
}

// startFailed is the outcome of a run whose container did not start: a
// cancelled [Result] when the caller gave up, else the error.
func startFailed(res Result, err error, start time.Time) (Result, error) {
	if errors.Is(err, ErrStartCancelled) {
		res.Status, res.ExitCode, res.Message = StatusCancelled, -1, "cancelled before the code started"
		res.Duration = time.Since(start)
		return res, nil
	}
	return res, err
}

// outputSink is a [Sink] that hands output to f (if set) and drops files.
type outputSink struct {
	NoSink
	f func(stream, data string)
}

func (s outputSink) Output(stream, data string) {
	if s.f != nil {
		s.f(stream, data)
	}
}

// exitGraceDefault is how long a runner that sent exit, or whose connection
// ended, has to end on its own before its container is killed.
const exitGraceDefault = 5 * time.Second

// remove force-removes a container (by id or name) with a context that
// outlives the run's. A failure is logged and the removal retried in the
// background until it succeeds (see removals).
func (e *Executor) remove(ctx context.Context, idOrName string, log zerolog.Logger) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := e.rt.Remove(rctx, idOrName)
	if err == nil {
		e.host.removed(idOrName)
	}
	if err != nil {
		log.Error().Err(err).Str("container", idOrName).Msg("removing container; retrying in the background")
		e.removals.add(idOrName)
	}
	return err
}

// Close stops the background retries of failed removals after one last
// attempt within ctx, and reports the containers it could not remove (a
// later bridge's start removes them). Runs must not be started after Close.
func (e *Executor) Close(ctx context.Context) error {
	if left := e.removals.close(ctx); len(left) > 0 {
		return fmt.Errorf("%d container(s) could not be removed (the next start of the bridge removes them): %s", len(left), strings.Join(left, ", "))
	}
	return nil
}

// PendingRemovals returns the containers whose removal failed and is being
// retried.
func (e *Executor) PendingRemovals() []string { return e.removals.pending() }

// dropUnenforced clears the limits the engine cannot enforce from spec and
// names them.
func dropUnenforced(spec *ContainerSpec, e Enforcement) []string {
	var dropped []string
	if !e.Memory {
		spec.Memory, spec.MemorySwap = 0, 0
		dropped = append(dropped, "memory")
	}
	if !e.Pids {
		spec.Pids = 0
		dropped = append(dropped, "pids")
	}
	if !e.CPU {
		spec.CPUQuota, spec.CPUPeriod = 0, 0
		dropped = append(dropped, "cpu")
	}
	return dropped
}

// outcome turns what the relay and the engine said into a [Result].
func (e *Executor) outcome(ctx context.Context, id string, rr readResult, w waitResult, res Result, l Limits, log zerolog.Logger) (Result, error) {
	// A protocol error, or a runner cut off for not reading, wins over
	// anything the runner said before it.
	if rr.err != nil && (errors.Is(rr.err, relay.ErrProtocol) || errors.Is(rr.err, ErrRunnerStalled)) {
		if errors.Is(rr.err, relay.ErrProtocol) {
			e.host.protocol.Add(1)
		}
		res.Status, res.ExitCode, res.Error = StatusError, -1, nil
		res.Message = rr.err.Error()
		return res, nil
	}
	if rr.exit != nil {
		res.ExitCode = rr.exit.ExitCode
		res.Error = rr.exit.Error
		res.StdoutCut += rr.exit.StdoutCut
		res.StderrCut += rr.exit.StderrCut
		res.FilesSkipped = rr.exit.FilesSkipped
		if rr.exit.Status == "ok" {
			res.Status = StatusOK
			return res, nil
		}
		res.Status = StatusError
		if res.Error != nil {
			res.Message = fmt.Sprintf("%s: %s", res.Error.Type, firstLine(res.Error.Message))
		} else {
			res.Message = fmt.Sprintf("exited with code %d", res.ExitCode)
		}
		return res, nil
	}
	// The runner went away without a final status.
	if w.err != nil {
		return res, fmt.Errorf("the runner stopped reporting and the engine could not say why: %w", w.err)
	}
	if w.state.OOMKilled {
		res.Status, res.ExitCode = StatusMemory, w.state.ExitCode
		res.Message = fmt.Sprintf("killed: the code exceeded the memory limit of %s", units.Bytes(l.Memory))
		if w.state.OOMGuessed {
			res.Message = fmt.Sprintf("killed by SIGKILL, most likely for exceeding the memory limit of %s (this engine does not report OOM kills)", units.Bytes(l.Memory))
		}
		return res, nil
	}
	res.Status, res.ExitCode = StatusError, w.state.ExitCode
	switch {
	case res.ExitCode == 137:
		res.Message = "killed by SIGKILL (exit 137) before it could report; if the code uses much memory, the memory limit is " + units.Bytes(l.Memory)
	default:
		res.Message = fmt.Sprintf("the runner exited with code %d without reporting a status", res.ExitCode)
		if logs := e.logs(ctx, id); logs != "" {
			res.Message += ": " + logs
		}
	}
	log.Warn().Err(rr.err).Int("exit_code", res.ExitCode).Msg("runner ended without exit message")
	return res, nil
}

// earlyExit explains a container that stopped before its runner connected.
func (e *Executor) earlyExit(ctx context.Context, id string, w waitResult, l Limits) error {
	if w.err != nil {
		return fmt.Errorf("waiting for container: %w", w.err)
	}
	if w.state.OOMKilled {
		return fmt.Errorf("the runner was killed by the memory limit (%s) while starting: raise the limit", units.Bytes(l.Memory))
	}
	msg := fmt.Sprintf("the runner exited with code %d before connecting to the relay", w.state.ExitCode)
	if logs := e.logs(ctx, id); logs != "" {
		msg += ": " + logs
	}
	if err := e.withHint(errors.New(msg)); err.Error() != msg {
		return err
	}
	return errors.New(msg + " (is the runner image current? rebuild it with `bridge image build`, then run `bridge doctor`)")
}

// withHint adds what to do to an error of a run under gVisor whose cause
// is a runsc flag the bridge needs.
func (e *Executor) withHint(err error) error {
	if e.effective != OCIRuntimeRunsc {
		return err
	}
	if hint := gvisorHint(e.rt.Name(), err.Error()); hint != "" {
		return fmt.Errorf("%w; %s", err, hint)
	}
	return err
}

func (e *Executor) logs(ctx context.Context, id string) string {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	s, err := e.rt.Logs(lctx, id, 2048)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(s)
}

// awaitExit waits up to grace for the container to end by itself, then
// kills it and waits a bounded time more: an engine that neither stops the
// container nor answers must not hold the run forever.
func awaitExit(exited <-chan waitResult, grace, killWait time.Duration, kill func()) waitResult {
	if grace > 0 {
		t := time.NewTimer(grace)
		select {
		case w := <-exited:
			t.Stop()
			return w
		case <-t.C:
		}
		kill()
	}
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case w := <-exited:
		return w
	case <-t.C:
		return waitResult{err: fmt.Errorf("the container did not stop within %s of being killed", killWait)}
	}
}

// interruptGraceDefault is how long a session's code has, once
// interrupted for its timeout or a cancellation, to stop and leave its
// interpreter usable; past it the container is killed and the session's
// state is lost.
const interruptGraceDefault = 3 * time.Second

// killWaitDefault bounds the wait for a killed container to be reported
// stopped.
const killWaitDefault = 15 * time.Second

type waitResult struct {
	state ExitState
	err   error
}

// output collects the code's stdout and stderr up to a cap each, and
// passes what it keeps on to the sink.
type output struct {
	limit  int
	sink   Sink
	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
	cut    map[string]int64
}

func newOutput(limit int, sink Sink) *output {
	return &output{limit: limit, sink: sink, cut: map[string]int64{}}
}

func (o *output) write(stream, data string) {
	o.mu.Lock()
	b := &o.stdout
	if stream == relay.TypeStderr {
		b = &o.stderr
	}
	room := o.limit - b.Len()
	if room < len(data) {
		keep := validPrefix(data, max(room, 0))
		o.cut[stream] += int64(len(data) - len(keep))
		data = keep
	}
	b.WriteString(data)
	o.mu.Unlock()
	if data != "" {
		o.sink.Output(stream, data)
	}
}

func (o *output) fill(r *Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r.Stdout, r.Stderr = o.stdout.String(), o.stderr.String()
	r.StdoutCut += o.cut[relay.TypeStdout]
	r.StderrCut += o.cut[relay.TypeStderr]
}

// validPrefix returns the longest prefix of s of at most n bytes that does
// not split a UTF-8 character.
func validPrefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = validPrefix(s, 200) + "..."
	}
	return s
}

func newID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// NewRunID returns a fresh random run id.
func NewRunID() string { return newID(6) }

// validRunID: run ids become parts of container and directory names.
func validRunID(id string) bool {
	if len(id) == 0 || len(id) > 32 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
