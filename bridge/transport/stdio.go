// Package transport serves an MCP server to its clients: over stdio, a line
// at a time, answering a malformed line with a JSON-RPC error rather than
// ending the session (stdio.go), and over streamable HTTP and SSE, with a
// bearer token beyond loopback, /healthz, and the sessions ended on
// shutdown (http.go).
package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// DefaultMaxRequestBytes bounds one message from a client when the
// caller gives no [RequestLimit]: the SDK's own limit for an HTTP body
// (4 MiB).
const DefaultMaxRequestBytes = mcp.DefaultMaxRequestBodyBytes

// RequestLimit bounds one message from a client (a stdio line, not
// counting its newline; an HTTP body), refused before it is held in
// memory. Setting names what sets it, for the error a client gets.
type RequestLimit struct {
	Bytes   int64
	Setting string
}

// orDefault is l, or DefaultMaxRequestBytes when l gives no bound.
func (l RequestLimit) orDefault() RequestLimit {
	if l.Bytes <= 0 {
		return RequestLimit{Bytes: DefaultMaxRequestBytes}
	}
	return l
}

// over says how a message of n bytes is over the limit.
func (l RequestLimit) over(what string, n int64) string {
	s := fmt.Sprintf("%s of %d bytes is over the limit of %d bytes", what, n, l.Bytes)
	if l.Setting != "" {
		s += " (" + l.Setting + ")"
	}
	return s
}

// stdioDrainTimeout bounds how long ServeStdio, once its input has ended,
// waits for the answers to calls already received before it cancels them. A
// client that closes our stdin is done with us (the MCP spec's shutdown), but
// `printf '...' | bridge serve` should still see the answers to quick calls.
const stdioDrainTimeout = 2 * time.Second

// ServeStdio serves srv over newline-delimited JSON-RPC 2.0: requests from
// in, answers to out. Unlike the SDK's StdioTransport, a malformed line does
// not end the session: it is answered on out with a JSON-RPC error (-32700
// for a line that is not JSON, -32600 for JSON that is not a JSON-RPC 2.0
// message, with the line's id when one can be recovered, else null) and the
// next line is read. Blank lines are skipped. A line longer than limit
// (DefaultMaxRequestBytes when it gives none) is not held in memory: it is
// scanned as it is read for its top-level "id", wherever that comes in the
// line, answered with -32600 naming limit.Setting and that id (null when it
// has none, or one over maxIDBytes), and skipped up to its newline; the lines
// after it are read as usual. Such a line that is a whole notification (a
// "method" and no "id") is skipped without an answer, as JSON-RPC says.
// JSON-RPC batches (a JSON array on one line, which MCP dropped in
// 2025-06-18) are refused with -32600.
//
// ServeStdio returns nil when in ends (EOF): the calls in flight then get up
// to two seconds to answer, after which they are cancelled. It returns
// ctx.Err() when ctx ends: the calls in flight are cancelled at once (their
// handlers see their contexts cancelled), and ServeStdio returns when they
// have returned. Any other error is a failure to read in or write out.
//
// ServeStdio uses srv.Connect and session.Wait, not srv.Run. What ends the
// session is the transport's read side failing (io.EOF, or ctx.Err(): Read
// watches ctx): the SDK then cancels the handlers in flight and closes the
// connection once they have returned. Run would add, on ctx's end, a
// graceful ServerSession.Close, which by itself only waits for the handlers
// to finish on their own (with the SDK's StdioTransport, whose Read ignores
// ctx, a run_python call in flight would hold the process for minutes), and
// it logs the cancellation as an error through the SDK's logger.
//
// ServeStdio never closes in or out. A Read on in that is blocked when
// the session ends keeps its goroutine until in returns (as with the SDK's
// own stdio transport; os.Stdin cannot be interrupted portably).
func ServeStdio(ctx context.Context, srv *mcp.Server, in io.Reader, out io.Writer, limit RequestLimit, log zerolog.Logger) error {
	return serveStdio(ctx, srv, in, out, log, limit, stdioDrainTimeout)
}

func serveStdio(ctx context.Context, srv *mcp.Server, in io.Reader, out io.Writer, log zerolog.Logger, limit RequestLimit, drain time.Duration) error {
	if srv == nil {
		return errors.New("bridge: ServeStdio: nil server")
	}
	limit = limit.orDefault()
	t := &stdioTransport{ctx: ctx, in: in, out: out, log: log, maxLine: int(limit.Bytes), limit: limit, drain: drain}
	ss, err := srv.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("connecting the stdio session: %w", err)
	}
	err = ss.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// stdioTransport is an mcp.Transport over newline-delimited JSON that
// answers malformed lines itself instead of failing the connection. It is
// connected once.
type stdioTransport struct {
	ctx     context.Context // ends the session: Read fails with ctx.Err()
	in      io.Reader
	out     io.Writer
	log     zerolog.Logger
	maxLine int
	limit   RequestLimit
	drain   time.Duration
}

// Connect implements mcp.Transport.
func (t *stdioTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &stdioConn{
		t:       t,
		lines:   make(chan stdioLine),
		closed:  make(chan struct{}),
		pending: map[jsonrpc.ID]int{},
		idle:    make(chan struct{}),
	}
	close(c.idle) // nothing pending yet
	go c.readLines()
	return c, nil
}

// stdioLine is one line of input, or the error that ended the input.
type stdioLine struct {
	data    []byte // without its line ending; nil if tooLong
	size    int64  // the line's length, without its ending
	tooLong bool   // over the limit: not kept
	id      lineID // if tooLong, what the line says about its id
	err     error  // io.EOF or a read error; data is then empty
}

// stdioConn is the mcp.Connection of a stdioTransport.
type stdioConn struct {
	t     *stdioTransport
	lines chan stdioLine // from readLines to Read

	// writeMu serialises writes to out: the SDK's, which may come from many
	// goroutines, and Read's error answers.
	writeMu sync.Mutex

	closeOnce sync.Once
	closed    chan struct{}

	// pending counts the calls read and not yet answered, by id, so that
	// the end of input can wait for their answers; idle is closed while
	// there are none.
	pendingMu sync.Mutex
	pending   map[jsonrpc.ID]int
	npending  int
	idle      chan struct{}
}

// SessionID implements mcp.Connection; stdio sessions have no id.
func (c *stdioConn) SessionID() string { return "" }

// Close implements mcp.Connection. It unblocks Read; it does not close in
// or out, which the caller owns.
func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// readLines reads in, line by line, and hands each line to Read until the
// input ends or the connection closes.
func (c *stdioConn) readLines() {
	br := bufio.NewReaderSize(c.t.in, 64<<10)
	for {
		l, n, err := c.readLine(br)
		// A last line without a newline counts too.
		if n > 0 && !c.send(l) {
			return
		}
		if err != nil {
			c.send(stdioLine{err: err})
			return
		}
	}
}

// readLine reads one line from br and says how many bytes it took (its
// ending included). A line longer than maxLine is not kept: the bytes read
// of it go through an idScan as they come, so that the line can be
// answered with its id wherever the id is (the TypeScript SDK writes it
// last), and what follows its newline stays in br for the next line.
func (c *stdioConn) readLine(br *bufio.Reader) (l stdioLine, n int64, err error) {
	var (
		scan  *idScan
		chunk []byte
		cr    bool // the chunk before ended with "\r"
		eol   int  // the length of the line's ending
	)
	for {
		chunk, err = br.ReadSlice('\n')
		n += int64(len(chunk))
		if scan != nil {
			scan.feed(chunk)
		} else if l.data = append(l.data, chunk...); len(l.data) > c.t.maxLine+2 {
			// Over the limit even without its line ending ("\r\n").
			scan = &idScan{}
			scan.feed(l.data)
			l.data = nil
		}
		if bytes.HasSuffix(chunk, []byte("\n")) {
			eol = 1
			if bytes.HasSuffix(chunk, []byte("\r\n")) || len(chunk) == 1 && cr {
				eol = 2
			}
		}
		if err != bufio.ErrBufferFull {
			break
		}
		cr = bytes.HasSuffix(chunk, []byte("\r"))
	}
	l.size = n - int64(eol)
	if scan == nil {
		if l.data = trimEOL(l.data); len(l.data) <= c.t.maxLine {
			return l, n, err
		}
		scan = &idScan{}
		scan.feed(l.data)
		l.data = nil
	}
	l.tooLong, l.id = true, scan.result()
	return l, n, err
}

// trimEOL removes a trailing "\n" or "\r\n".
func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// send hands l to Read; it reports false once the connection is closed.
func (c *stdioConn) send(l stdioLine) bool {
	select {
	case c.lines <- l:
		return true
	case <-c.closed:
		return false
	}
}

// Read implements mcp.Connection: it returns the next well-formed message,
// answering and skipping malformed lines on the way. Only the end of input,
// a failure to read or write, ctx's end or Close make it fail, and any
// failure ends the session.
func (c *stdioConn) Read(context.Context) (jsonrpc.Message, error) {
	// The SDK passes a context that is never done; the transport's own
	// context is what ends the session.
	ctx := c.t.ctx
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
			return nil, io.EOF
		case l := <-c.lines:
			if l.err != nil {
				if l.err == io.EOF {
					c.waitForAnswers(ctx)
					return nil, io.EOF
				}
				return nil, fmt.Errorf("reading stdin: %w", l.err)
			}
			if l.tooLong && l.id.notification {
				// JSON-RPC answers no notification, not even with an error.
				c.t.log.Warn().Int64("bytes", l.size).Int64("limit", c.t.limit.Bytes).Str("setting", c.t.limit.Setting).
					Msg("skipped a JSON-RPC notification longer than the limit of a line; JSON-RPC answers no notification")
				continue
			}
			msg, bad := decodeLine(l, c.t.limit)
			if bad != nil {
				c.t.log.Warn().Int("code", bad.code).Str("error", bad.message).Int64("bytes", l.size).
					Msg("answered a malformed JSON-RPC line with an error")
				if err := c.writeError(ctx, bad); err != nil {
					return nil, err
				}
				continue
			}
			if msg == nil {
				continue // a blank line
			}
			if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
				c.addPending(req.ID)
			}
			return msg, nil
		}
	}
}

// Write implements mcp.Connection.
func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a JSON-RPC message: %w", err)
	}
	if err := c.writeLine(data); err != nil {
		return err
	}
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.donePending(resp.ID)
	}
	return nil
}

// writeLine writes data and a newline to out in one Write, under writeMu.
func (c *stdioConn) writeLine(data []byte) error {
	select {
	case <-c.closed:
		return mcp.ErrConnectionClosed
	default:
	}
	buf := make([]byte, 0, len(data)+1)
	buf = append(append(buf, data...), '\n')
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if _, err := c.t.out.Write(buf); err != nil {
		return fmt.Errorf("writing stdout: %w", err)
	}
	return nil
}

// writeError answers a malformed line.
func (c *stdioConn) writeError(ctx context.Context, bad *lineError) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id := bad.id
	if id == nil {
		id = json.RawMessage("null")
	}
	data, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{
		JSONRPC: "2.0",
		ID:      id,
		Error: struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}{bad.code, bad.message},
	})
	if err != nil {
		return fmt.Errorf("encoding an error answer: %w", err)
	}
	return c.writeLine(data)
}

func (c *stdioConn) addPending(id jsonrpc.ID) {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	if c.npending == 0 {
		c.idle = make(chan struct{})
	}
	c.pending[id]++
	c.npending++
}

func (c *stdioConn) donePending(id jsonrpc.ID) {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	n, ok := c.pending[id]
	if !ok {
		return
	}
	if n <= 1 {
		delete(c.pending, id)
	} else {
		c.pending[id] = n - 1
	}
	c.npending--
	if c.npending == 0 {
		close(c.idle)
	}
}

// waitForAnswers waits, for at most the drain timeout, until every call
// read has been answered.
func (c *stdioConn) waitForAnswers(ctx context.Context) {
	c.pendingMu.Lock()
	idle, n := c.idle, c.npending
	c.pendingMu.Unlock()
	if n == 0 {
		return
	}
	c.t.log.Debug().Int("calls", n).Msg("stdin closed; waiting for the calls in flight")
	timer := time.NewTimer(c.t.drain)
	defer timer.Stop()
	select {
	case <-idle:
	case <-timer.C:
		c.t.log.Info().Int("calls", n).Msg("stdin closed; cancelling the calls still in flight")
	case <-ctx.Done():
	case <-c.closed:
	}
}

// lineError is the JSON-RPC error answering a malformed line.
type lineError struct {
	code    int
	message string
	id      json.RawMessage // the line's id, or nil
}

const lineHint = "; each line must be one JSON-RPC 2.0 message"

// decodeLine decodes one line. It returns nil, nil for a blank line.
func decodeLine(l stdioLine, limit RequestLimit) (jsonrpc.Message, *lineError) {
	if l.tooLong {
		msg := "invalid request: " + limit.over("line", l.size) + lineHint
		if l.id.tooLong {
			msg += fmt.Sprintf("; its id is over %d bytes, so it is answered with id null", maxIDBytes)
		}
		return nil, &lineError{code: jsonrpc.CodeInvalidRequest, message: msg, id: l.id.id}
	}
	data := bytes.TrimSpace(l.data)
	if len(data) == 0 {
		return nil, nil
	}
	if !json.Valid(data) {
		var probe json.RawMessage
		msg := "invalid JSON"
		if err := json.Unmarshal(l.data, &probe); err != nil {
			msg = err.Error()
			var se *json.SyntaxError
			if errors.As(err, &se) {
				msg = fmt.Sprintf("%s at byte %d", se, se.Offset)
			}
		}
		return nil, &lineError{code: jsonrpc.CodeParseError, message: "parse error: " + msg + lineHint, id: scanID(data).id}
	}
	invalid := func(format string, args ...any) *lineError {
		return &lineError{
			code:    jsonrpc.CodeInvalidRequest,
			message: "invalid request: " + fmt.Sprintf(format, args...) + lineHint,
			id:      scanID(data).id,
		}
	}
	switch data[0] {
	case '{':
	case '[':
		return nil, invalid("JSON-RPC batches (arrays) are not supported")
	default:
		return nil, invalid("a JSON-RPC message must be a JSON object")
	}
	var fields struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  json.RawMessage `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, invalid("%v", err)
	}
	switch {
	case fields.JSONRPC == nil:
		return nil, invalid(`"jsonrpc":"2.0" is missing`)
	case *fields.JSONRPC != "2.0":
		return nil, invalid(`"jsonrpc" must be "2.0", not %q`, *fields.JSONRPC)
	case fields.Method == nil && fields.Result == nil && fields.Error == nil:
		return nil, invalid(`a request needs a "method"`)
	case fields.ID != nil && !validID(fields.ID):
		return nil, invalid(`"id" must be a string, a number or null`)
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return nil, invalid("%v", err)
	}
	return msg, nil
}

// validID reports whether id, the JSON text of an "id" member, is a
// string, a number or null.
func validID(id json.RawMessage) bool {
	switch c := id[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	}
	return string(id) == "null"
}
