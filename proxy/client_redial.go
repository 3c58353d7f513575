package proxy

import (
	"context"
	"encoding/json"
	"github.com/bridge-mcp/bridge/proxy/catalog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// redialBackoff is how long a failed dial is remembered: calls in that
// time fail at once with its error.
const redialBackoff = time.Second

// dialTimeout bounds one dial of the proxy.
const dialTimeout = 10 * time.Second

// Redialing is a [Client] that is dialled on first use and again whenever
// the session to the proxy has ended. Callers never wait for a dial longer
// than their ctx allows, and one dial serves all who wait.
type Redialing struct {
	dial func(context.Context) (*Client, error)

	mu      sync.Mutex
	client  *Client
	dialing chan struct{} // non-nil while a dial runs
	lastErr error
	retryAt time.Time
	closed  bool
	base    context.Context
	cancel  context.CancelFunc
}

// NewRedialing returns a [Redialing] that opens sessions with dial.
func NewRedialing(dial func(context.Context) (*Client, error)) *Redialing {
	base, cancel := context.WithCancel(context.Background())
	return &Redialing{dial: dial, base: base, cancel: cancel}
}

func (r *Redialing) get(ctx context.Context) (*Client, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errorf(KindUpstream, "the MCP proxy connection is closed")
	}
	if r.client != nil && !r.client.Closed() {
		c := r.client
		r.mu.Unlock()
		return c, nil
	}
	ch := r.dialing
	if ch == nil {
		if time.Now().Before(r.retryAt) {
			err := r.lastErr
			r.mu.Unlock()
			return nil, errorf(KindUpstream, "the MCP proxy is unreachable: %v", err)
		}
		ch = make(chan struct{})
		r.dialing = ch
		go r.redial(ch)
	}
	r.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, errorf(KindUpstream, "gave up waiting for the MCP proxy: %v", ctx.Err())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		return nil, errorf(KindUpstream, "the MCP proxy is unreachable: %v", r.lastErr)
	}
	return r.client, nil
}

func (r *Redialing) redial(ch chan struct{}) {
	ctx, cancel := context.WithTimeout(r.base, dialTimeout)
	defer cancel()
	c, err := r.dial(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dialing = nil
	defer close(ch)
	if old := r.client; old != nil {
		go func() { _ = old.Close() }()
		r.client = nil
	}
	if err != nil {
		r.lastErr, r.retryAt = err, time.Now().Add(redialBackoff)
		return
	}
	if r.closed {
		go func() { _ = c.Close() }()
		return
	}
	r.client = c
}

// Close closes the session; a dial in flight is abandoned.
func (r *Redialing) Close() error {
	r.mu.Lock()
	r.closed = true
	r.cancel()
	c := r.client
	r.client = nil
	r.mu.Unlock()
	if c != nil {
		return c.Close()
	}
	return nil
}

// Servers is [Client.Servers] on the current session.
func (r *Redialing) Servers(ctx context.Context) ([]ServerStatus, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Servers(ctx)
}

// Catalog is [Client.Catalog] on the current session.
func (r *Redialing) Catalog(ctx context.Context) (*catalog.Catalog, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Catalog(ctx)
}

// Resolve is [Client.Resolve] on the current session.
func (r *Redialing) Resolve(ctx context.Context, server, tool string) (ServerStatus, error) {
	c, err := r.get(ctx)
	if err != nil {
		return ServerStatus{}, err
	}
	return c.Resolve(ctx, server, tool)
}

// Call is [Client.Call] on the current session.
func (r *Redialing) Call(ctx context.Context, call Call) (*mcp.CallToolResult, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Call(ctx, call)
}

// CallJSON is [Client.CallJSON] on the current session.
func (r *Redialing) CallJSON(ctx context.Context, call Call) (json.RawMessage, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.CallJSON(ctx, call)
}

// Resources is [Client.Resources] on the current session.
func (r *Redialing) Resources(ctx context.Context, req ResourceRequest) (ResourceList, error) {
	c, err := r.get(ctx)
	if err != nil {
		return ResourceList{}, err
	}
	return c.Resources(ctx, req)
}

// ReadResource is [Client.ReadResource] on the current session.
func (r *Redialing) ReadResource(ctx context.Context, req ResourceRequest) (*ResourceData, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.ReadResource(ctx, req)
}
