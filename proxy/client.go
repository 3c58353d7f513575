package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/bridge-mcp/bridge/proxy/catalog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// incompleteTTL is how long a catalog that lacks some server's tools (it
// was down) is reused before the proxy is asked again.
const incompleteTTL = 5 * time.Second

// Client is the bridge's side of a proxy, in the same process or remote:
// the catalog of tools (cached until the proxy says it changed), the state
// of the servers, and tool calls tagged with the run's id.
type Client struct {
	sess *mcp.ClientSession
	log  zerolog.Logger
	done chan struct{} // closed when the session ends
	// local is the proxy when it runs in this process: calls go to it
	// directly (Connect sets it).
	local *Proxy
	// scrub takes the proxy URL's and token's secrets (DialHTTP), and any
	// URL's, out of the errors of the session.
	scrub *Scrubber

	mu      sync.Mutex
	gen     uint64 // bumped by each tools/list_changed (a remote proxy's)
	cached  *snapshot
	loading chan struct{} // non-nil while a snapshot is being fetched
}

// snapshot is what the proxy offered at one point in time.
type snapshot struct {
	gen      uint64
	version  uint64 // the local proxy's (Proxy.version) before the fetch
	at       time.Time
	catalog  *catalog.Catalog
	servers  []ServerStatus
	names    map[[2]string]string // (server, tool) -> the proxy's tool name
	complete bool                 // every server answered
}

// Dial connects to a proxy over t.
func Dial(ctx context.Context, t mcp.Transport, version string, log zerolog.Logger) (*Client, error) {
	return dial(ctx, t, version, log, nil, nil)
}

func dial(ctx context.Context, t mcp.Transport, version string, log zerolog.Logger, scrub *Scrubber, opts *mcp.ClientSessionOptions) (*Client, error) {
	c := &Client{log: log, scrub: scrub}
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge", Version: version}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			c.mu.Lock()
			c.gen++
			c.mu.Unlock()
		},
	})
	s, err := client.Connect(ctx, t, opts)
	if err != nil {
		return nil, scrub.Error(fmt.Errorf("connecting to the MCP proxy: %w", err))
	}
	c.sess = s
	c.done = make(chan struct{})
	go func() { _ = s.Wait(); close(c.done) }()
	return c, nil
}

// Closed reports whether the session to the proxy has ended.
func (c *Client) Closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// proxyLinkVersion is the MCP revision the bridge speaks to a remote proxy.
const proxyLinkVersion = "2025-11-25"

// DialHTTP connects to a proxy served by `bridge proxy --http`. token, if
// set, is sent as a bearer token, to url's origin only; redirects are
// refused, and each answer may have maxProxyMessage bytes, as over the
// in-memory session (see newHTTPClient). url's and token's secrets never
// appear in the errors of the dial or of the session (see [Scrubber]).
func DialHTTP(ctx context.Context, url, token, version string, log zerolog.Logger) (*Client, error) {
	var headers map[string]string
	if token != "" {
		headers = map[string]string{"Authorization": "Bearer " + token}
	}
	t := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: newHTTPClient(url, headers, maxProxyMessage),
		MaxEventSize: maxProxyMessage}
	// An MCP session (2025-11-25, the last revision that has them): the
	// catalog follows the proxy's tools by its tools/list_changed
	// notifications on the session's stream. Over 2026-07-28 they come only
	// on a subscriptions/listen stream, and measured so (TestTracing's
	// remote proxy), the catalog missed the tools of an upstream that
	// connected after the first listing.
	return dial(ctx, t, version, log, NewScrubber([]string{url}, []string{token}), &mcp.ClientSessionOptions{ProtocolVersion: proxyLinkVersion})
}

// Close ends the session.
func (c *Client) Close() error { return c.sess.Close() }

// snapshot returns the current catalog and server list, fetching them if
// the proxy's tools changed since, or if some server was missing and
// incompleteTTL has passed. Concurrent callers share one fetch.
func (c *Client) snapshot(ctx context.Context) (*snapshot, error) {
	c.mu.Lock()
	if s := c.cached; s != nil && c.current(s) {
		c.mu.Unlock()
		return s, nil
	}
	if ch := c.loading; ch != nil {
		// Another caller is fetching: share its answer.
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.cached == nil {
			return nil, errors.New("the MCP proxy did not answer")
		}
		return c.cached, nil
	}
	ch := make(chan struct{})
	c.loading = ch
	// What the snapshot is current for is read before the fetch: a change
	// during it makes the next caller fetch again rather than keep a stale
	// list.
	gen, version := c.gen, c.localVersion()
	c.mu.Unlock()
	// The fetch is shared: it must not end with the ctx of the caller that
	// happened to start it, only with its own bound.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	s, err := c.fetch(fctx, gen)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loading = nil
	close(ch)
	if err != nil {
		return nil, err
	}
	s.version = version
	c.cached = s
	return s, nil
}

// current reports whether s is still what the proxy offers. A proxy in
// this process says so itself ([Proxy].version moves with every change,
// and only then), at once; a remote one through tools/list_changed. A
// catalog that lacks some server is also fetched again after
// incompleteTTL. Called with mu held.
func (c *Client) current(s *snapshot) bool {
	if !s.complete && time.Since(s.at) >= incompleteTTL {
		return false
	}
	if c.local != nil {
		return s.version == c.localVersion()
	}
	return s.gen == c.gen
}

func (c *Client) localVersion() uint64 {
	if c.local == nil {
		return 0
	}
	return c.local.version.Load()
}

// fetchTimeout bounds one fetch of the catalog: it may start every
// upstream (each within its own connect timeout, in parallel).
const fetchTimeout = 90 * time.Second

func (c *Client) fetch(ctx context.Context, gen uint64) (*snapshot, error) {
	var tools []catalog.Tool
	names := map[[2]string]string{}
	for t, err := range c.sess.Tools(ctx, nil) {
		if err != nil {
			return nil, c.scrub.Error(fmt.Errorf("listing the proxy's tools: %w", err))
		}
		server, _ := t.Meta[MetaServer].(string)
		tool, _ := t.Meta[MetaTool].(string)
		if server == "" || tool == "" {
			// Not an upstream's tool (a proxy that is not ours?): skip it.
			continue
		}
		names[[2]string{server, tool}] = t.Name
		tools = append(tools, catalogTool(server, tool, t))
	}
	// The servers resource comes second: listing tools connected them.
	res, err := c.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: ServersURI})
	if err != nil {
		return nil, c.scrub.Error(fmt.Errorf("reading %s from the proxy: %w", ServersURI, err))
	}
	var servers []ServerStatus
	if len(res.Contents) != 1 || json.Unmarshal([]byte(res.Contents[0].Text), &servers) != nil {
		return nil, fmt.Errorf("the proxy's %s is not a list of servers", ServersURI)
	}
	complete := true
	for _, s := range servers {
		if s.State != "ready" {
			complete = false
		}
	}
	return &snapshot{gen: gen, at: time.Now(), catalog: catalog.New(tools), servers: servers, names: names, complete: complete}, nil
}

// catalogTool is the catalog's entry of server's tool, listed by the
// proxy as t.
func catalogTool(server, tool string, t *mcp.Tool) catalog.Tool {
	ct := catalog.Tool{Server: server, Name: tool, Title: t.Title, Description: t.Description}
	ct.InputSchema = rawJSON(t.InputSchema)
	ct.OutputSchema = rawJSON(t.OutputSchema)
	if t.Annotations != nil {
		ct.Annotations = rawJSON(t.Annotations)
	}
	return ct
}

func rawJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	if r, ok := v.(json.RawMessage); ok {
		return r
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return js
}

// Servers lists the upstream servers and their state.
func (c *Client) Servers(ctx context.Context) ([]ServerStatus, error) {
	s, err := c.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return s.servers, nil
}

// Catalog returns the tools of every server that answered.
func (c *Client) Catalog(ctx context.Context) (*catalog.Catalog, error) {
	s, err := c.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return s.catalog, nil
}

// Resolve checks that server has tool and returns the server's state. An
// unknown server or tool is an *[Error] of kind unknown_server or
// unknown_tool whose message suggests the closest names; the tools of a
// server that is down are unknown, and that is said instead. An empty tool
// checks the server only.
func (c *Client) Resolve(ctx context.Context, server, tool string) (ServerStatus, error) {
	s, err := c.snapshot(ctx)
	if err != nil {
		return ServerStatus{}, err
	}
	st, _, err := s.resolve(server, tool)
	return st, err
}

// resolve is Resolve in one snapshot; it also returns the proxy's name of
// the tool.
func (s *snapshot) resolve(server, tool string) (ServerStatus, string, error) {
	st, ok := s.server(server)
	if !ok {
		return ServerStatus{}, "", unknownServer(server, s.servers)
	}
	if tool == "" {
		return st, "", nil
	}
	if name, ok := s.names[[2]string{server, tool}]; ok {
		return st, name, nil
	}
	if st.State != "ready" && st.Error != "" && len(s.catalog.Tools(server)) == 0 {
		return st, "", errorf(KindUpstream, "server %q is unavailable: %s", server, st.Error)
	}
	var names []string
	for _, t := range s.catalog.Tools(server) {
		names = append(names, t.Name)
	}
	return st, "", &Error{Kind: KindUnknownTool, Message: fmt.Sprintf("server %q has no tool %q%s", server, tool, didYouMean(tool, names))}
}

func (s *snapshot) server(name string) (ServerStatus, bool) {
	for _, st := range s.servers {
		if st.Name == name {
			return st, true
		}
	}
	return ServerStatus{}, false
}

func unknownServer(name string, servers []ServerStatus) *Error {
	var names []string
	for _, s := range servers {
		names = append(names, s.Name)
	}
	msg := fmt.Sprintf("no MCP server %q%s", name, didYouMean(name, names))
	if len(names) > 0 && len(catalog.Closest(name, names, 3)) == 0 {
		msg += fmt.Sprintf(" (servers: %s)", strings.Join(names, ", "))
	}
	return &Error{Kind: KindUnknownSrv, Message: msg}
}

// didYouMean is "; did you mean: a, b?" or "".
func didYouMean(name string, candidates []string) string {
	near := catalog.Closest(name, candidates, 3)
	if len(near) == 0 {
		return ""
	}
	return "; did you mean: " + strings.Join(near, ", ") + "?"
}

// Call is one tool call the bridge makes on behalf of a run.
type Call struct {
	RunID        string
	Server, Tool string
	// Args are the tool's arguments, a JSON object.
	Args json.RawMessage
	// Asker asks the human about a call the policy asks about. Only a
	// proxy in this process can reach it: a remote proxy, and a nil
	// [Asker], give such a call tools.ask_fallback.
	Asker Asker
	// Report, if set, is filled in with how the call was decided (and,
	// with a proxy in this process, the upstream's time).
	Report *CallReport
	// Vault, for a call of a session's run, names the session's tokenized
	// values and VaultEnds when the session ends at the latest: a remote
	// proxy keeps them for the session's runs (MetaVault). A proxy in this
	// process shares them through the run ([policy.Run.ShareVault]).
	Vault     string
	VaultEnds time.Time
	// Trace is the span the call is made in, if traced: the proxy's spans
	// go under it, in this process or another (traceparent in the call's
	// _meta, and in the headers of its HTTP request).
	Trace trace.SpanContext
}

// Call makes call. It returns the tool's result as the proxy sent it,
// isError included, or an *[Error] when the call failed outside the tool.
func (c *Client) Call(ctx context.Context, call Call) (*mcp.CallToolResult, error) {
	name, unknown, err := c.target(ctx, call)
	if err != nil {
		return nil, err
	}
	if c.local != nil {
		res, _, err := c.callLocal(ctx, call, unknown, false)
		return res, err
	}
	server, tool := call.Server, call.Tool
	if call.Trace.IsValid() {
		// For the HTTP transport's traceparent (tracing.Transport).
		ctx = trace.ContextWithSpanContext(ctx, call.Trace)
	}
	res, err := c.sess.CallTool(ctx, &mcp.CallToolParams{
		Name:      name,
		Arguments: call.Args,
		Meta:      callMeta(ctx, call, server, tool),
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, errorf(KindUpstream, "call to %s/%s cancelled", server, tool)
		}
		if unknown != nil {
			return nil, unknown
		}
		return nil, errorf(KindUpstream, "the MCP proxy failed the call to %s/%s: %v", server, tool, c.scrub.Error(err))
	}
	if call.Report != nil {
		// The proxy answered: it knew the tool (it refuses others).
		call.Report.Server, call.Report.Tool = server, tool
		call.Report.decode(res.Meta[MetaDecision])
	}
	if kind, ok := res.Meta[MetaError].(string); ok && res.IsError {
		var msg []string
		for _, ct := range res.Content {
			if t, ok := ct.(*mcp.TextContent); ok {
				msg = append(msg, t.Text)
			}
		}
		return nil, &Error{Kind: kind, Message: strings.Join(msg, "\n")}
	}
	return res, nil
}

// CallJSON is [Call] with the result as JSON, as the sandbox gets it. With a
// proxy in the same process the result is encoded once, by the proxy (which
// measures it against the policy's result limit), and these are its bytes:
// no MCP hop, no second encoding.
func (c *Client) CallJSON(ctx context.Context, call Call) (json.RawMessage, error) {
	if c.local == nil {
		res, err := c.Call(ctx, call)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	}
	_, unknown, err := c.target(ctx, call)
	if err != nil {
		return nil, err
	}
	_, js, err := c.callLocal(ctx, call, unknown, true)
	return js, err
}

// target is the proxy's name of call's tool. A tool the catalog does not
// list may be unknown, or denied by policy: only the proxy knows which, and
// a denied call must say so, so it is still called, with unknown set to the
// error to give should the proxy not know it either. A configured server
// goes in the call's report (the tool, once the proxy knows it).
func (c *Client) target(ctx context.Context, call Call) (name string, unknown *Error, err error) {
	server, tool := call.Server, call.Tool
	s, err := c.snapshot(ctx)
	if err != nil {
		return "", nil, err
	}
	if _, ok := s.server(server); ok && call.Report != nil {
		call.Report.Server = server
	}
	_, name, err = s.resolve(server, tool)
	if errors.As(err, &unknown) && unknown.Kind == KindUnknownTool {
		return ToolName(server, tool), unknown, nil
	}
	return name, nil, err
}

// callLocal calls the proxy in this process directly. unknown is the error
// for a tool the proxy does not know either.
// With wantRaw, only the JSON is wanted: the result may be an empty
// stand-in ([Proxy].call).
func (c *Client) callLocal(ctx context.Context, call Call, unknown *Error, wantRaw bool) (*mcp.CallToolResult, []byte, error) {
	server, tool := call.Server, call.Tool
	params := &mcp.CallToolParamsRaw{Name: ToolName(server, tool), Arguments: call.Args, Meta: callMeta(ctx, call, server, tool)}
	res, js, known, err := c.local.localCall(ctx, params, server, tool, wantRaw, call.Asker, call.Report)
	switch {
	case !known && unknown != nil:
		return nil, nil, unknown
	case !known:
		return nil, nil, errorf(KindUnknownTool, "server %q has no tool %q", server, tool)
	case err != nil:
		if pe, ok := err.(*Error); ok {
			return nil, nil, pe
		}
		return nil, nil, &Error{Kind: KindUpstream, Message: err.Error()}
	}
	return res, js, nil
}
