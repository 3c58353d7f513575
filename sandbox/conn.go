package sandbox

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/units"
)

// The bridge's side of one runner's connection: the handshake, reading
// frames, answering requests within the run's host budget (budget.go).
// Every bound here protects the bridge from a hostile runner.

// helloTimeout bounds the handshake of each connection.
const helloTimeout = 10 * time.Second

type readResult struct {
	exit *relay.Exit
	err  error
}

// runnerConn is the authenticated connection of one runner.
type runnerConn struct {
	net.Conn
	hello relay.Hello
	dec   *relay.Decoder
	mu    sync.Mutex // serializes writes
	enc   *relay.Encoder
}

// exec sends the exec message, bounded by timeout.
func (c *runnerConn) exec(m relay.Exec, timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	return c.enc.Exec(m)
}

// interrupt sends a session's runner the interrupt message, bounded by
// timeout.
func (c *runnerConn) interrupt(timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	return c.enc.Interrupt()
}

// writeFrame writes one frame, bounded by timeout.
func (c *runnerConn) writeFrame(f relay.Frame, timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	bufs := net.Buffers(slices.Clone(f)) // WriteTo consumes its slice
	_, err := bufs.WriteTo(c.Conn)
	return err
}

// runConn is one run's side of the connection while the code runs: its
// requests in flight and the bytes of their answers, and why it was cut off.
type runConn struct {
	e       *Executor
	runID   string
	c       *runnerConn
	slots   chan struct{} // one per request in flight, until its answer is written
	pending *reserve      // framed answers waiting to be written
	results *reserve      // result capacity of the tool calls in flight
	cut     chan struct{} // closed when the runner is cut off
	cutOnce sync.Once
	cutErr  error

	mu       sync.Mutex
	inFlight map[int64]bool
	ownCall  bool // a call holds the run's own place (reserveResult)
}

// cutOff ends the connection for err; the first reason wins.
func (rc *runConn) cutOff(err error) {
	rc.cutOnce.Do(func() {
		rc.cutErr = err
		close(rc.cut)
		rc.c.Close()
	})
}

// serve reads the runner's frames until the connection ends, answering
// requests concurrently within the run's budget. It closes exitSeen when
// the exit message arrives; anything after it is a protocol error. In a
// session it returns at exit instead: the connection stays open for the
// session's next Exec. Each
// request's ctx has the run's deadline: no call outlives the run, and the
// [ToolHandler] knows how long the run may still call (a remote MCP proxy
// keeps the run's call budget that long).
func (e *Executor) serve(ctx context.Context, runID string, deadline time.Time, c *runnerConn, out *output, fl FileLimits, session bool, exitSeen chan<- struct{}) readResult {
	rc := &runConn{e: e, runID: runID, c: c, slots: make(chan struct{}, maxRequests),
		pending: newReserve(maxPendingBytes), results: newReserve(maxRunResultBytes),
		cut: make(chan struct{}), inFlight: map[int64]bool{}}
	// Requests still in flight when the runner is gone are cancelled and
	// awaited, so none outlives the run.
	var calls sync.WaitGroup
	defer calls.Wait()
	meter := NewHostMeter(hostTimePerRun)
	meter.spent = &e.host.hostTime
	ctx, cancel := context.WithCancel(WithHostMeter(ctx, meter))
	defer cancel()

	fs := newFiles(fl, out.sink)
	defer fs.end()
	var exit *relay.Exit
	for {
		m, err := c.dec.Decode()
		if err != nil {
			select {
			case <-rc.cut:
				return readResult{exit: exit, err: rc.cutErr}
			default:
			}
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (exit != nil && errors.Is(err, os.ErrDeadlineExceeded)) {
				err = nil
			}
			return readResult{exit: exit, err: err}
		}
		if exit != nil {
			return readResult{exit: exit, err: fmt.Errorf("%w: %s after exit", relay.ErrProtocol, m.Type)}
		}
		switch m.Type {
		case relay.TypeStdout, relay.TypeStderr:
			out.write(m.Type, m.Output.Data)
		case relay.TypeToolCall, relay.TypeQuery:
			if rr, stop := rc.request(ctx, m, deadline, &calls); stop {
				return rr // no exit yet: a frame after it is refused above
			}
		case relay.TypeFile, relay.TypeFileData, relay.TypeFileEnd, relay.TypeFileSkip:
			if err := fs.handle(m); err != nil {
				return readResult{err: err}
			}
		case relay.TypeExit:
			if fs.cur != nil {
				return readResult{err: fmt.Errorf("%w: exit inside file %d", relay.ErrProtocol, fs.cur.id)}
			}
			exit = m.Exit
			close(exitSeen)
			if session {
				return readResult{exit: exit}
			}
		case relay.TypeHello:
			return readResult{err: fmt.Errorf("%w: second hello", relay.ErrProtocol)}
		case relay.TypeParked:
			return readResult{err: fmt.Errorf("%w: parked without a park", relay.ErrProtocol)}
		}
	}
}

// request answers a tool call or query in the background, once a slot for
// it is free; stop is true when the serve loop must end with rr instead
// (a duplicate id, the runner cut off, the run over). Each request's ctx
// has the run's deadline: no call outlives the run, and the [ToolHandler]
// knows how long the run may still call.
func (rc *runConn) request(ctx context.Context, m relay.Message, deadline time.Time, calls *sync.WaitGroup) (rr readResult, stop bool) {
	e, runID := rc.e, rc.runID
	var id int64
	var answer func(context.Context) relay.ToolResult
	isCall := m.ToolCall != nil
	if isCall {
		call := *m.ToolCall
		id = call.ID
		answer = func(ctx context.Context) relay.ToolResult { return e.opts.Tools.CallTool(ctx, runID, call) }
	} else {
		q := *m.Query
		id = q.ID
		answer = func(ctx context.Context) relay.ToolResult { return e.opts.Tools.Query(ctx, runID, q) }
	}
	rc.mu.Lock()
	dup := rc.inFlight[id]
	rc.inFlight[id] = true
	rc.mu.Unlock()
	if dup {
		return readResult{err: fmt.Errorf("%w: request id %d is already in flight", relay.ErrProtocol, id)}, true
	}
	select {
	case rc.slots <- struct{}{}:
	case <-rc.cut:
		return readResult{err: rc.cutErr}, true
	case <-ctx.Done():
		return readResult{err: ctx.Err()}, true
	}
	calls.Add(1)
	rc.e.host.requests.Add(1)
	go func() {
		defer calls.Done()
		defer rc.e.host.requests.Add(-1)
		defer func() { <-rc.slots }() // held until the answer is written
		cctx, cancel := context.WithDeadline(ctx, deadline)
		var r relay.ToolResult
		// A read of a resource brings a result as large as a call's.
		if isCall || m.Query.Op == relay.OpReadResource {
			// Its result capacity too is held until the answer is written.
			if release, ok := rc.reserveResult(cctx); ok {
				defer release()
				r = answer(cctx)
			} else {
				r = relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrTimeout, Message: "the run ended before the call could start"}}
			}
		} else {
			r = answer(cctx)
		}
		cancel()
		r.ID = id
		rc.mu.Lock()
		delete(rc.inFlight, id)
		rc.mu.Unlock()
		rc.answer(r)
	}()
	return readResult{}, false
}

// reserveResult takes the result capacity of one tool call, the run's
// first, then the [Executor]'s, waiting for it, and returns the func that
// gives it back, or ok false when the run ended first. One call of each run
// at a time takes nothing of the Executor's: other runs' slow calls, which
// may hold all of it, never stop a run's call from starting (so the
// Executor's capacity is maxBridgeResultBytes plus a call's for each run).
func (rc *runConn) reserveResult(ctx context.Context) (release func(), ok bool) {
	n := rc.e.opts.ResultBytes
	if rc.results.acquire(ctx, n) != nil {
		return nil, false
	}
	rc.mu.Lock()
	own := !rc.ownCall
	rc.ownCall = true
	rc.mu.Unlock()
	if own {
		return func() {
			rc.mu.Lock()
			rc.ownCall = false
			rc.mu.Unlock()
			rc.results.release(n)
		}, true
	}
	if rc.e.results.acquire(ctx, n) != nil {
		rc.results.release(n)
		return nil, false
	}
	return func() { rc.e.results.release(n); rc.results.release(n) }, true
}

// answer frames r and writes it, within the run's and the bridge's budget
// of answer bytes. An answer that does not fit is replaced by a small limit
// error; a write the runner does not take in time cuts the runner off.
func (rc *runConn) answer(r relay.ToolResult) {
	if r.Error != nil && len(r.Error.Message) > maxErrorMessage {
		kept := validPrefix(r.Error.Message, maxErrorMessage)
		r.Error.Message = kept + fmt.Sprintf(" [... %d bytes cut]", len(r.Error.Message)-len(kept))
	}
	frame, err := relay.ToolResultFrame(r)
	if err != nil {
		frame = rc.refusal(r.ID, fmt.Sprintf("the answer could not be sent: %v", err))
	}
	n := int64(frame.Len())
	bridge := rc.e.pending
	switch {
	case !rc.pending.tryAcquire(n):
		rc.e.host.runAns.Add(1)
		frame = rc.refusal(r.ID, fmt.Sprintf("this answer (%s) does not fit with the %s of answers the code has not read yet (at most %s per run): read results before sending more requests",
			units.Bytes(n), units.Bytes(rc.pending.inUse()), units.Bytes(rc.pending.limit)))
		n = 0
	case !bridge.tryAcquire(n):
		rc.e.host.allAns.Add(1)
		rc.pending.release(n)
		frame = rc.refusal(r.ID, fmt.Sprintf("this answer (%s) does not fit in the bridge's buffer for unread answers of all runs (%s): try again, or ask for less",
			units.Bytes(n), units.Bytes(bridge.limit)))
		n = 0
	}
	defer func() {
		if n > 0 {
			rc.pending.release(n)
			bridge.release(n)
		}
	}()
	select {
	case <-rc.cut:
		return
	default:
	}
	if err := rc.c.writeFrame(frame, rc.e.writeTimeout); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			rc.e.host.stalled.Add(1)
			rc.cutOff(fmt.Errorf("%w: an answer of %s waited %s to be written, with %s of answers unread; the run was ended (await each call, or read results before sending more)",
				ErrRunnerStalled, units.Bytes(int64(frame.Len())), rc.e.writeTimeout, units.Bytes(rc.pending.inUse())))
			return
		}
		rc.e.log.Debug().Err(err).Str("run_id", rc.runID).Msg("sending an answer")
	}
}

// refusal frames a limit error for request id; such a frame is small and
// always fits.
func (rc *runConn) refusal(id int64, msg string) relay.Frame {
	f, err := relay.ToolResultFrame(relay.ToolResult{ID: id, Error: &relay.ToolError{Type: relay.ErrLimit, Message: msg}})
	if err != nil {
		panic(err) // a short message always frames
	}
	return f
}

// acceptRunner accepts connections until one presents the run's token with
// a hello of our protocol version, and hands that one over. It returns when
// the listener is closed; a connection that arrives after the run gave up
// (runDone closed) is closed.
func acceptRunner(ln *net.UnixListener, token string, resumed bool, accepted chan<- *runnerConn, runDone <-chan struct{}, log zerolog.Logger) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		rc, err := handshake(conn, token, resumed)
		if err != nil {
			log.Warn().Err(err).Msg("rejected relay connection")
			conn.Close()
			continue
		}
		select {
		case accepted <- rc:
		case <-runDone:
			rc.Close()
		}
		return
	}
}

// handshake reads the runner's hello: its token and protocol, and
// whether it resumes (resumed: a restored sandbox's runner, woken after a
// checkpoint, says so; no other does).
func handshake(conn net.Conn, token string, resumed bool) (*runnerConn, error) {
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	dec := relay.NewDecoder(conn, 0)
	m, err := dec.Decode()
	if err != nil {
		return nil, err
	}
	if m.Type != relay.TypeHello {
		return nil, fmt.Errorf("%w: first message is %s, not hello", relay.ErrProtocol, m.Type)
	}
	if subtle.ConstantTimeCompare([]byte(m.Hello.Token), []byte(token)) != 1 {
		return nil, errors.New("wrong relay token")
	}
	if m.Hello.Version != relay.Version {
		return nil, fmt.Errorf("runner speaks relay protocol v%d, bridge speaks v%d: rebuild the runner image with `bridge image build`", m.Hello.Version, relay.Version)
	}
	switch {
	case m.Hello.Resumed && !resumed:
		return nil, fmt.Errorf("%w: hello says resumed in a run that was not restored", relay.ErrProtocol)
	case !m.Hello.Resumed && resumed:
		return nil, fmt.Errorf("%w: a restored sandbox's runner said hello without resumed", relay.ErrProtocol)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return &runnerConn{Conn: conn, hello: *m.Hello, dec: dec, enc: relay.NewEncoder(conn)}, nil
}
