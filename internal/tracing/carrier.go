package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The W3C trace context's keys, in an MCP request's _meta as in HTTP
// headers.
const (
	KeyTraceparent = "traceparent"
	KeyTracestate  = "tracestate"
)

// metaCarrier is an MCP _meta object as a propagation carrier.
type metaCarrier map[string]any

func (m metaCarrier) Get(k string) string { s, _ := m[k].(string); return s }
func (m metaCarrier) Set(k, v string)     { m[k] = v }
func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// FromMeta is the span context that meta's traceparent (and tracestate)
// carry: the caller's span, remote. Invalid when there is none, or it is
// malformed.
func FromMeta(meta map[string]any) trace.SpanContext {
	if _, ok := meta[KeyTraceparent].(string); !ok {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), metaCarrier(meta))
	return trace.SpanContextFromContext(ctx)
}

// FromHeader is the span context of an HTTP request's traceparent (and
// tracestate) headers; invalid when there is none.
func FromHeader(h http.Header) trace.SpanContext {
	if h.Get(KeyTraceparent) == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h))
	return trace.SpanContextFromContext(ctx)
}

// ToMeta sets meta's traceparent (and tracestate) to sc, if valid.
func ToMeta(meta map[string]any, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), metaCarrier(meta))
}

// Off reports whether t is a no-op tracer (a Provider that is off gives
// them): then no trace context is read from callers, so none is passed on.
func Off(t trace.Tracer) bool {
	_, off := t.(noop.Tracer)
	return t == nil || off
}

// Parent is ctx with sc as its remote parent span, when sc is valid.
func Parent(ctx context.Context, sc trace.SpanContext) context.Context {
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Transport adds the traceparent (and tracestate) header of the span in
// each request's context, when there is one, and sends it with next.
type Transport struct {
	Next http.RoundTripper
}

func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if sc := trace.SpanContextFromContext(req.Context()); sc.IsValid() {
		req = req.Clone(req.Context())
		propagation.TraceContext{}.Inject(req.Context(), propagation.HeaderCarrier(req.Header))
	}
	return t.Next.RoundTrip(req)
}
