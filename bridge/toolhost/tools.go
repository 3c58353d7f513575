// Package toolhost answers, on the host, what the code in the sandbox asks
// over the relay: its tool calls, through the MCP proxy with the run's
// asker and into the run's trace (tools.go, runs.go); its questions about
// the tools there are; its skill operations, from the policy's skills
// folder (skills.go); and how long the bridge's own part of each call
// took (calltimes.go).
package toolhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bridge-mcp/bridge/proxy/catalog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// DefaultMaxResultBytes bounds one tool result sent into the sandbox, as
// JSON. A relay frame holds at most [relay.MaxFrameSize].
const DefaultMaxResultBytes = relay.MaxResultBytes

// Bounds on what the sandbox may ask.
const (
	// MaxArgBytes bounds one tool call's arguments, as JSON.
	MaxArgBytes = 4 << 20
	// maxQueryBytes bounds a search query; maxServerName a server name
	// in a query (config names are at most [proxy.MaxNameLen] bytes).
	maxQueryBytes = 1 << 10
	maxServerName = 256
)

// Upstreams is what the sandbox's tool calls and questions need of the MCP
// proxy. *[proxy.Client] implements it.
type Upstreams interface {
	Servers(ctx context.Context) ([]proxy.ServerStatus, error)
	Catalog(ctx context.Context) (*catalog.Catalog, error)
	Resolve(ctx context.Context, server, tool string) (proxy.ServerStatus, error)
	Call(ctx context.Context, call proxy.Call) (*mcp.CallToolResult, error)
	// CallJSON is Call with the result as JSON, encoded once.
	CallJSON(ctx context.Context, call proxy.Call) (json.RawMessage, error)
	// Resources lists the servers' resources and ReadResource reads one,
	// for a run, under the proxy's policy.
	Resources(ctx context.Context, req proxy.ResourceRequest) (proxy.ResourceList, error)
	ReadResource(ctx context.Context, req proxy.ResourceRequest) (*proxy.ResourceData, error)
}

var (
	_ Upstreams = (*proxy.Client)(nil)
	_ Upstreams = (*proxy.Redialing)(nil)
)

// moduleReserved are the names the mcp_tools package defines itself
// (images/runner/lib/mcp_tools, _core.RESERVED): a server whose module
// alias would shadow one gets a trailing "_".
var moduleReserved = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(`servers tools describe search call acall call_raw acall_raw help
		MCPToolsError ToolError UnknownServerError UnknownToolError UpstreamError ToolTimeoutError
		ToolDeniedError LimitExceededError ToolsUnavailableError show save_skill skills SkillError
		resources read_resource UnknownResourceError _resources
		_core _help _modules _show _skills _carry _runner_files __pycache__
		__all__ __builtins__ __cached__ __dir__ __doc__ __file__ __getattr__ __loader__ __name__
		__package__ __path__ __spec__`) {
		m[n] = true
	}
	return m
}()

// Options configure the handler New makes.
type Options struct {
	// MaxResult bounds one result in bytes (DefaultMaxResultBytes when 0).
	MaxResult int
	// Runs are the runs being served: a call asks their human and goes in
	// their trace. Nil: no run is known.
	Runs *Runs
	// Times, if set, records how long each call took, the bridge's part
	// apart from the upstream's.
	Times *CallTimes
	// Tracer, if set, traces each tool call (bridge.tool_call) under its
	// run's span ([TracedRun]), and the proxy's spans go under it. Nil:
	// nothing is traced.
	Tracer trace.Tracer
	Logger zerolog.Logger
}

// New answers the sandbox's tool calls and questions from up.
func New(up Upstreams, o Options) sandbox.ToolHandler {
	if o.MaxResult <= 0 || o.MaxResult > relay.MaxFrameSize-4096 {
		o.MaxResult = DefaultMaxResultBytes
	}
	if o.Tracer == nil {
		o.Tracer = noop.Tracer{}
	}
	return &toolHandler{up: up, res: NewResources(up, o.Runs), maxResult: o.MaxResult, runs: o.Runs, times: o.Times, tracer: o.Tracer, log: o.Logger}
}

type toolHandler struct {
	up        Upstreams
	res       *Resources
	maxResult int
	runs      *Runs
	times     *CallTimes
	tracer    trace.Tracer
	log       zerolog.Logger
}

func (h *toolHandler) CallTool(ctx context.Context, runID string, call relay.ToolCall) relay.ToolResult {
	if len(call.Args) > MaxArgBytes {
		return relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: fmt.Sprintf(
			"the arguments to %s/%s are %s, over the %s a call may send; pass less (a path, an id) and let the tool fetch the rest",
			call.Server, call.Tool, units.Bytes(int64(len(call.Args))), units.Bytes(int64(MaxArgBytes)))}}
	}
	// A call to a name the catalog lacks is answered here, with the closest
	// names: host work the run pays for from its meter.
	meter := sandbox.HostMeterFrom(ctx)
	if err := meter.Do(func() {}); err != nil {
		return relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: err.Error()}}
	}
	start := time.Now()
	var rep proxy.CallReport
	run := h.runs.get(runID)
	pc := proxy.Call{RunID: runID, Server: call.Server, Tool: call.Tool, Args: call.Args, Report: &rep}
	if run != nil {
		pc.Asker = run
		if sv, ok := run.(sessionRun); ok {
			pc.Vault, pc.VaultEnds = sv.Vault()
		}
	}
	span := h.startCall(ctx, run, runID, call)
	pc.Trace = span.SpanContext()
	js, err := h.up.CallJSON(ctx, pc)
	var r relay.ToolResult
	switch {
	case err != nil:
		var pe *proxy.Error
		if errors.As(err, &pe) && (pe.Kind == proxy.KindUnknownSrv || pe.Kind == proxy.KindUnknownTool) {
			meter.Charge(time.Since(start))
		}
		r = failed(err)
	case len(js) > h.maxResult:
		r = relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: fmt.Sprintf(
			"the result of %s/%s is %s, over the %s a tool result may have in the sandbox; ask the tool for less (a page, a filter)",
			call.Server, call.Tool, units.Bytes(int64(len(js))), units.Bytes(int64(h.maxResult)))}}
	default:
		r = relay.ToolResult{Result: js}
	}
	traceCall(run, call, rep, r, len(js), time.Since(start))
	endCall(span, rep, r, len(js))
	if rep.Upstream > 0 && rep.Asked == "" {
		h.times.record(time.Since(start), rep.Upstream)
	}
	return r
}

// traceCall adds the call to its run's trace, if the run is known.
func traceCall(run Run, call relay.ToolCall, rep proxy.CallReport, r relay.ToolResult, resultBytes int, took time.Duration) {
	if run == nil {
		return
	}
	e := TraceEntry{Server: call.Server, Tool: call.Tool, Answer: rep.Asked,
		DurationMS: float64(took.Microseconds()) / 1000, ArgumentBytes: len(call.Args), ResultBytes: resultBytes}
	switch rep.Decision {
	case "allow":
		e.Decision = "allowed"
	case "deny":
		e.Decision = "denied"
	case "ask":
		e.Decision = "asked"
	default:
		e.Decision = "refused"
	}
	if r.Error != nil {
		e.Error = r.Error.Type
	}
	run.Record(e)
}

func failed(err error) relay.ToolResult {
	kind := relay.ErrUpstream
	var pe *proxy.Error
	if errors.As(err, &pe) {
		kind = pe.Kind
	}
	return relay.ToolResult{Error: &relay.ToolError{Type: kind, Message: err.Error()}}
}

func invalid(format string, args ...any) relay.ToolResult {
	return toolError(relay.ErrInvalid, format, args...)
}

// toolError is an answer that failed with kind and a message.
func toolError(kind, format string, args ...any) relay.ToolResult {
	return relay.ToolResult{Error: &relay.ToolError{Type: kind, Message: fmt.Sprintf(format, args...)}}
}

// The answers to queries, as docs/protocol.md describes them.
type (
	serverInfo struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Module      string `json:"module"`
	}
	toolInfo struct {
		Name         string          `json:"name"`
		Title        string          `json:"title,omitempty"`
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"input_schema"`
		OutputSchema json.RawMessage `json:"output_schema,omitempty"`
		Returns      string          `json:"returns,omitempty"` // catalog.ResultShape(OutputSchema)
		Annotations  json.RawMessage `json:"annotations,omitempty"`
	}
	searchHit struct {
		Server      string   `json:"server"`
		Tool        string   `json:"tool"`
		Description string   `json:"description"`
		Score       float64  `json:"score"`
		Params      []string `json:"params"`
		Returns     string   `json:"returns,omitempty"` // catalog.ResultShape of the tool's output schema
	}
)

// Query answers q from the catalog. Fetching the catalog waits on the
// proxy; the rest is the bridge's own work, done under the run's host meter
// (one query at a time per run, within its budget), and an answer over the
// result limit is refused with a hint instead of being sent.
func (h *toolHandler) Query(ctx context.Context, runID string, q relay.Query) relay.ToolResult {
	if q.Op == relay.OpResources || q.Op == relay.OpReadResource {
		// The proxy's work, each one of the run's calls: refused only once
		// the run's host time is spent, as a tool call is.
		if err := sandbox.HostMeterFrom(ctx).Do(func() {}); err != nil {
			return relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: err.Error()}}
		}
		return h.resourceQuery(ctx, runID, q)
	}
	// Fetch (or reuse) the catalog first, outside the meter: it may wait on
	// upstreams starting.
	if q.Op == relay.OpServers || q.Op == relay.OpTools || q.Op == relay.OpSearch {
		if _, err := h.up.Catalog(ctx); err != nil {
			return failed(err)
		}
	}
	var r relay.ToolResult
	if err := sandbox.HostMeterFrom(ctx).Do(func() { r = h.query(ctx, q) }); err != nil {
		return relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: err.Error()}}
	}
	if len(r.Result) > h.maxResult {
		hint := "ask for less"
		if q.Op == relay.OpTools {
			hint = "use mcp_tools.search(...) or describe(server, tool) for the tools you need"
		}
		return relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: fmt.Sprintf(
			"the answer to %s is %s, over the %s an answer may have in the sandbox: %s",
			q.Op, units.Bytes(int64(len(r.Result))), units.Bytes(int64(h.maxResult)), hint)}}
	}
	return r
}

func (h *toolHandler) query(ctx context.Context, q relay.Query) relay.ToolResult {
	var out any
	var refusal *relay.ToolResult
	switch q.Op {
	case relay.OpServers:
		out, refusal = h.servers(ctx)
	case relay.OpTools:
		out, refusal = h.tools(ctx, q.Args)
	case relay.OpSearch:
		out, refusal = h.search(ctx, q.Args)
	default:
		return invalid("unknown query %q", q.Op)
	}
	if refusal != nil {
		return *refusal
	}
	js, err := json.Marshal(out)
	if err != nil {
		return failed(err)
	}
	return relay.ToolResult{Result: js}
}

// refused is a query's failed answer, as query returns it.
func refused(r relay.ToolResult) (any, *relay.ToolResult) { return nil, &r }

// servers answers the servers query: each server, its description, and
// the name of its Python module.
func (h *toolHandler) servers(ctx context.Context) (any, *relay.ToolResult) {
	servers, err := h.up.Servers(ctx)
	if err != nil {
		return refused(failed(err))
	}
	names := make([]string, 0, len(servers))
	for _, s := range servers {
		names = append(names, s.Name)
	}
	aliases := catalog.ModuleAliases(names, moduleReserved)
	list := make([]serverInfo, 0, len(servers))
	for _, s := range servers {
		desc := s.Description
		if desc == "" {
			desc = s.Title
		}
		if s.State == "unavailable" {
			desc = "unavailable: " + s.Error
		}
		list = append(list, serverInfo{Name: s.Name, Description: desc, Module: aliases[s.Name]})
	}
	return list, nil
}

// tools answers the tools query: one server's tools, whole.
func (h *toolHandler) tools(ctx context.Context, args json.RawMessage) (any, *relay.ToolResult) {
	var a struct {
		Server *string `json:"server"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.Server == nil {
		return refused(invalid(`tools needs {"server": NAME}`))
	}
	if len(*a.Server) > maxServerName {
		return refused(relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrUnknownServer,
			Message: fmt.Sprintf("no MCP server has a name of %d bytes", len(*a.Server))}})
	}
	st, err := h.up.Resolve(ctx, *a.Server, "")
	if err != nil {
		return refused(failed(err))
	}
	cat, err := h.up.Catalog(ctx)
	if err != nil {
		return refused(failed(err))
	}
	tools := cat.Tools(*a.Server)
	if len(tools) == 0 && st.State == "unavailable" {
		return refused(failed(&proxy.Error{Kind: proxy.KindUpstream, Message: fmt.Sprintf("server %q is unavailable: %s", st.Name, st.Error)}))
	}
	list := make([]toolInfo, 0, len(tools))
	for _, t := range tools {
		in := t.InputSchema
		if len(in) == 0 {
			in = json.RawMessage(`{"type":"object"}`)
		}
		list = append(list, toolInfo{Name: t.Name, Title: t.Title, Description: t.Description,
			InputSchema: in, OutputSchema: t.OutputSchema, Annotations: t.Annotations,
			Returns: catalog.ResultShape(t.OutputSchema)})
	}
	return list, nil
}

// search answers the search query: the tools that best match its words.
func (h *toolHandler) search(ctx context.Context, args json.RawMessage) (any, *relay.ToolResult) {
	var a struct {
		Query *string `json:"query"`
		Limit *int    `json:"limit"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.Query == nil {
		return refused(invalid(`search needs {"query": TEXT, "limit": N}`))
	}
	if len(*a.Query) > maxQueryBytes {
		return refused(invalid("the search query is %d bytes; a few words say more (at most %d bytes)", len(*a.Query), maxQueryBytes))
	}
	limit := 5
	if a.Limit != nil {
		limit = *a.Limit
	}
	cat, err := h.up.Catalog(ctx)
	if err != nil {
		return refused(failed(err))
	}
	hits := cat.Search(*a.Query, limit)
	list := make([]searchHit, 0, len(hits))
	for _, hit := range hits {
		params := hit.Params
		if params == nil {
			params = []string{}
		}
		list = append(list, searchHit{Server: hit.Tool.Server, Tool: hit.Tool.Name,
			Description: catalog.Summary(hit.Tool.Description), Score: hit.Score, Params: params,
			Returns: catalog.ResultShape(hit.Tool.OutputSchema)})
	}
	return list, nil
}
