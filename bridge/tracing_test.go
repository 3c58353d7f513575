package bridge

import (
	"context"
	"encoding/json"
	"io"
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

	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/tracing"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/proxy/catalog"
	"github.com/bridge-mcp/bridge/sandbox"
)

// spanUpstreams answers every call, and keeps the span each was made in.
type spanUpstreams struct {
	mu     sync.Mutex
	traces []trace.SpanContext
}

func (u *spanUpstreams) Servers(context.Context) ([]proxy.ServerStatus, error) { return nil, nil }
func (u *spanUpstreams) Catalog(context.Context) (*catalog.Catalog, error) {
	return catalog.New(nil), nil
}
func (u *spanUpstreams) Resolve(context.Context, string, string) (proxy.ServerStatus, error) {
	return proxy.ServerStatus{}, nil
}
func (u *spanUpstreams) Call(context.Context, proxy.Call) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{}, nil
}
func (u *spanUpstreams) CallJSON(_ context.Context, c proxy.Call) (json.RawMessage, error) {
	u.mu.Lock()
	u.traces = append(u.traces, c.Trace)
	u.mu.Unlock()
	// As the proxy says of a tool it knows.
	c.Report.Decision, c.Report.Server, c.Report.Tool = "allow", c.Server, c.Tool
	return json.RawMessage(`{"content":[{"type":"text","text":"result-value"}]}`), nil
}
func (u *spanUpstreams) Resources(context.Context, proxy.ResourceRequest) (proxy.ResourceList, error) {
	return proxy.ResourceList{}, nil
}
func (u *spanUpstreams) ReadResource(context.Context, proxy.ResourceRequest) (*proxy.ResourceData, error) {
	return nil, &proxy.Error{Kind: proxy.KindUnknownResource, Message: "no resources here"}
}

// A call of run_python whose _meta carries the client's traceparent is
// one trace under the client's span: the call's span, its queue, instance
// and code's run under it, the code's tool call under the run, and the
// proxy called in the tool call's span. No code, argument or result is in
// any span.
func TestTracingRunSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	runs := toolhost.NewRuns()
	up := &spanUpstreams{}
	tools := toolhost.New(up, toolhost.Options{Runs: runs, Tracer: tp.Tracer("toolhost")})
	const argSecret, codeSecret = "argument-9d2e41", "code-c0ffee"
	s := newServer(t, Options{Runs: runs, Tracer: tp.Tracer("bridge"),
		Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
			r := tools.CallTool(ctx, req.RunID, relay.ToolCall{ID: 1, Server: "files", Tool: "read", Args: json.RawMessage(`{"path":"` + argSecret + `"}`)})
			if r.Error != nil {
				t.Errorf("tool call: %+v", r.Error)
			}
			return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK, Warm: true}, nil
		})})
	cs := connect(t, s, nil)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName,
		Arguments: map[string]any{"code": "print('" + codeSecret + "')"},
		Meta:      mcp.Meta{"traceparent": "00-" + traceID + "-" + parentID + "-01", "tracestate": "vendor=1"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %v", res, err)
	}
	spans := rec.Ended()
	names := map[string]sdktrace.ReadOnlySpan{}
	for _, sp := range spans {
		names[sp.Name()] = sp
		if sp.SpanContext().TraceID().String() != traceID {
			t.Errorf("span %s is in trace %s, not the client's", sp.Name(), sp.SpanContext().TraceID())
		}
	}
	for _, n := range []string{spanCall, spanQueue, spanAcquire, spanExec, "bridge.tool_call"} {
		if names[n] == nil {
			t.Fatalf("no span %s among %d", n, len(spans))
		}
	}
	root := names[spanCall]
	if root.Parent().SpanID().String() != parentID || !root.Parent().IsRemote() || root.SpanKind() != trace.SpanKindServer {
		t.Errorf("root: parent %s remote %v kind %v", root.Parent().SpanID(), root.Parent().IsRemote(), root.SpanKind())
	}
	if root.SpanContext().TraceState().Get("vendor") != "1" {
		t.Errorf("root: tracestate %q", root.SpanContext().TraceState())
	}
	for _, n := range []string{spanQueue, spanAcquire, spanExec} {
		if names[n].Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s is not under the call's span", n)
		}
	}
	tc := names["bridge.tool_call"]
	if tc.Parent().SpanID() != names[spanExec].SpanContext().SpanID() {
		t.Errorf("the tool call is not under the code's run")
	}
	if len(up.traces) != 1 || !up.traces[0].Equal(tc.SpanContext()) {
		t.Errorf("the proxy was called in %v, want the tool call's span %v", up.traces, tc.SpanContext())
	}
	for span, want := range map[sdktrace.ReadOnlySpan]map[string]string{
		root:               {"bridge.run.status": "ok", "bridge.run.session": "false", "gen_ai.tool.name": ToolName},
		names[spanAcquire]: {"bridge.instance": "warm"},
		names[spanExec]:    {"bridge.run.status": "ok", "bridge.run.exit_code": "0"},
		tc:                 {"bridge.mcp.server": "files", "gen_ai.tool.name": "read", "bridge.policy.decision": "allow"},
	} {
		for k, v := range want {
			if got := attrOf(span, k); got != v {
				t.Errorf("%s %s = %q, want %q", span.Name(), k, got, v)
			}
		}
	}
	if attrOf(root, "bridge.run.id") == "" || attrOf(root, "bridge.run.id") != attrOf(tc, "bridge.run.id") {
		t.Errorf("run ids: call %q, tool call %q", attrOf(root, "bridge.run.id"), attrOf(tc, "bridge.run.id"))
	}
	js, _ := json.Marshal(tracetest.SpanStubsFromReadOnlySpans(spans))
	for _, secret := range []string{argSecret, codeSecret, "result-value"} {
		if strings.Contains(string(js), secret) {
			t.Errorf("the spans hold %q: %s", secret, js)
		}
	}
}

// With no Tracer, nothing is recorded, the client's trace context is not
// passed on, and a call is answered as ever.
func TestTracingOffByDefault(t *testing.T) {
	runs := toolhost.NewRuns()
	up := &spanUpstreams{}
	tools := toolhost.New(up, toolhost.Options{Runs: runs})
	s := newServer(t, Options{Runs: runs, Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() || trace.SpanFromContext(ctx).IsRecording() {
			t.Errorf("a span (%v) without a Tracer", sc)
		}
		tools.CallTool(ctx, req.RunID, relay.ToolCall{ID: 1, Server: "files", Tool: "read", Args: json.RawMessage(`{}`)})
		return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK}, nil
	})})
	res, err := connect(t, s, nil).CallTool(context.Background(), &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "1"},
		Meta: mcp.Meta{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	if err != nil || res.IsError {
		t.Fatal(res, err)
	}
	if len(up.traces) != 1 || up.traces[0].IsValid() {
		t.Errorf("the proxy was called in %v; want no span", up.traces)
	}
}

func attrOf(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// BenchmarkObservedCall is one run_python call through the MCP server, its
// code making one tool call (fakes, in memory: what is measured is the
// bridge's own part), with metrics and tracing off, each alone, and both:
// metrics counted and scraped every second, every span exported over
// OTLP/HTTP to a receiver that discards them. The differences are what
// observing a call costs (docs/performance.md, docs/tracing.md).
func BenchmarkObservedCall(b *testing.B) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer recv.Close()
	for _, c := range []struct {
		name           string
		metrics, trace bool
	}{{"off", false, false}, {"metrics", true, false}, {"tracing", false, true}, {"both", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			var s tracing.Settings
			if c.trace {
				s = tracing.Settings{Endpoint: recv.URL}
			}
			tp, err := tracing.New(context.Background(), s, func(string) string { return "" }, zerolog.Nop())
			if err != nil || tp.On() != c.trace {
				b.Fatal(tp.On(), err)
			}
			defer tp.Shutdown(context.Background())
			var m *metrics.Metrics
			if c.metrics {
				m = metrics.New("bench")
			}
			runs := toolhost.NewRuns()
			tools := toolhost.New(&spanUpstreams{}, toolhost.Options{Runs: runs, Tracer: tp.Tracer("toolhost")})
			srv, err := New(Options{Runs: runs, Tracer: tp.Tracer("bridge"), Metrics: m, Limits: sandbox.DefaultLimits(), Logger: zerolog.Nop(),
				Instances: withRunner(func(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
					tools.CallTool(ctx, req.RunID, relay.ToolCall{ID: 1, Server: "files", Tool: "read", Args: json.RawMessage(`{"path":"x"}`)})
					return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK, Warm: true, Startup: time.Millisecond, Duration: 5 * time.Millisecond}, nil
				})})
			if err != nil {
				b.Fatal(err)
			}
			if m != nil {
				m.Watch(metrics.State{Load: srv.Load})
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					t := time.NewTicker(time.Second)
					defer t.Stop()
					for {
						select {
						case <-stop:
							return
						case <-t.C:
							rec := httptest.NewRecorder()
							m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
						}
					}
				}()
			}
			st, ct := mcp.NewInMemoryTransports()
			ss, err := srv.MCP().Connect(context.Background(), st, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer ss.Close()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), ct, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			p := &mcp.CallToolParams{Name: ToolName, Arguments: map[string]any{"code": "print(1)"},
				Meta: mcp.Meta{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
			b.ReportAllocs()
			for b.Loop() {
				if res, err := cs.CallTool(context.Background(), p); err != nil || res.IsError {
					b.Fatal(res, err)
				}
			}
		})
	}
}
