package bridge

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bridge-mcp/bridge/internal/tracing"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// The spans of one call of run_python (docs/tracing.md). Their attributes
// are ids, names, sizes and outcomes: never the code, its output, the
// arguments or results of its tool calls, a session's name or a message.
const (
	spanCall    = "tools/call run_python"
	spanQueue   = "bridge.queue"
	spanAcquire = "bridge.acquire"
	spanExec    = "bridge.exec"
)

// Attribute keys of package bridge's spans; those shared with the tool
// calls' are package proxy's.
const (
	attrMethod    = attribute.Key("mcp.method.name")
	attrStatus    = attribute.Key("bridge.run.status")
	attrExitCode  = attribute.Key("bridge.run.exit_code")
	attrSession   = attribute.Key("bridge.run.session")
	attrCodeBytes = attribute.Key("bridge.code.bytes")
	attrInstance  = attribute.Key("bridge.instance")
	attrCold      = attribute.Key("bridge.instance.cold_reason")
	attrEngine    = attribute.Key("bridge.engine")
	attrResume    = attribute.Key("bridge.run.resume")
)

// runtimeNamer is an [Instances] that can say which engine it runs on
// ([sandbox.Engine]).
type runtimeNamer interface{ RuntimeName() string }

// startCall starts a call's span, under the client's span that the
// request's _meta carries (traceparent, tracestate), else its HTTP
// request's headers. Its ctx carries it to the run's steps.
func (s *Server) startCall(ctx context.Context, req *mcp.CallToolRequest) (context.Context, trace.Span) {
	// Off, the client's context is not read, so it is not passed on.
	var parent trace.SpanContext
	if !tracing.Off(s.opts.Tracer) {
		if req.Params != nil {
			parent = tracing.FromMeta(req.Params.Meta)
		}
		if !parent.IsValid() && req.Extra != nil && req.Extra.Header != nil {
			parent = tracing.FromHeader(req.Extra.Header)
		}
	}
	ctx, span := s.opts.Tracer.Start(tracing.Parent(ctx, parent), spanCall, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrMethod.String("tools/call"), proxy.AttrTool.String(ToolName)))
	if span.IsRecording() && req.Params != nil {
		span.SetAttributes(attrResume.Bool(req.Params.RequestState != ""))
	}
	return ctx, span
}

// endCall ends a call's span with the status of its result.
func endCall(span trace.Span, res *mcp.CallToolResult) {
	if span.IsRecording() && res != nil {
		if o, ok := res.StructuredContent.(Output); ok {
			span.SetAttributes(attrStatus.String(o.Status))
			if res.IsError {
				span.SetStatus(codes.Error, o.Status)
			}
		}
	}
	span.End()
}

// step starts the span of one step of a run, under the call's.
func (s *Server) step(ctx context.Context, name string) trace.Span {
	_, span := s.opts.Tracer.Start(ctx, name)
	return span
}

// endQueue ends the queue's span; refused says the call got no slot.
func endQueue(span trace.Span, refusal *mcp.CallToolResult) {
	if refusal != nil {
		endCall(span, refusal)
		return
	}
	span.End()
}

// traceRun sets the run's attributes on the call's span: its id and
// whether it is a session's (never the session's name).
func traceRun(ctx context.Context, r *aRun, session bool, codeBytes int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(proxy.AttrRunID.String(r.id), attrSession.Bool(session), attrCodeBytes.Int(codeBytes))
	}
}

// endAcquire ends the span of getting the run's instance, at acquired
// (its end is known before what it was: the pool tells whether a run was
// warm in its result), with the engine and how the instance came: warm
// from the pool, cold (and why not warm), or the session's.
func (s *Server) endAcquire(span trace.Span, acquired time.Time, res sandbox.Result, session bool, failed string) {
	if span.IsRecording() {
		if rn, ok := s.opts.Instances.(runtimeNamer); ok {
			if name := rn.RuntimeName(); name != "" {
				span.SetAttributes(attrEngine.String(name))
			}
		}
		switch {
		case failed != "":
			span.SetStatus(codes.Error, failed)
			span.SetAttributes(attrStatus.String(failed))
		case session:
			span.SetAttributes(attrInstance.String("session"))
		case res.Warm:
			span.SetAttributes(attrInstance.String("warm"))
		default:
			span.SetAttributes(attrInstance.String("cold"))
			if res.Cold != "" {
				span.SetAttributes(attrCold.String(res.Cold))
			}
		}
	}
	span.End(trace.WithTimestamp(acquired))
}

// endExec ends the span of the code's run with its status.
func endExec(span trace.Span, res sandbox.Result, err error) {
	if span.IsRecording() {
		switch {
		case err != nil:
			span.SetStatus(codes.Error, statusUnavailable)
			span.SetAttributes(attrStatus.String(statusUnavailable))
		default:
			span.SetAttributes(attrStatus.String(string(res.Status)), attrExitCode.Int(res.ExitCode))
			if res.Status != sandbox.StatusOK {
				span.SetStatus(codes.Error, string(res.Status))
			}
		}
	}
	span.End()
}

// Span is the span of the run's code (bridge.exec): its tool calls go
// under it ([toolhost.TracedRun]).
func (rs *runState) Span() trace.SpanContext {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.span
}

func (rs *runState) setSpan(sc trace.SpanContext) {
	rs.mu.Lock()
	rs.span = sc
	rs.mu.Unlock()
}
