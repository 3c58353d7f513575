package tracing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// The rule that turns tracing on, as docs/tracing.md states it.
func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		flag string
		env  map[string]string
		on   bool
		err  string
	}{
		{on: false},
		{flag: "http://collector:4318", on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, on: false},
		{flag: "http://c:4318", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE"}, on: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, on: false},
		{env: map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, on: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, err: "otlp only"},
	} {
		on, err := enabled(Settings{Endpoint: c.flag}, env(c.env))
		if on != c.on || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("flag %q env %v: on %v err %v; want on %v err %q", c.flag, c.env, on, err, c.on, c.err)
		}
	}
	for _, proto := range []string{"http/json", "thrift"} {
		if _, err := New(context.Background(), Settings{Endpoint: "http://127.0.0.1:1"}, env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": proto}), zerolog.Nop()); err == nil {
			t.Errorf("protocol %s: no error", proto)
		}
	}
	if _, err := New(context.Background(), Settings{Endpoint: "collector:4318"}, env(nil), zerolog.Nop()); err == nil {
		t.Error("--otlp-endpoint without a scheme: no error")
	}
}

// Off, the provider records nothing and Shutdown does nothing.
func TestOff(t *testing.T) {
	p, err := New(context.Background(), Settings{}, env(nil), zerolog.Nop())
	if err != nil || p.On() {
		t.Fatalf("on %v, %v", p.On(), err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "x")
	if span.IsRecording() {
		t.Error("off, a span records")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	var nilP *Provider
	if nilP.On() || nilP.Tracer("t") == nil {
		t.Error("a nil Provider")
	}
}

// --otlp-endpoint is a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the
// spans are posted to /v1/traces under it, at Shutdown at the latest,
// with service.name.
func TestExportOnShutdown(t *testing.T) {
	var posts atomic.Int32
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/base/v1/traces" {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		b, _ := io.ReadAll(r.Body)
		body.Store(string(b))
		posts.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	p, err := New(context.Background(), Settings{Endpoint: srv.URL + "/base", Service: "bridge-test", Version: "v9"}, env(nil), zerolog.Nop())
	if err != nil || !p.On() {
		t.Fatalf("on %v, %v", p.On(), err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "a-span")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ := body.Load().(string)
	if posts.Load() == 0 || !strings.Contains(b, "a-span") || !strings.Contains(b, "bridge-test") || !strings.Contains(b, "v9") {
		t.Fatalf("%d posts; last body %q", posts.Load(), b)
	}
}

// A span context goes into _meta and comes back out; malformed or
// missing ones are none.
func TestMetaAndHeaders(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, _ := trace.ParseTraceState("k=v")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	meta := map[string]any{"other": 1}
	ToMeta(meta, sc)
	if meta[KeyTraceparent] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || meta[KeyTracestate] != "k=v" {
		t.Fatalf("meta %v", meta)
	}
	if got := FromMeta(meta); !got.Equal(trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})) {
		t.Errorf("FromMeta: %v", got)
	}
	for _, m := range []map[string]any{nil, {}, {KeyTraceparent: "garbage"}, {KeyTraceparent: 7}} {
		if FromMeta(m).IsValid() {
			t.Errorf("FromMeta(%v) is valid", m)
		}
	}
	empty := map[string]any{}
	ToMeta(empty, trace.SpanContext{})
	if len(empty) != 0 {
		t.Errorf("an invalid span context set %v", empty)
	}
	var got http.Header
	rt := Transport{Next: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.Header
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})}
	req, _ := http.NewRequestWithContext(trace.ContextWithSpanContext(context.Background(), sc), http.MethodPost, "http://x/", nil)
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got.Get(KeyTraceparent) != meta[KeyTraceparent] || req.Header.Get(KeyTraceparent) != "" {
		t.Errorf("sent %v; the caller's request got %v", got, req.Header)
	}
	if !FromHeader(got).Equal(FromMeta(meta)) {
		t.Errorf("FromHeader %v", FromHeader(got))
	}
	req, _ = http.NewRequest(http.MethodPost, "http://x/", nil)
	if _, err := rt.RoundTrip(req); err != nil || got.Get(KeyTraceparent) != "" {
		t.Errorf("no span, yet traceparent %q", got.Get(KeyTraceparent))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// traceService is an OTLP/gRPC trace receiver that keeps the names of
// the spans it gets.
type traceService struct {
	collectortracepb.UnimplementedTraceServiceServer
	names chan string
}

func (s *traceService) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s.names <- sp.Name
			}
		}
	}
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over gRPC, to --otlp-endpoint.
func TestExportGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc := &traceService{names: make(chan string, 16)}
	collectortracepb.RegisterTraceServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	p, err := New(context.Background(), Settings{Endpoint: "http://" + ln.Addr().String()},
		env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}), zerolog.Nop())
	if err != nil || !p.On() || p.Describe != "OTLP grpc" {
		t.Fatalf("on %v (%s), %v", p.On(), p.Describe, err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "a-grpc-span")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-svc.names:
		if n != "a-grpc-span" {
			t.Errorf("got span %q", n)
		}
	default:
		t.Fatal("no span came over gRPC by the end of Shutdown")
	}
}
