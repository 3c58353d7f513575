package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recorder is a TracerProvider whose spans a test reads back.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// byName indexes ended spans by name; each name must be there once.
func byName(t *testing.T, spans []sdktrace.ReadOnlySpan, names ...string) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	m := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if _, dup := m[s.Name()]; dup {
			t.Errorf("span %s twice", s.Name())
		}
		m[s.Name()] = s
	}
	for _, n := range names {
		if m[n] == nil {
			var got []string
			for _, s := range spans {
				got = append(got, s.Name())
			}
			t.Fatalf("no span %s; spans: %v", n, got)
		}
	}
	return m
}

// assertChild fails unless child's parent is parent.
func assertChild(t *testing.T, child sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanID() || child.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("span %s: parent %s/%s, want %s/%s", child.Name(), child.Parent().TraceID(), child.Parent().SpanID(), parent.TraceID(), parent.SpanID())
	}
}

// attr is a span's attribute, as a string ("" if it has none).
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// assertNothingOf fails if value appears anywhere in spans: names,
// attributes, events, status, links.
func assertNothingOf(t *testing.T, spans []sdktrace.ReadOnlySpan, value string) {
	t.Helper()
	js, err := json.Marshal(tracetest.SpanStubsFromReadOnlySpans(spans))
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) == 0 || !strings.Contains(string(js), `"Name"`) {
		t.Fatal("no spans to look into")
	}
	if strings.Contains(string(js), value) {
		t.Errorf("the spans hold %q: %s", value, js)
	}
}

// The proxy served over HTTP (as `bridge proxy --http`) traces a call
// under the bridge's span, which it gets in the call's _meta and HTTP
// headers, and an HTTP upstream gets the upstream span's traceparent. No
// argument value, and no result, is in any span.
func TestTracingRemoteProxyAndHTTPUpstream(t *testing.T) {
	var mu sync.Mutex
	var upstreamParents []string // traceparent headers of the upstream's tools/call requests
	var proxyParents []string    // and of the proxy's
	record := func(into *[]string, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tp := r.Header.Get("traceparent"); tp != "" {
				mu.Lock()
				*into = append(*into, tp)
				mu.Unlock()
			}
			next.ServeHTTP(w, r)
		})
	}
	hs := httptest.NewServer(record(&upstreamParents, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return testServer() }, nil)))
	defer hs.Close()
	tp, rec := recorder(t)
	p := New(Config{Servers: []ServerConfig{{Name: "web", Type: TypeHTTP, URL: hs.URL}}}, Options{Tracer: tp.Tracer("proxy")})
	defer p.Close()
	ps := httptest.NewServer(record(&proxyParents, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.Server() }, nil)))
	defer ps.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := DialHTTP(ctx, ps.URL, "", "test", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The bridge's span of the tool call, in another provider (process).
	btp, _ := recorder(t)
	_, bspan := btp.Tracer("bridge").Start(ctx, "bridge.tool_call")
	const secret = "argument-value-7f3a9c"
	r, err := c.Call(ctx, Call{RunID: "run-t", Server: "web", Tool: "echo", Args: json.RawMessage(`{"message":"` + secret + `"}`), Trace: bspan.SpanContext()})
	bspan.End()
	if err != nil || textOf(t, r) != secret {
		t.Fatalf("echo: %v %v", r, err)
	}
	spans := rec.Ended()
	m := byName(t, spans, spanCall, spanGate, spanUpstream)
	call := m[spanCall]
	assertChild(t, call, bspan.SpanContext())
	if !call.Parent().IsRemote() || call.SpanKind() != trace.SpanKindServer {
		t.Errorf("proxy.call: parent remote %v, kind %v; want a server span under a remote parent", call.Parent().IsRemote(), call.SpanKind())
	}
	assertChild(t, m[spanGate], call.SpanContext())
	assertChild(t, m[spanUpstream], call.SpanContext())
	for k, want := range map[string]string{"bridge.mcp.server": "web", "gen_ai.tool.name": "echo", "bridge.run.id": "run-t",
		"bridge.policy.decision": "allow", "bridge.result.is_error": "false"} {
		if got := attr(call, k); got != want {
			t.Errorf("proxy.call %s = %q, want %q", k, got, want)
		}
	}
	if attr(call, "bridge.result.bytes") == "" || attr(m[spanUpstream], "bridge.mcp.transport") != TypeHTTP || m[spanUpstream].SpanKind() != trace.SpanKindClient {
		t.Errorf("attributes: proxy.call %v; proxy.upstream %v %v", call.Attributes(), m[spanUpstream].Attributes(), m[spanUpstream].SpanKind())
	}
	assertNothingOf(t, spans, secret)

	mu.Lock()
	defer mu.Unlock()
	want := "00-" + bspan.SpanContext().TraceID().String() + "-" + bspan.SpanContext().SpanID().String() + "-01"
	if !contains(proxyParents, want) {
		t.Errorf("the proxy's HTTP requests carried traceparent %v, want one of %s", proxyParents, want)
	}
	want = "00-" + m[spanUpstream].SpanContext().TraceID().String() + "-" + m[spanUpstream].SpanContext().SpanID().String() + "-01"
	if !contains(upstreamParents, want) {
		t.Errorf("the upstream's HTTP requests carried traceparent %v, want one of %s", upstreamParents, want)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// In the same process, a call the policy asks about has its ask's span
// (with the answer) in the gate's, and a refused call's span says why by
// its kind only.
func TestTracingLocalAskAndDeny(t *testing.T) {
	store, _ := policyStore(t, `
version: 1
tools:
  rules:
    - {server: alpha, tool: echo, action: ask, reason: "echoes need a human"}
    - {server: alpha, tool: contacts, action: deny, reason: "no"}
  ask_remember: off
`)
	tp, rec := recorder(t)
	_, c, _ := startProxy(t, Options{Policy: store, Tracer: tp.Tracer("proxy")}, stdioServer(t, "alpha"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, parent := tp.Tracer("bridge").Start(ctx, "bridge.tool_call")
	const secret = "asked-value-51e0"
	s := &scripted{answers: []Answer{{Allow: true, How: Accepted}}}
	if _, err := c.CallJSON(ctx, Call{RunID: "r1", Server: "alpha", Tool: "echo", Args: json.RawMessage(`{"message":"` + secret + `"}`), Asker: s, Trace: parent.SpanContext()}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	m := byName(t, spans, spanCall, spanGate, spanAsk, spanUpstream)
	assertChild(t, m[spanCall], parent.SpanContext())
	if m[spanCall].SpanKind() != trace.SpanKindInternal {
		t.Errorf("proxy.call in process: kind %v", m[spanCall].SpanKind())
	}
	assertChild(t, m[spanAsk], m[spanGate].SpanContext())
	if attr(m[spanAsk], "bridge.policy.answer") != Accepted || attr(m[spanGate], "bridge.policy.decision") != "ask" {
		t.Errorf("ask %v, gate %v", m[spanAsk].Attributes(), m[spanGate].Attributes())
	}
	assertNothingOf(t, spans, secret)

	rec2 := tracetest.NewSpanRecorder()
	tp.RegisterSpanProcessor(rec2)
	if _, err := c.CallJSON(ctx, Call{RunID: "r1", Server: "alpha", Tool: "contacts", Args: json.RawMessage(`{"who":"` + secret + `"}`), Trace: parent.SpanContext()}); kindOf(err) != KindDenied {
		t.Fatalf("contacts: %v", err)
	}
	spans = rec2.Ended()
	m = byName(t, spans, spanCall, spanGate)
	if _, up := m[spanUpstream]; up {
		t.Error("a denied call has an upstream span")
	}
	for _, n := range []string{spanCall, spanGate} {
		if st := m[n].Status(); st.Description != KindDenied || attr(m[n], "error.type") != KindDenied || attr(m[n], "bridge.policy.decision") != "deny" {
			t.Errorf("%s: status %+v, attributes %v", n, st, m[n].Attributes())
		}
	}
	assertNothingOf(t, spans, secret)
}
