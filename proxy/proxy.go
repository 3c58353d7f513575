package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// Keys of the _meta objects the proxy and the bridge exchange.
const (
	// MetaServer and MetaTool, on each tool the proxy lists, name the
	// upstream server and the tool's name there.
	MetaServer = "io.github.bridge-mcp/server"
	MetaTool   = "io.github.bridge-mcp/tool"
	// MetaRunID, on a tools/call, is the id of the run that makes the call.
	MetaRunID = "io.github.bridge-mcp/run-id"
	// MetaError, on an isError result, says the proxy made it, and why:
	// one of the Kind constants. A tool's own error results lack it.
	MetaError = "io.github.bridge-mcp/error"
)

// ServersURI is the resource that lists the upstream servers and their
// state (a JSON array of ServerStatus).
const ServersURI = "bridge://servers"

// Options configure a Proxy.
type Options struct {
	// CallTimeout bounds each tool call; 60 s when zero.
	CallTimeout time.Duration
	// ConnectTimeout bounds starting a server and its initialize; 30 s
	// when zero.
	ConnectTimeout time.Duration
	// Version is the bridge's version, sent to upstreams.
	Version string
	Logger  zerolog.Logger
}

// Proxy is an MCP server that offers the tools of every configured upstream
// server, each named SERVER__TOOL and tagged with MetaServer and MetaTool.
// Upstreams are started on first use: the first tools/list (or a read of
// ServersURI) connects them all, concurrently.
type Proxy struct {
	opts   Options
	log    zerolog.Logger
	server *mcp.Server
	cancel context.CancelFunc

	ups    []*upstream // in config order
	byName map[string]*upstream

	regMu sync.Mutex
	reg   map[string]registered // by proxy tool name
}

type registered struct {
	server, tool string
	def          []byte // the tool's JSON as listed, to skip needless updates
}

// New returns a proxy for the servers of cfg. It starts nothing.
func New(cfg Config, opts Options) *Proxy {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = 60 * time.Second
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 30 * time.Second
	}
	base, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		opts:   opts,
		log:    opts.Logger,
		cancel: cancel,
		byName: map[string]*upstream{},
		reg:    map[string]registered{},
	}
	for _, sc := range cfg.Servers {
		u := newUpstream(base, sc, &p.opts, p.log, p.refreshServer)
		p.ups = append(p.ups, u)
		p.byName[sc.Name] = u
	}
	p.server = mcp.NewServer(&mcp.Implementation{Name: "bridge-proxy", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "The tools of the bridge's upstream MCP servers, each named SERVER__TOOL; " +
			"resource " + ServersURI + " lists the servers and their state.",
		Capabilities: &mcp.ServerCapabilities{
			Tools:     &mcp.ToolCapabilities{ListChanged: true},
			Resources: &mcp.ResourceCapabilities{},
		},
	})
	p.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				p.refreshAll(ctx)
			}
			return next(ctx, method, req)
		}
	})
	p.server.AddResource(&mcp.Resource{
		URI:         ServersURI,
		Name:        "servers",
		Description: "The upstream MCP servers and their state",
		MIMEType:    "application/json",
	}, p.readServers)
	return p
}

// Server is the proxy's MCP server, to connect to a transport.
func (p *Proxy) Server() *mcp.Server { return p.server }

// Close stops every upstream server and waits for them.
func (p *Proxy) Close() {
	p.cancel()
	var wg sync.WaitGroup
	for _, u := range p.ups {
		wg.Add(1)
		go func() { defer wg.Done(); u.close() }()
	}
	wg.Wait()
}

// ToolName is the proxy's name for a server's tool.
func ToolName(server, tool string) string { return server + "__" + tool }

// refreshAll lists the tools of every upstream, concurrently, connecting
// those not connected yet, and brings the proxy's tool list up to date.
// Errors are kept in each upstream's state (see ServerStatus).
func (p *Proxy) refreshAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range p.ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.refresh(ctx, u)
		}()
	}
	wg.Wait()
}

// refreshServer is called when a server's tools may have changed. A burst
// of changes makes one refresh at a time, plus at most one more after it.
func (p *Proxy) refreshServer(name string) {
	u := p.byName[name]
	if u == nil {
		return
	}
	u.refreshAgain.Store(true)
	for u.refreshAgain.Load() && u.refreshing.CompareAndSwap(false, true) {
		u.refreshAgain.Store(false)
		ctx, cancel := context.WithTimeout(u.base, p.opts.ConnectTimeout)
		p.refresh(ctx, u)
		cancel()
		u.refreshing.Store(false)
	}
}

func (p *Proxy) refresh(ctx context.Context, u *upstream) {
	tools, err := u.listTools(ctx)
	if err != nil && tools == nil {
		return
	}
	p.sync(u.cfg.Name, tools)
}

// sync makes the proxy's tools of server be exactly tools.
func (p *Proxy) sync(server string, tools []*mcp.Tool) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	want := map[string]bool{}
	for _, t := range tools {
		name := ToolName(server, t.Name)
		if r, ok := p.reg[name]; ok && r.server != server {
			p.log.Warn().Str("server", server).Str("tool", t.Name).Str("clash", r.server).
				Msg("proxy: two servers' tools get the same name; this one is left out")
			continue
		}
		def := *t
		def.Name = name
		meta := mcp.Meta{}
		for k, v := range t.Meta {
			meta[k] = v
		}
		meta[MetaServer], meta[MetaTool] = server, t.Name
		def.Meta = meta
		schema, why := objectSchema(def.InputSchema)
		if why != "" {
			p.log.Warn().Str("server", server).Str("tool", t.Name).Msg("proxy: tool left out: its input schema " + why)
			continue
		}
		def.InputSchema = schema
		js, err := json.Marshal(&def)
		if err != nil {
			p.log.Warn().Err(err).Str("server", server).Str("tool", t.Name).Msg("proxy: tool left out")
			continue
		}
		if r, ok := p.reg[name]; ok && string(r.def) == string(js) {
			want[name] = true
			continue
		}
		if err := addTool(p.server, &def, p.handler(server, t.Name)); err != nil {
			p.log.Warn().Err(err).Str("server", server).Str("tool", t.Name).Msg("proxy: tool left out")
			continue
		}
		want[name] = true
		p.reg[name] = registered{server: server, tool: t.Name, def: js}
	}
	var gone []string
	for name, r := range p.reg {
		if r.server == server && !want[name] {
			gone = append(gone, name)
			delete(p.reg, name)
		}
	}
	if len(gone) > 0 {
		p.server.RemoveTools(gone...)
	}
}

// objectSchema returns the tool's input schema as the proxy lists it: a
// JSON object schema ("type": "object" added when missing, as some servers
// leave it out), or why it cannot be one.
func objectSchema(in any) (any, string) {
	var m map[string]any
	switch v := in.(type) {
	case nil:
		return map[string]any{"type": "object"}, ""
	case map[string]any:
		m = v
	default:
		js, err := json.Marshal(v)
		if err != nil || json.Unmarshal(js, &m) != nil || m == nil {
			return nil, "is not a JSON object"
		}
	}
	switch t, ok := m["type"]; {
	case !ok:
		c := make(map[string]any, len(m)+1)
		for k, v := range m {
			c[k] = v
		}
		c["type"] = "object"
		return c, ""
	case t != "object":
		return nil, fmt.Sprintf("has type %v, not object", t)
	}
	return m, ""
}

// addTool is Server.AddTool, which panics on a schema it does not accept:
// an upstream's tool list must never bring the bridge down.
func addTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the MCP SDK refused it: %v", r)
		}
	}()
	s.AddTool(t, h)
	return nil
}

// handler forwards calls of one tool to its server.
func (p *Proxy) handler(server, tool string) mcp.ToolHandler {
	u := p.byName[server]
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runID, _ := req.Params.Meta[MetaRunID].(string)
		start := time.Now()
		var args any = json.RawMessage(req.Params.Arguments)
		if len(req.Params.Arguments) == 0 {
			args = map[string]any{}
		}
		res, err := u.call(ctx, tool, args, nil)
		ev := p.log.Debug().Str("run_id", runID).Str("server", server).Str("tool", tool).Dur("took", time.Since(start))
		if err != nil {
			ev.Err(err).Msg("proxy: call failed")
			return ErrorResult(err), nil
		}
		ev.Bool("is_error", res.IsError).Msg("proxy: call")
		if _, ok := res.Meta[MetaError]; ok {
			// Only the proxy says a failure was its own.
			meta := mcp.Meta{}
			for k, v := range res.Meta {
				if k != MetaError {
					meta[k] = v
				}
			}
			res.Meta = meta
		}
		return res, nil
	}
}

// ErrorResult is the result the proxy answers with when a call fails
// before or outside the tool: isError, the message as text, and MetaError.
func ErrorResult(err error) *mcp.CallToolResult {
	kind := KindUpstream
	if pe, ok := err.(*Error); ok {
		kind = pe.Kind
	}
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}},
		Meta:    mcp.Meta{MetaError: kind},
	}
}

// ServerStatus describes one upstream server, as ServersURI lists it.
type ServerStatus struct {
	Name string `json:"name"`
	// Title and Description come from the server's initialize answer
	// (serverInfo.title, and the first paragraph of its instructions).
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Type        string `json:"type"`
	// State is "ready" (connected), "idle" (not started yet, or exited and
	// restarted on next use) or "unavailable" (the last connect failed).
	State string `json:"state"`
	Error string `json:"error,omitempty"`
	// Tools is how many tools the server offers, once they were listed.
	Tools int `json:"tools"`
}

// Statuses connects every server not connected yet and reports on them all.
func (p *Proxy) Statuses(ctx context.Context) []ServerStatus {
	p.refreshAll(ctx)
	out := make([]ServerStatus, 0, len(p.ups))
	for _, u := range p.ups {
		connected, info, lastErr := u.status()
		st := ServerStatus{Name: u.cfg.Name, Type: u.cfg.Type, State: "idle", Tools: len(u.cachedTools())}
		switch {
		case connected:
			st.State = "ready"
		case lastErr != nil:
			st.State = "unavailable"
			st.Error = lastErr.Error()
		}
		if info != nil {
			if info.ServerInfo != nil {
				st.Title = info.ServerInfo.Title
			}
			st.Description = firstParagraph(info.Instructions, 400)
		}
		out = append(out, st)
	}
	return out
}

func (p *Proxy) readServers(ctx context.Context, _ *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	js, err := json.Marshal(p.Statuses(ctx))
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
		URI: ServersURI, MIMEType: "application/json", Text: string(js),
	}}}, nil
}

// firstParagraph is the text up to the first blank line, at most n bytes
// (cut at a word boundary).
func firstParagraph(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := strings.LastIndexByte(s[:n], ' ')
	if cut <= 0 {
		cut = n
	}
	return s[:cut] + " …"
}

// ServerNames lists the configured servers, sorted.
func (p *Proxy) ServerNames() []string {
	names := make([]string, 0, len(p.ups))
	for _, u := range p.ups {
		names = append(names, u.cfg.Name)
	}
	sort.Strings(names)
	return names
}

// inMemoryMaxLine bounds one message between the bridge and a proxy in the
// same process. The SDK's default (16 MiB) is what a stdio upstream may send
// as one result, and the proxy's answer wraps it: the in-memory hop must not
// be the one that breaks.
const inMemoryMaxLine = 64 << 20

// Connect opens an in-memory session to the proxy, for a bridge in the
// same process.
func (p *Proxy) Connect(ctx context.Context, log zerolog.Logger) (*Client, error) {
	a, b := net.Pipe()
	ct := &mcp.IOTransport{Reader: a, Writer: a, MaxLineLength: inMemoryMaxLine}
	st := &mcp.IOTransport{Reader: b, Writer: b, MaxLineLength: inMemoryMaxLine}
	ss, err := p.server.Connect(ctx, st, nil)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	c, err := Dial(ctx, ct, p.opts.Version, log)
	if err != nil {
		_ = ss.Close()
		return nil, err
	}
	return c, nil
}
