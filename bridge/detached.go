package bridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A client on MCP 2026-07-28 or later is asked through the call's result:
// the run_python call returns input_required with the question, the
// client asks its human and calls again with the answer and the
// requestState it got (SEP-2322). The run goes on in the sandbox
// meanwhile, waiting for the answer: it is detached from the call that
// started it, and each call of the exchange waits for its next question
// or its end, sending the run's progress while it waits.

const (
	// resultHold is how long a detached run's result waits for the
	// client's next call once the run ended; then it is dropped.
	resultHold = time.Minute
	// answerGrace is how long past a question's own timeout the client
	// may take to call again with the answer; past that the run is
	// cancelled, as a call the client gave up on.
	answerGrace = 10 * time.Second
)

// detached is one run that asks through results.
type detached struct {
	token  string
	rs     *runState
	cancel context.CancelFunc
	done   chan struct{} // closed when result is set
	result *mcp.CallToolResult

	mu      sync.Mutex
	asked   map[string]*pendingAsk // by input request id
	next    int
	dropped *time.Timer // drops an ended run's result nobody collected
	abandon *time.Timer // cancels the run when a question's answer never comes
}

// pendingAsk is one question a detached run waits on.
type pendingAsk struct {
	params  *mcp.ElicitParams
	timeout time.Duration
	answer  chan *mcp.ElicitResult // buffered: the answer never waits
}

// detachedRuns are a [Server]'s detached runs, by token.
type detachedRuns struct {
	mu sync.Mutex
	m  map[string]*detached
}

func (dr *detachedRuns) get(token string) *detached {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	return dr.m[token]
}

func (dr *detachedRuns) add(d *detached) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	if dr.m == nil {
		dr.m = map[string]*detached{}
	}
	dr.m[d.token] = d
}

func (dr *detachedRuns) remove(d *detached) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	if dr.m[d.token] == d {
		delete(dr.m, d.token)
	}
}

// askByResult hands a question to the call the client makes next, and
// waits for its answer.
func (rs *runState) askByResult(ctx context.Context, params *mcp.ElicitParams, timeout time.Duration) (*mcp.ElicitResult, error) {
	p := &pendingAsk{params: params, timeout: timeout, answer: make(chan *mcp.ElicitResult, 1)}
	select {
	case rs.pending <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-p.answer:
		if r == nil {
			return nil, errNoAnswer
		}
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// startDetached runs the call in the background, and answers the call
// with its first question or its result.
func (s *Server) startDetached(ctx context.Context, req *mcp.CallToolRequest, rs *runState, run func(context.Context) *mcp.CallToolResult) *mcp.CallToolResult {
	d := s.detach(ctx, rs, run)
	s.log.Debug().Msg("run detached: its questions go out in results (input_required)")
	return s.await(ctx, req, d)
}

// detach starts run in the background, on a context of its own that
// outlives ctx's call, and registers it by a new token.
func (s *Server) detach(ctx context.Context, rs *runState, run func(context.Context) *mcp.CallToolResult) *detached {
	var b [16]byte
	_, _ = rand.Read(b[:])
	d := &detached{token: "run-" + hex.EncodeToString(b[:]), rs: rs, done: make(chan struct{}), asked: map[string]*pendingAsk{}}
	// The run's own ctx: it outlives this call. execute tracks it, so
	// that Shutdown cancels it.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	s.detached.add(d)
	go func() {
		defer cancel()
		res := run(rctx)
		d.mu.Lock()
		d.result = res
		d.dropped = time.AfterFunc(resultHold, func() { s.detached.remove(d) })
		if d.abandon != nil {
			d.abandon.Stop()
		}
		d.mu.Unlock()
		close(d.done)
	}()
	return d
}

// resume takes the answers a call brings to its run's questions, and
// answers the call with the run's next question or its result.
func (s *Server) resume(ctx context.Context, req *mcp.CallToolRequest, start time.Time) *mcp.CallToolResult {
	d := s.detached.get(req.Params.RequestState)
	if d == nil {
		return failure(statusInvalid, fmt.Sprintf("requestState names no run waiting for this call: it ended more than %s ago, or never was; run the code again", resultHold), start)
	}
	d.mu.Lock()
	if d.abandon != nil {
		d.abandon.Stop()
	}
	for id, resp := range req.Params.InputResponses {
		p := d.asked[id]
		if p == nil {
			continue
		}
		delete(d.asked, id)
		r, _ := resp.(*mcp.ElicitResult)
		p.answer <- r
	}
	d.mu.Unlock()
	return s.await(ctx, req, d)
}

// await answers the call req with the run's next question or, once it
// ended, its result, sending the run's progress meanwhile. A cancelled
// call stops the run.
func (s *Server) await(ctx context.Context, req *mcp.CallToolRequest, d *detached) *mcp.CallToolResult {
	stop := d.rs.progress().sendFor(ctx, req)
	defer stop()
	select {
	case <-d.done:
		return s.collect(d)
	case p := <-d.rs.pending:
		// One question at a time (runState.turn).
		d.mu.Lock()
		defer d.mu.Unlock()
		d.next++
		id := fmt.Sprintf("approve-%d", d.next)
		d.asked[id] = p
		d.abandon = time.AfterFunc(p.timeout+answerGrace, d.cancel)
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{id: p.params}, RequestState: d.token}
	case <-ctx.Done():
		d.cancel()
		<-d.done
		return s.collect(d)
	}
}

// collect takes the result of an ended run.
func (s *Server) collect(d *detached) *mcp.CallToolResult {
	s.detached.remove(d)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dropped != nil {
		d.dropped.Stop()
	}
	return d.result
}
