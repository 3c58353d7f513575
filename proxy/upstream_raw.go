package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Big results pass through as the upstream wrote them. The bridge in this
// process wants a tool's result as JSON for the relay, and the SDK would
// decode the whole result into Go values only for the proxy to encode it
// again: for a result of megabytes, most of the proxy's cost. So a call
// that wants its result raw tags its request with a token (in _meta); the
// connection notes the request's id, and when the answer to that id comes
// and is big, it keeps the raw result aside for the token and hands the
// SDK an empty one in its place. The call then takes the raw bytes.
// Nothing else changes: the policy's checks happen before, the size check
// after, on the same bytes.

// metaRawCall is the _meta key of a request whose result is wanted raw.
const metaRawCall = "io.github.bridge-mcp/raw-call"

// rawMinBytes is the least result size kept raw: below it, decoding costs
// less than the bookkeeping matters.
const rawMinBytes = 64 << 10

// maxRawCalls bounds the calls a connection notes at once.
const maxRawCalls = 4096

// rawStub is what the SDK decodes in place of a result kept raw.
var rawStub = json.RawMessage(`{"content":[]}`)

// rawResults holds the raw results of the calls that want them, by token,
// from the moment the answer is read until the call takes it. A call
// registers its token before it is sent and drops it when it returns, so
// an answer that comes after its call gave up is not kept.
type rawResults struct {
	mu      sync.Mutex
	waiting map[string][]byte // token -> the raw result, nil until read
	kept    int64             // results kept raw so far
}

func newRawResults() *rawResults { return &rawResults{waiting: map[string][]byte{}} }

// expect registers a new token and returns it.
func (r *rawResults) expect() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	tok := hex.EncodeToString(b)
	r.mu.Lock()
	r.waiting[tok] = nil
	r.mu.Unlock()
	return tok
}

// offer keeps raw for tok if a call waits for it and has none yet.
func (r *rawResults) offer(tok string, raw []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.waiting[tok]
	if !ok || got != nil {
		return false
	}
	r.waiting[tok] = raw
	r.kept++
	return true
}

// take removes tok and returns its raw result, if one was kept.
func (r *rawResults) take(tok string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	raw := r.waiting[tok]
	delete(r.waiting, tok)
	return raw
}

// rawTransport makes connections that keep big results raw for results.
type rawTransport struct {
	mcp.Transport
	results *rawResults
}

func (t *rawTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &rawConn{Connection: c, results: t.results, calls: map[jsonrpc.ID]string{}}, nil
}

type rawConn struct {
	mcp.Connection
	results *rawResults
	mu      sync.Mutex
	calls   map[jsonrpc.ID]string // request id -> token, of calls that want raw results
}

// Write notes the id of a tools/call that carries a token, and sends m
// without the go-sdk server's values of ctx.
func (c *rawConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if req, ok := m.(*jsonrpc.Request); ok && req.Method == "tools/call" && req.ID.IsValid() &&
		bytes.Contains(req.Params, []byte(metaRawCall)) {
		var p struct {
			Meta map[string]any `json:"_meta"`
		}
		if json.Unmarshal(req.Params, &p) == nil {
			if tok, ok := p.Meta[metaRawCall].(string); ok {
				c.mu.Lock()
				// Calls whose answer never comes leave their id here
				// until the session ends: bounded, past which calls
				// take the SDK's way.
				if len(c.calls) < maxRawCalls {
					c.calls[req.ID] = tok
				}
				c.mu.Unlock()
			}
		}
	}
	// Without the agent's request's go-sdk values (sdkctx.go).
	return c.Connection.Write(upstreamCtx{ctx}, m)
}

// Read keeps a big result of a noted call aside.
func (c *rawConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if resp, ok := m.(*jsonrpc.Response); ok && err == nil && resp.ID.IsValid() {
		c.mu.Lock()
		tok, noted := c.calls[resp.ID]
		delete(c.calls, resp.ID)
		c.mu.Unlock()
		if noted && resp.Error == nil && len(resp.Result) >= rawMinBytes && c.results.offer(tok, resp.Result) {
			resp.Result = rawStub
		}
	}
	return m, err
}
