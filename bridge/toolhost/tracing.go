package toolhost

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/tracing"
	"github.com/bridge-mcp/bridge/proxy"
)

// TracedRun is a [Run] that is traced: its tool calls' spans go under
// Span, the span of its code's run (bridge.exec), from the relay, which
// knows a call's run by its id only.
type TracedRun interface {
	Span() trace.SpanContext
}

// spanToolCall is the span of one tool call through the relay
// (docs/tracing.md).
const spanToolCall = "bridge.tool_call"

// startCall starts the span of a call of run (nil: a run not registered,
// whose call is traced on its own). The span is not put in a context:
// the proxy finds it in the call ([proxy.Call] Trace). The server and
// tool the code named are not its attributes: endCall sets the names the
// proxy resolved.
func (h *toolHandler) startCall(ctx context.Context, run Run, runID string, call relay.ToolCall) trace.Span {
	if tr, ok := run.(TracedRun); ok {
		ctx = tracing.Parent(ctx, tr.Span())
	}
	_, span := h.tracer.Start(ctx, spanToolCall, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(proxy.AttrRunID.String(runID), proxy.AttrArgBytes.Int(len(call.Args))))
	return span
}

// endCall ends a call's span with the server and tool as the proxy
// resolved them (a name the code made up is [proxy.UnknownName]: the code
// must not write into the traces), the policy's decision and the answer's
// size, or the error's type (never its message).
func endCall(span trace.Span, rep proxy.CallReport, r relay.ToolResult, resultBytes int) {
	if span.IsRecording() {
		span.SetAttributes(proxy.AttrServer.String(proxy.KnownName(rep.Server)), proxy.AttrTool.String(proxy.KnownName(rep.Tool)))
		if rep.Decision != "" {
			span.SetAttributes(proxy.AttrDecision.String(rep.Decision))
		}
		if rep.Asked != "" {
			span.SetAttributes(proxy.AttrAnswer.String(rep.Asked))
		}
		if r.Error != nil {
			span.SetAttributes(proxy.AttrErrorKind.String(r.Error.Type))
			span.SetStatus(codes.Error, r.Error.Type)
		} else {
			span.SetAttributes(proxy.AttrResultBytes.Int(resultBytes))
		}
	}
	span.End()
}
