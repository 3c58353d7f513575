package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Instances is where the bridge gets the sandbox each run's code runs in:
// a container started for it, one the warm pool had ready, or the call's
// session. *[sandbox.Engine] is the real one (also *[sandbox.Pool] and
// *[sandbox.Executor]); a session call (sessions.go) is one made on top of
// another; unit tests use fakes.
type Instances interface {
	Acquire(ctx context.Context, l sandbox.Limits, runID string) (sandbox.Instance, error)
}

var (
	_ Instances = (*sandbox.Engine)(nil)
	_ Instances = (*sandbox.Pool)(nil)
	_ Instances = (*sandbox.Executor)(nil)
	_ Instances = (*sessionCall)(nil)
)

// execute runs a call's code, in steps: a queue place and a run slot; the
// run's id, its pinned policy and limits; an instance, alone or the call's
// session; the code; the result.
func (s *Server) execute(ctx context.Context, req *mcp.CallToolRequest, a callArgs, key sessionKey, scfg policy.Sessions, rs *runState, start time.Time) (out *mcp.CallToolResult) {
	var r *aRun
	defer func() { s.countRun(out, r) }()
	qspan := s.step(ctx, spanQueue)
	ctx, release, refusal := s.admit(ctx, start)
	endQueue(qspan, refusal)
	if refusal != nil {
		return noteSessionEnded(refusal, resetNote(a, false))
	}
	defer release()
	r = s.beginRun(ctx, req, a, rs, start)
	defer r.end()
	traceRun(ctx, r, a.session != "", len(a.code))
	// The inputs are resolved before any container is touched: one the
	// client may not read, or too much, refuses the call as it stands.
	var snapPol *policy.Policy
	if r.snap != nil {
		snapPol = r.snap.Policy
	}
	inputs, err := s.resolveInputs(r.ctx, req, r.id, a.inputs, s.inputBounds(snapPol))
	if err != nil {
		return noteSessionEnded(failure(statusInvalid, "invalid arguments: "+err.Error(), start), resetNote(a, false))
	}
	var restored *RestoredOutput
	under, unhold := s.opts.Instances, func() {}
	if a.restore != "" {
		plan, err := s.planRestore(r.ctx, req, a, key)
		if err != nil {
			return noteSessionEnded(failure(statusInvalid, "invalid arguments: "+err.Error(), start), resetNote(a, false))
		}
		if plan.archive != nil {
			inputs = append([]sandbox.InputFile{*plan.archive}, inputs...)
		}
		if plan.under != nil {
			// The snapshot is held until its sandbox is restored (or the
			// call failed before).
			release := sync.OnceFunc(plan.release)
			defer release()
			plan.release = release
			under, unhold = plan.under, func() { plan.acquired(&r.exec.Inputs) }
		}
		restored = plan.out
	}
	r.exec.Inputs = inputs
	var src Instances = s.opts.Instances
	var sc *sessionCall
	if a.session != "" {
		sc = s.sessions.call(key, scfg, min(sessionBusyWait, r.timeout), under)
		sc.fresh = a.restore != ""
		src = sc
	}
	if sc == nil {
		// Audited from asking for its container: one that does not start
		// is in the audit log too. A session's call, once it is in.
		r.started(nil)
	}
	// The run's duration: from asking for its instance to giving it up.
	began := time.Now()
	aspan := s.step(r.ctx, spanAcquire)
	inst, err := src.Acquire(r.ctx, r.limits, r.id)
	unhold()
	acquired := time.Now()
	if err != nil {
		status, msg := s.acquireFailed(err)
		s.endAcquire(aspan, acquired, sandbox.Result{}, sc != nil, status)
		r.res.Status = sandbox.Status(status)
		return noteSessionEnded(failure(status, msg, start), resetNote(a, false))
	}
	if sc != nil {
		r.started(sc)
	}
	r.exec.Began = began
	espan := s.step(r.ctx, spanExec)
	r.rs.setSpan(espan.SpanContext())
	r.res, err = inst.Exec(r.ctx, r.exec)
	endExec(espan, r.res, err)
	restored = s.restoredOutcome(req, r, a, restored, inst)
	var saved *SnapshotOutput
	if a.snapshot != "" && err == nil {
		saved = s.takeSnapshot(r.ctx, req, r, a, inst)
	}
	s.endAcquire(aspan, acquired, r.res, sc != nil, "")
	if cerr := inst.Close(r.ctx); cerr != nil && err == nil {
		err = cerr
	}
	r.res.Duration = time.Since(began)
	if err != nil {
		s.log.Error().Err(err).Msg("run failed")
		return noteSessionEnded(failure(statusUnavailable, "the sandbox could not run the code: "+err.Error()+doctorHint(err), start), resetNote(a, false))
	}
	res := s.renderRun(req, r, sessionNotes(sc, a))
	if sc != nil && sc.isNew && !a.reset && a.restore == "" {
		noteSessionNew(res, a.session)
	}
	renderSnapshots(res, saved, restored)
	return res
}

// sessionNotes is what session_ended says of a call that ran: why its
// session ended with it, after what its reset did.
func sessionNotes(sc *sessionCall, a callArgs) string {
	ended := sc.ended(a.session)
	if note := resetNote(a, true); note != "" && ended != "" {
		return note + "; then " + ended
	} else if note != "" {
		return note
	}
	return ended
}

// noteSessionNew says, in a result, that the call started its session: it
// had no state of earlier calls (none was made with its name, or the
// session ended, or lives on another bridge that stopped).
func noteSessionNew(res *mcp.CallToolResult, name string) {
	if o, ok := res.StructuredContent.(Output); ok {
		o.SessionNew = true
		res.StructuredContent = o
	}
	res.Content = append(res.Content, &mcp.TextContent{Text: fmt.Sprintf("[session %q is new: nothing of earlier calls is in it]", name)})
}

// countRun records a call's end in the metrics: its status, and for a run
// that got an instance (r.res.Duration set), its time and its start.
func (s *Server) countRun(out *mcp.CallToolResult, r *aRun) {
	m := s.opts.Metrics
	if m == nil || out == nil {
		return
	}
	o, _ := out.StructuredContent.(Output)
	engine := ""
	if n, ok := s.opts.Instances.(runtimeNamer); ok {
		engine = n.RuntimeName()
	}
	if r == nil || r.res.Duration == 0 {
		m.Run(o.Status, engine, false, false, 0, 0)
		return
	}
	m.Run(o.Status, engine, true, r.res.Warm, r.res.Startup, r.res.Duration)
}

// admit gives a call a place in the queue, or answers busy at once, then
// waits for a run slot. The ctx it returns ends with the call, or when the
// bridge shuts down; release gives the slot and the place back.
func (s *Server) admit(ctx context.Context, start time.Time) (context.Context, func(), *mcp.CallToolResult) {
	select {
	case s.queue <- struct{}{}:
	default:
		return nil, nil, failure(statusBusy, fmt.Sprintf("%v: %d runs in progress and %d waiting; try again shortly", ErrBusy, s.opts.MaxConcurrent, s.opts.QueueLength), start)
	}
	ctx, cancel := context.WithCancel(ctx)
	untrack, err := s.track(cancel)
	if err != nil {
		cancel()
		<-s.queue
		return nil, nil, failure(statusUnavailable, err.Error(), start)
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		untrack()
		cancel()
		<-s.queue
		return nil, nil, failure(string(sandbox.StatusCancelled), "cancelled while waiting for a free slot", start)
	}
	return ctx, func() {
		<-s.slots
		untrack()
		cancel()
		<-s.queue
	}, nil
}

// aRun is one call's run from its slot to its result: what beginRun fixed,
// and what the run made.
type aRun struct {
	s       *Server
	ctx     context.Context // the call's
	id      string
	snap    *policy.Snapshot // the pinned policy; nil without one
	limits  sandbox.Limits
	timeout time.Duration
	exec    sandbox.ExecRequest
	rs      *runState
	prog    *progress
	col     *artifacts.Collector
	start   time.Time
	audited bool // RunStart was recorded
	res     sandbox.Result
	// unregister ends the run's registration in [Options.Runs].
	unregister func()
}

// beginRun gives a run its id, pins it to the policy in force, and fixes
// its limits, its progress, its collector of files and the code to run.
func (s *Server) beginRun(ctx context.Context, req *mcp.CallToolRequest, a callArgs, rs *runState, start time.Time) *aRun {
	r := &aRun{s: s, id: sandbox.NewRunID(), rs: rs, start: start}
	limits, _ := s.limits(nil)
	timeout := a.timeout
	if s.opts.Policy != nil {
		// The run keeps this policy for its tool calls, whatever reloads.
		r.snap = s.opts.Policy.Begin(r.id).Snap
		pinned, pinnedMax := s.limits(r.snap)
		if !a.asked {
			timeout = pinned.Timeout
		}
		limits, timeout = pinned, min(timeout, pinnedMax)
	}
	limits.Timeout = timeout
	r.limits, r.timeout = limits, timeout
	// A detached run outlives its first call: the calls that wait on it
	// send its progress, each with its own token (detached.go).
	r.prog = newProgress(ctx, req, s.opts.ProgressInterval, start, rs.mode != askResult && !rs.task)
	rs.mu.Lock()
	rs.prog = r.prog
	rs.mu.Unlock()
	r.ctx = ctx
	if s.opts.Runs != nil {
		r.unregister = s.opts.Runs.Register(r.id, rs)
	}
	r.col = artifacts.NewCollector(r.id, s.artifactLimits(r.snap), s.opts.Store)
	r.exec = sandbox.ExecRequest{RunID: r.id, Code: a.code, Timeout: timeout, OutputBytes: limits.OutputBytes,
		Files: r.col.FileLimits(), Sink: runSink{Collector: r.col, output: r.prog.output}, Session: a.session != ""}
	return r
}

// started records the run's start: audited (with its session's id, when
// in one), and, in a session, the human's approvals for the rest of the
// session are the run's.
func (r *aRun) started(sc *sessionCall) {
	session := ""
	if sc != nil {
		session = sc.s.id
		r.rs.mu.Lock()
		r.rs.run = &sc.s.approved
		r.rs.vaultKey, r.rs.vaultEnds = sc.s.vaultKey, sc.s.vaultEnds
		r.rs.mu.Unlock()
	}
	if r.snap != nil {
		if run := r.s.opts.Policy.Run(r.id); run != nil && sc != nil {
			run.ShareVault(&sc.s.vault)
		}
		r.s.opts.Policy.Audit().RunStart(r.id, session, r.snap.Gen, r.snap.Policy.Sandbox, r.timeout)
		r.audited = true
	}
}

// end closes the run: its audit record, its pin on the policy, its
// progress.
func (r *aRun) end() {
	if r.audited {
		status := string(r.res.Status)
		if status == "" {
			status = statusUnavailable
		}
		r.s.opts.Policy.Audit().RunEnd(r.s.opts.Policy.Run(r.id), status, r.res.ExitCode, time.Since(r.start))
	}
	if r.snap != nil {
		r.s.opts.Policy.End(r.id)
	}
	if r.unregister != nil {
		r.unregister()
	}
	r.prog.stop()
}

// acquireFailed is the status and message of a call whose run got no
// instance: the engine could not be opened, the session refused the call,
// the call was cancelled while it waited or its container started, or the
// container did not start.
func (s *Server) acquireFailed(err error) (status, msg string) {
	var unavailable *sandbox.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		s.log.Error().Err(err).Msg("sandbox unavailable")
		return statusUnavailable, "the sandbox is unavailable: " + err.Error() + " (the operator can run `bridge doctor`)"
	case errors.Is(err, errSessionCancelled):
		return string(sandbox.StatusCancelled), "cancelled while waiting for the session"
	case errors.Is(err, sandbox.ErrStartCancelled), errors.Is(err, context.Canceled):
		return string(sandbox.StatusCancelled), "cancelled before the code started"
	case errors.Is(err, ErrBusy), errors.Is(err, errTooManySessions):
		return statusBusy, err.Error()
	case errors.Is(err, errSessionExists):
		return statusInvalid, err.Error()
	case errors.Is(err, errSessionsClosed), errors.Is(err, errSessionEnded):
		return statusUnavailable, err.Error()
	}
	s.log.Error().Err(err).Msg("run failed")
	return statusUnavailable, "the sandbox could not run the code: " + err.Error() + doctorHint(err)
}

// doctorHint points the operator to `bridge doctor` when the engine failed.
func doctorHint(err error) string {
	if errors.Is(err, sandbox.ErrEngineUnreachable) || errors.Is(err, sandbox.ErrOCIRuntime) {
		return " (the operator can run `bridge doctor`)"
	}
	return ""
}

// renderRun is the result of a run that ran: its output, files, trace,
// and, when its session ended with it, why.
func (s *Server) renderRun(req *mcp.CallToolRequest, r *aRun, sessionEnded string) *mcp.CallToolResult {
	res := r.res
	ev := s.log.Info().Str("run_id", res.RunID).Str("principal", s.principal(req)).Str("status", string(res.Status)).Dur("duration", res.Duration).Bool("warm", res.Warm)
	if res.Cold != "" {
		ev = ev.Str("cold", res.Cold)
	}
	if req.Session != nil && req.Session.ID() != "" {
		// The Mcp-Session-Id of the client's session (streamable HTTP):
		// what a balancer keeps sessions on, and logs.
		ev = ev.Str("mcp_session", req.Session.ID())
	}
	ev.Msg("run finished")
	out := render(res)
	list, unlisted := r.col.Artifacts()
	for _, a := range list {
		if a.URI != "" {
			s.owners.set(r.id, s.principal(req), s.opts.Store.List())
			break
		}
	}
	o := out.StructuredContent.(Output)
	renderArtifacts(out, &o, list, unlisted+int(res.FilesSkipped))
	var traceLine string
	o.ToolCalls, o.ToolCallsCut, o.ToolCallsCutBy, traceLine = r.rs.summary()
	if traceLine != "" {
		out.Content = append(out.Content, &mcp.TextContent{Text: traceLine})
	}
	if sessionEnded != "" {
		o.SessionEnded = sessionEnded
		out.Content = append(out.Content, &mcp.TextContent{Text: "[" + sessionEnded + "]"})
	}
	out.StructuredContent = o
	return out
}
