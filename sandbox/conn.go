package sandbox

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/sandbox/relay"
)

// The bridge's side of one runner's connection: the handshake, reading
// frames, answering tool calls. Every bound here protects the bridge from a
// hostile runner.
const (
	// maxToolCalls is how many tool calls of one run may be in flight. When
	// they are all taken the bridge stops reading, so the runner's writes
	// block: backpressure instead of unbounded goroutines.
	maxToolCalls = 64
	// writeTimeout bounds each write to the runner; one that does not read
	// cannot hold a goroutine longer.
	writeTimeout = 10 * time.Second
	// helloTimeout bounds the handshake of each connection.
	helloTimeout = 10 * time.Second
)

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

// send sends a tool result, bounded by writeTimeout.
func (c *runnerConn) send(r relay.ToolResult) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	return c.enc.ToolResult(r)
}

// serve reads the runner's frames until the connection ends, answering tool
// calls concurrently (at most maxToolCalls at once). It closes exitSeen when
// the exit message arrives; anything after it is a protocol error. Each
// call's ctx has the run's deadline: no call outlives the run, and the
// ToolHandler knows how long the run may still call (a remote MCP proxy
// keeps the run's call budget that long).
func (e *Executor) serve(ctx context.Context, runID string, deadline time.Time, c *runnerConn, out *output, exitSeen chan<- struct{}) readResult {
	// Calls still in flight when the runner is gone are cancelled and
	// awaited, so none outlives the run.
	var calls sync.WaitGroup
	defer calls.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slots := make(chan struct{}, maxToolCalls)
	var mu sync.Mutex
	inFlight := map[int64]bool{}

	var exit *relay.Exit
	for {
		m, err := c.dec.Decode()
		if err != nil {
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
			var id int64
			var answer func(context.Context) relay.ToolResult
			if m.ToolCall != nil {
				call := *m.ToolCall
				id = call.ID
				answer = func(ctx context.Context) relay.ToolResult { return e.opts.Tools.CallTool(ctx, runID, call) }
			} else {
				q := *m.Query
				id = q.ID
				answer = func(ctx context.Context) relay.ToolResult { return e.opts.Tools.Query(ctx, runID, q) }
			}
			mu.Lock()
			dup := inFlight[id]
			inFlight[id] = true
			mu.Unlock()
			if dup {
				return readResult{err: fmt.Errorf("%w: request id %d is already in flight", relay.ErrProtocol, id)}
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return readResult{err: ctx.Err()}
			}
			calls.Add(1)
			go func() {
				defer calls.Done()
				cctx, cancel := context.WithDeadline(ctx, deadline)
				r := answer(cctx)
				cancel()
				r.ID = id
				mu.Lock()
				delete(inFlight, id)
				mu.Unlock()
				<-slots
				if err := c.send(r); err != nil {
					e.log.Debug().Err(err).Str("run_id", runID).Msg("sending tool result")
				}
			}()
		case relay.TypeExit:
			exit = m.Exit
			close(exitSeen)
		case relay.TypeHello:
			return readResult{err: fmt.Errorf("%w: second hello", relay.ErrProtocol)}
		}
	}
}

// acceptRunner accepts connections until one presents the run's token with
// a hello of our protocol version, and hands that one over. It returns when
// the listener is closed; a connection that arrives after the run gave up
// (runDone closed) is closed.
func acceptRunner(ln *net.UnixListener, token string, accepted chan<- *runnerConn, runDone <-chan struct{}, log zerolog.Logger) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		rc, err := handshake(conn, token)
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

func handshake(conn net.Conn, token string) (*runnerConn, error) {
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
	_ = conn.SetReadDeadline(time.Time{})
	return &runnerConn{Conn: conn, hello: *m.Hello, dec: dec, enc: relay.NewEncoder(conn)}, nil
}
