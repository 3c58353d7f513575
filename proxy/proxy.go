package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/policy"
)

// Keys of the _meta objects the proxy and the bridge exchange.
const (
	// MetaServer and MetaTool, on each tool the proxy lists, name the
	// upstream server and the tool's name there.
	MetaServer = "io.github.bridge-mcp/server"
	MetaTool   = "io.github.bridge-mcp/tool"
	// MetaRunID, on a tools/call, is the id of the run that makes the call.
	MetaRunID = "io.github.bridge-mcp/run-id"
	// MetaRunTimeLeft, on a tools/call, is how many milliseconds the run
	// may still last: a remote proxy keeps the run's call budget that long.
	MetaRunTimeLeft = "io.github.bridge-mcp/run-time-left-ms"
	// MetaVault, on a tools/call of a session's run, names the session's
	// tokenized values, which its runs share (policy.Store.ShareVault);
	// MetaVaultTimeLeft is how many milliseconds the session may still
	// last: the proxy keeps the values that long.
	MetaVault         = "io.github.bridge-mcp/vault"
	MetaVaultTimeLeft = "io.github.bridge-mcp/vault-time-left-ms"
	// MetaError, on an isError result, says the proxy made it, and why:
	// one of the Kind constants. A tool's own error results lack it.
	MetaError = "io.github.bridge-mcp/error"
	// MetaDecision, on a remote proxy's answer to a tools/call, is how the
	// policy decided ([CallReport]): "allow", "deny", or "ask:" and how the
	// human answered.
	MetaDecision = "io.github.bridge-mcp/decision"
)

// maxArgumentSummary bounds the arguments shown to the human in an ask.
const maxArgumentSummary = 300

// ServersURI is the resource that lists the upstream servers and their
// state (a JSON array of [ServerStatus]).
const ServersURI = "bridge://servers"

// Options configure a [Proxy].
type Options struct {
	// CallTimeout bounds each tool call; 60 s when zero.
	CallTimeout time.Duration
	// ConnectTimeout bounds starting a server and its initialize; 30 s
	// when zero.
	ConnectTimeout time.Duration
	// Version is the bridge's version, sent to upstreams.
	Version string
	Logger  zerolog.Logger
	// Policy, if set, decides which servers are started and which tools
	// are listed and may be called, bounds each run's calls (count, sizes,
	// rates, timeout) and audits every decision. Nil: everything is allowed,
	// with CallTimeout.
	Policy *policy.Store
	// Metrics, if set, counts tool calls by server, tool and decision, asks
	// and budget refusals, and times the calls that go upstream.
	Metrics *metrics.Metrics
	// Lock, if set, pins the tools' definitions from a lock file the
	// operator wrote (`bridge tools lock`) instead of as first listed: a
	// tool not in it counts as changed ("not in the lock file").
	Lock *Lock
	// Tracer, if set, traces each call: its gate, ask and upstream
	// (tracing.go), under the caller's span its _meta or its HTTP
	// request's headers carry; HTTP upstreams get the upstream span's
	// traceparent. Nil: nothing is traced.
	Tracer trace.Tracer
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
	// version counts the changes to the tools offered (and to what a
	// server says of itself, pinServer), and only changes: a
	// client in this process checks it before each call (the list_changed
	// notification that tells it the same arrives later), so a sync that
	// changed nothing must leave it alone, or the client's own tools/list
	// (which syncs every server) would invalidate the catalog it fetched.
	version atomic.Uint64
	reg     map[string]registered // by proxy tool name: the listed tools
	known   map[string][2]string  // by proxy tool name: every upstream tool, listed or denied
	pins    map[string]*pin       // by proxy tool name: each tool's definition as first listed (pins.go)
	// serverPins holds, by server name, what each server said of itself
	// at its first connect (pins.go).
	serverPins map[string]*pin
	// defs holds, by proxy tool name, the definition of each known tool
	// that sync last checked against its pin: the one the gate decides on
	// (checked), never an upstream's newer list not checked yet.
	defs map[string]*mcp.Tool

	// afterList, if set (by tests), is called with each tool list an
	// upstream returns, before sync checks it against the pins: the window
	// in which the upstream's list is newer than the proxy's.
	afterList func(server string, tools []*mcp.Tool)

	kinds kindCache // the tokenize kinds of the latest policy
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
		known:  map[string][2]string{},
		defs:   map[string]*mcp.Tool{},
		pins:   map[string]*pin{},

		serverPins: map[string]*pin{},
	}
	if opts.Lock != nil {
		p.pins = opts.Lock.pins()
	}
	for _, sc := range cfg.Servers {
		u := newUpstream(base, sc, &p.opts, p.log, p.refreshServer)
		u.connected = func(info *mcp.InitializeResult) { p.pinServer(sc.Name, info) }
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
	p.server.AddReceivingMiddleware(p.intercept)
	if opts.Policy != nil {
		opts.Policy.OnChange(func(*policy.Snapshot) { p.resync() })
	}
	p.server.AddResource(&mcp.Resource{
		URI:         ServersURI,
		Name:        "servers",
		Description: "The upstream MCP servers and their state",
		MIMEType:    "application/json",
	}, p.readServers)
	return p
}

// intercept answers, ahead of the SDK's handlers, the requests that go
// upstream: tools/call (and tools/list brings the tools up to date first),
// and a bridge's resources/list and resources/read (resources_wire.go).
func (p *Proxy) intercept(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			p.refreshAll(ctx)
		case "tools/call":
			// Every upstream tool, listed or denied, is answered here:
			// a denied one must say so, not "unknown tool".
			if r, ok := req.(*mcp.CallToolRequest); ok {
				server, tool, ok := p.target(r)
				if ok {
					return p.callTool(ctx, r, server, tool), nil
				}
				if _, named := r.Params.Meta[MetaServer]; named {
					// The bridge asked for a pair no upstream lists: never
					// let the name alone pick another server's tool.
					return nil, fmt.Errorf("unknown tool: server %q has no tool %q", server, tool)
				}
			}
		case "resources/list", "resources/read":
			if res, handled, err := p.serveResources(ctx, method, req); handled {
				return res, err
			}
		}
		return next(ctx, method, req)
	}
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
// Errors are kept in each upstream's state (see [ServerStatus]).
func (p *Proxy) refreshAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, u := range p.reachable() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.refresh(ctx, u)
		}()
	}
	wg.Wait()
}

// listed is how many tools of server the proxy lists.
func (p *Proxy) listed(server string) int {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	n := 0
	for _, r := range p.reg {
		if r.server == server {
			n++
		}
	}
	return n
}

// target is the upstream tool a call is for. The bridge names it in _meta
// (MetaServer, MetaTool), which is exact even where two servers' names
// run together (servers "a" and "a__b"); other clients use the proxy's
// name alone. ok is false for a tool no upstream lists.
func (p *Proxy) target(r *mcp.CallToolRequest) (server, tool string, ok bool) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	s, _ := r.Params.Meta[MetaServer].(string)
	t, _ := r.Params.Meta[MetaTool].(string)
	if s != "" || t != "" {
		k, ok := p.known[ToolName(s, t)]
		return s, t, ok && k == [2]string{s, t}
	}
	k, ok := p.known[r.Params.Name]
	return k[0], k[1], ok
}

// reachable are the upstreams the policy in force lets the code reach.
func (p *Proxy) reachable() []*upstream {
	if p.opts.Policy == nil {
		return p.ups
	}
	pol := p.opts.Policy.Current().Policy
	var out []*upstream
	for _, u := range p.ups {
		if pol.ServerAllowed(u.cfg.Name) {
			out = append(out, u)
		}
	}
	return out
}

// resync applies a new policy to the tool lists already known: tools it
// denies leave the list, tools it allows join it. Servers it no longer
// reaches lose all their tools (they are not stopped; nothing calls them).
func (p *Proxy) resync() {
	reach := map[*upstream]bool{}
	for _, u := range p.reachable() {
		reach[u] = true
	}
	for _, u := range p.ups {
		tools, gen := u.cachedList()
		switch {
		case !reach[u]:
			p.sync(u.cfg.Name, nil, 0)
		case tools != nil:
			p.sync(u.cfg.Name, tools, gen)
		default:
			// Newly reachable and never listed: list it now, which tells
			// the bridge (list_changed) when its tools arrive.
			go p.refreshServer(u.cfg.Name)
		}
	}
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
	tools, gen, err := u.listTools(ctx)
	if err != nil && tools == nil {
		return
	}
	p.check(u, tools, gen)
}

// check checks the tools the session of generation gen of u listed
// against their pins, and lists them (sync).
func (p *Proxy) check(u *upstream, tools []*mcp.Tool, gen uint64) {
	if p.afterList != nil {
		p.afterList(u.cfg.Name, tools)
	}
	p.sync(u.cfg.Name, tools, gen)
}

// maxSessionChecks bounds how many sessions in a row checkedSession checks
// for one call: a server that restarts under each of its listings is
// unavailable.
const maxSessionChecks = 3

// checkedSession is the session a call of u's tool goes on, connected if
// there was none, and checked: what the server said of itself when it
// connected was compared with its pin then (pinServer, before the session
// was handed out), and the tools it lists have been checked against theirs
// (sync). A session not listed yet (a restarted server: a new process may
// list other tools) is listed and checked here, before any call goes on
// it; one already checked costs nothing more than the session's lookup.
func (p *Proxy) checkedSession(ctx context.Context, u *upstream) (live, error) {
	for range maxSessionChecks {
		l, err := u.session(ctx)
		if err != nil || l.gen == u.synced.Load() {
			return l, err
		}
		lctx, cancel := context.WithTimeout(ctx, p.opts.ConnectTimeout)
		tools, gen, err := u.listOn(lctx, l)
		cancel()
		if err != nil {
			return live{}, err
		}
		p.check(u, tools, gen)
	}
	return live{}, errorf(KindUpstream, "server %q restarted %d times while the bridge checked its tools; it is tried again on next use",
		u.cfg.Name, maxSessionChecks)
}

// sync makes the proxy's tools of server be exactly tools, listed by its
// session of generation gen (0 for none: a server no longer reachable).
// A list of a session older than the one last checked (a listing that
// outlived its session) is dropped: the gate decides on the newest.
func (p *Proxy) sync(server string, tools []*mcp.Tool, gen uint64) {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	if u := p.byName[server]; u != nil && gen != 0 {
		if gen < u.synced.Load() {
			return
		}
		u.synced.Store(gen)
	}
	changed := false
	defer func() {
		if changed {
			p.version.Add(1)
		}
	}()
	var pol *policy.Policy
	if p.opts.Policy != nil {
		pol = p.opts.Policy.Current().Policy
	}
	for name, k := range p.known {
		if k[0] == server {
			delete(p.known, name)
			delete(p.defs, name)
		}
	}
	want := map[string]bool{}
	for _, t := range tools {
		name := ToolName(server, t.Name)
		if k, ok := p.known[name]; ok && k[0] != server {
			p.log.Warn().Str("server", server).Str("tool", t.Name).Str("clash", k[0]).
				Msg("proxy: two servers' tools get the same name; this one is left out")
			continue
		}
		p.known[name] = [2]string{server, t.Name}
		// Pinned before the policy looks at it: a tool denied now must not
		// come back allowed, by new annotations, as a tool never seen. The
		// gate decides on this definition, with the same lock held as its
		// check: never on one no pin was checked against.
		drift := p.pinOrCheck(name, t)
		p.defs[name] = t
		if pol != nil && !pol.Decide(ToolPolicy(server, t)).Listed() {
			continue // denied tools are not listed
		}
		if pol != nil && pol.Tools.OnChange == policy.Deny && (drift != "" || p.changedServer(server) != "") {
			continue // a changed tool, or server, the policy denies: its new text is not shown
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
		changed = true
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
		changed = true
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

// handler is the SDK handler of a listed tool. The receiving middleware
// answers every call of an upstream tool first (callTool), so this one
// only makes the tool listable.
func (p *Proxy) handler(server, tool string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return p.callTool(ctx, req, server, tool), nil
	}
}

// callTool applies the policy to one call and, if it passes, forwards it
// to the upstream: the decision (the tool's rule), the argument size, the
// run's call budget, the rate limits, then the call with the policy's
// timeout, then the result size. Each decision is audited (Store.Record:
// one record each, or, for refusals repeated past its bounds, counted in a
// summary).
func (p *Proxy) callTool(ctx context.Context, req *mcp.CallToolRequest, server, tool string) *mcp.CallToolResult {
	var rep CallReport
	var h http.Header
	if req.Extra != nil {
		h = req.Extra.Header
	}
	ctx, span := p.startCall(ctx, req.Params.Meta, h, trace.SpanKindServer, server, tool)
	// A client over MCP has no [Asker] here: calls the policy asks about get
	// tools.ask_fallback.
	res, js, err := p.call(ctx, req.Params, server, tool, false, nil, &rep)
	if err != nil {
		res = ErrorResult(err)
		endCall(span, &rep, resultInfo{}, err)
	} else {
		endCall(span, &rep, resultInfo{bytes: len(js), isError: res.IsError}, nil)
	}
	if rep.Decision != "" {
		meta := make(mcp.Meta, len(res.Meta)+1)
		for k, v := range res.Meta {
			meta[k] = v
		}
		meta[MetaDecision] = rep.encode()
		res.Meta = meta
	}
	return res
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
// A server's start-up error, which may quote its stderr, is shown: it is
// what the code and the human need to know why it is unavailable, and it is
// no definition. But a server whose own text changed under tools.on_change
// deny must not say through it what its withheld text would have (a
// restart with new instructions, then a start that fails with them on
// stderr): then nothing it wrote is shown (withheld).
func (p *Proxy) Statuses(ctx context.Context) []ServerStatus {
	p.refreshAll(ctx)
	ups := p.reachable()
	out := make([]ServerStatus, 0, len(ups))
	for _, u := range ups {
		connected, info, lastErr := u.status()
		st := ServerStatus{Name: u.cfg.Name, Type: u.cfg.Type, State: "idle", Tools: p.listed(u.cfg.Name)}
		withheld := p.withheld(u.cfg.Name)
		switch {
		case connected:
			st.State = "ready"
		case lastErr != nil && withheld != "":
			st.State = "unavailable"
			st.Error = fmt.Sprintf("it cannot be reached; its error is withheld, as what it says about itself (%s) changed "+
				"since the bridge first connected to it and the policy refuses a changed server (tools.on_change: deny): the bridge's log has it", withheld)
		case lastErr != nil:
			st.State = "unavailable"
			st.Error = lastErr.Error()
		}
		if info != nil {
			st.Title, st.Description = p.describe(u.cfg.Name, info, withheld)
		}
		out = append(out, st)
	}
	return out
}

// withheld says what of server's own text changed since it was pinned when
// tools.on_change is deny: then none of the server's own words reach the
// code. "" when nothing changed, or the policy lets a changed server be.
func (p *Proxy) withheld(server string) string {
	if p.opts.Policy == nil || p.opts.Policy.Current().Policy.Tools.OnChange != policy.Deny {
		return ""
	}
	p.regMu.Lock()
	defer p.regMu.Unlock()
	return p.changedServer(server)
}

// describe is what the code is shown of a server: its title, and the
// first paragraph of its instructions. When these changed since the server
// was pinned and tools.on_change is deny (withheld says what changed), the
// new text is withheld: the pinned title, and a description that says why
// its tools are gone.
func (p *Proxy) describe(server string, info *mcp.InitializeResult, withheld string) (title, description string) {
	if withheld != "" {
		p.regMu.Lock()
		pinned := p.pinnedTitle(server)
		p.regMu.Unlock()
		return pinned, fmt.Sprintf("withheld: what this server says about itself (%s) changed since the bridge first connected to it, "+
			"and the policy refuses a changed server (tools.on_change: deny): its tools are not offered", withheld)
	}
	if info.ServerInfo != nil {
		title = info.ServerInfo.Title
	}
	return title, firstParagraph(info.Instructions, 400)
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
	// Tool calls skip the session: the catalog and its changes come
	// through it, the results straight from the proxy (see [Client.CallJSON]).
	c.local = p
	return c, nil
}

// UpstreamStates are the configured servers' states, for /metrics.
func (p *Proxy) UpstreamStates() []metrics.UpstreamState {
	out := make([]metrics.UpstreamState, 0, len(p.ups))
	for _, u := range p.ups {
		out = append(out, u.metricsState())
	}
	return out
}
