package toolhost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

// webServer is an MCP server over streamable HTTP with three tools: echo,
// wipe (which the tests' policy denies) and quote, whose calls fail with
// an error that quotes their arguments, as some servers' do.
func webServer(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "web"}, nil)
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && method == "tools/call" && p.Name == "quote" {
				return nil, fmt.Errorf("bad arguments: %s", p.Arguments)
			}
			return next(ctx, method, req)
		}
	})
	for _, name := range []string{"echo", "wipe", "quote"} {
		s.AddTool(&mcp.Tool{Name: name, Description: name + " something", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// The code chooses the server and tool it names: a made-up name must not
// reach the traces (docs/tracing.md), nor the metrics. Through a real
// proxy in the same process, calls of an unknown server, of an unknown
// tool of a known server, of a denied tool and of a known tool, each
// naming a marker, leave the marker in no span, no series and no log line
// (an upstream's error that quotes the arguments included); the tool
// call's span names what the proxy resolved, and UnknownName for the rest.
func TestTracingOnlyResolvedNames(t *testing.T) {
	pol, err := policy.Parse([]byte("version: 1\ntools:\n  rules:\n    - tool: wipe\n      action: deny\n"), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	m := metrics.New("test")
	var logs syncBuffer
	log := zerolog.New(&logs).Level(zerolog.DebugLevel)
	p := proxy.New(proxy.Config{Servers: []proxy.ServerConfig{{Name: "web", Type: proxy.TypeHTTP, URL: webServer(t)}}},
		proxy.Options{Tracer: tp.Tracer("proxy"), Policy: store, Metrics: m, Logger: log})
	t.Cleanup(p.Close)
	c, err := p.Connect(context.Background(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	h := New(c, Options{Tracer: tp.Tracer("toolhost"), Logger: log})

	const marker = "exfil-7f3a9c"
	for _, tc := range []struct {
		server, tool, kind, wantServer, wantTool string
	}{
		{marker + "-server", marker + "-tool", relay.ErrUnknownServer, proxy.UnknownName, proxy.UnknownName},
		{"web", marker + "-tool", relay.ErrUnknownTool, "web", proxy.UnknownName},
		{"web", "wipe", relay.ErrDenied, "web", "wipe"},
		{"web", "echo", "", "web", "echo"},
		{"web", "quote", relay.ErrUpstream, "web", "quote"},
	} {
		rec.Reset()
		r := h.CallTool(context.Background(), "run1", relay.ToolCall{ID: 1, Server: tc.server, Tool: tc.tool,
			Args: json.RawMessage(`{"message":"` + marker + `"}`)})
		if (r.Error == nil) != (tc.kind == "") || (r.Error != nil && r.Error.Type != tc.kind) {
			t.Fatalf("%s/%s: %+v, want kind %q", tc.server, tc.tool, r.Error, tc.kind)
		}
		spans := rec.Ended()
		var call sdktrace.ReadOnlySpan
		for _, s := range spans {
			if s.Name() == spanToolCall {
				call = s
			}
		}
		if call == nil {
			t.Fatalf("%s/%s: no %s span among %d", tc.server, tc.tool, spanToolCall, len(spans))
		}
		got := map[string]string{}
		for _, kv := range call.Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		if got["bridge.mcp.server"] != tc.wantServer || got["gen_ai.tool.name"] != tc.wantTool {
			t.Errorf("%s/%s: the span names %q/%q, want %q/%q", tc.server, tc.tool,
				got["bridge.mcp.server"], got["gen_ai.tool.name"], tc.wantServer, tc.wantTool)
		}
		js, _ := json.Marshal(tracetest.SpanStubsFromReadOnlySpans(spans))
		if strings.Contains(string(js), marker) {
			t.Errorf("%s/%s: the spans hold the marker: %s", tc.server, tc.tool, js)
		}
	}
	if strings.Contains(logs.String(), marker) {
		t.Errorf("the logs hold the marker:\n%s", logs.String())
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), marker) || !strings.Contains(string(body), `tool="echo"`) {
		t.Errorf("the metrics hold the marker, or not echo's call:\n%s", body)
	}
}
