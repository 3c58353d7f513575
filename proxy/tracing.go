package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bridge-mcp/bridge/internal/tracing"
)

// The proxy's spans (docs/tracing.md): a call's (proxy.call), its
// policy's gate (proxy.gate), the human's answer (proxy.ask) and the
// upstream server's part (proxy.upstream). Their attributes are names,
// sizes and outcomes: never arguments, results or messages, which may
// hold what the code sent or the tool answered.
const (
	spanCall     = "proxy.call"
	spanGate     = "proxy.gate"
	spanAsk      = "proxy.ask"
	spanUpstream = "proxy.upstream"
)

// Attribute keys of the bridge's spans, shared with package bridge's.
const (
	AttrRunID       = attribute.Key("bridge.run.id")
	AttrServer      = attribute.Key("bridge.mcp.server")
	AttrTool        = attribute.Key("gen_ai.tool.name")
	AttrDecision    = attribute.Key("bridge.policy.decision")
	AttrRule        = attribute.Key("bridge.policy.rule")
	AttrAnswer      = attribute.Key("bridge.policy.answer")
	AttrErrorKind   = attribute.Key("error.type")
	AttrArgBytes    = attribute.Key("bridge.arguments.bytes")
	AttrResultBytes = attribute.Key("bridge.result.bytes")
	AttrTransport   = attribute.Key("bridge.mcp.transport")
	AttrIsError     = attribute.Key("bridge.result.is_error")
)

// UnknownName stands, in a span, for a server or tool name that was not
// resolved: the code chose it, and what the code chooses is never
// exported (docs/tracing.md). Parentheses keep it apart from the names
// upstreams list: the MCP spec's tool names are letters, digits, "_", "-"
// and ".".
const UnknownName = "(unknown)"

// KnownName is name, or UnknownName for "" (not resolved).
func KnownName(name string) string {
	if name == "" {
		return UnknownName
	}
	return name
}

// tracer is the proxy's tracer: a no-op one unless Options.Tracer is set.
func (p *Proxy) tracer() trace.Tracer {
	if p.opts.Tracer == nil {
		return noop.Tracer{}
	}
	return p.opts.Tracer
}

// startCall starts a call's span, under the caller's span that the call's
// _meta carries (traceparent, tracestate), else its HTTP request's
// headers (h, nil in process).
func (p *Proxy) startCall(ctx context.Context, meta map[string]any, h http.Header, kind trace.SpanKind, server, tool string) (context.Context, trace.Span) {
	// Off, the caller's context is not read, so it is not passed on.
	var parent trace.SpanContext
	if !tracing.Off(p.tracer()) {
		parent = tracing.FromMeta(meta)
		if !parent.IsValid() && h != nil {
			parent = tracing.FromHeader(h)
		}
	}
	runID, _ := meta[MetaRunID].(string)
	return p.tracer().Start(tracing.Parent(ctx, parent), spanCall, trace.WithSpanKind(kind),
		trace.WithAttributes(AttrServer.String(server), AttrTool.String(tool), AttrRunID.String(runID)))
}

// endCall ends a call's span with its outcome.
func endCall(span trace.Span, rep *CallReport, res resultInfo, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	setDecision(span, rep)
	if err != nil {
		failSpan(span, err)
	} else {
		span.SetAttributes(AttrResultBytes.Int(res.bytes), AttrIsError.Bool(res.isError))
	}
	span.End()
}

// resultInfo is what a span says of a result: its size, and isError.
type resultInfo struct {
	bytes   int
	isError bool
}

// setDecision sets the policy's decision and the human's answer.
func setDecision(span trace.Span, rep *CallReport) {
	if rep == nil {
		return
	}
	if rep.Decision != "" {
		span.SetAttributes(AttrDecision.String(rep.Decision))
	}
	if rep.Asked != "" {
		span.SetAttributes(AttrAnswer.String(rep.Asked))
	}
}

// failSpan marks span failed with err's kind: never its message, which
// may quote what the tool or the code said.
func failSpan(span trace.Span, err error) {
	kind := KindUpstream
	var pe *Error
	if errors.As(err, &pe) {
		kind = pe.Kind
	}
	span.SetAttributes(AttrErrorKind.String(kind))
	span.SetStatus(codes.Error, kind)
}

// endGate ends the gate's span: the decision, the rule that made it, and,
// for a refusal, its kind.
func endGate(span trace.Span, rep *CallReport, rule string, err error) {
	if span.IsRecording() {
		setDecision(span, rep)
		if rule != "" {
			span.SetAttributes(AttrRule.String(rule))
		}
		if err != nil {
			failSpan(span, err)
		}
	}
	span.End()
}

// startUpstream starts the span of the upstream server's part of a call.
// Its ctx carries it to the HTTP transport, which sends its traceparent
// (tracing.Transport, in newHTTPClient).
func (p *Proxy) startUpstream(ctx context.Context, server, tool string) (context.Context, trace.Span) {
	typ := ""
	if u := p.byName[server]; u != nil {
		typ = u.cfg.Type
	}
	return p.tracer().Start(ctx, spanUpstream, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrServer.String(server), AttrTool.String(tool), AttrTransport.String(typ)))
}

// endUpstream ends the upstream's span: failed with the kind of err,
// else with the size of its answer when the server's own bytes are passed
// on (raw), and whether it is an error result when it was decoded.
func endUpstream(span trace.Span, res *mcp.CallToolResult, raw []byte, err error) {
	if span.IsRecording() {
		switch {
		case err != nil:
			failSpan(span, err)
		case raw != nil:
			span.SetAttributes(AttrResultBytes.Int(len(raw)))
		case res != nil:
			span.SetAttributes(AttrIsError.Bool(res.IsError))
		}
	}
	span.End()
}
