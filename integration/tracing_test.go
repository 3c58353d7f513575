package integration

// OpenTelemetry traces end to end (docs/tracing.md): `bridge serve`, alone
// and with `bridge proxy --http`, exports its spans over OTLP/HTTP to a
// receiver in this test; the run_python call's _meta carries the client's
// traceparent, and the code calls server-everything over streamable HTTP.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it keeps every request's
// bytes, and the spans decoded from them with their service's name.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	raw   [][]byte
	spans []receivedSpan
	bad   []string
}

type receivedSpan struct {
	service string
	*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err == nil && req.Header.Get("Content-Encoding") == "gzip" {
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(bytes.NewReader(body)); err == nil {
				body, err = io.ReadAll(zr)
			}
		}
		var msg collectortracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &msg)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || err != nil {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type")+": "+errString(err))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.raw = append(r.raw, body)
		for _, rs := range msg.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, receivedSpan{service, s})
				}
			}
		}
		out, _ := proto.Marshal(&collectortracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// waitFor returns the spans received once each of names has come (every
// span is exported when it ends, in batches).
func (r *otlpReceiver) waitFor(t *testing.T, names ...string) []receivedSpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.mu.Lock()
		spans := append([]receivedSpan(nil), r.spans...)
		r.mu.Unlock()
		seen := map[string]bool{}
		for _, s := range spans {
			seen[s.Name] = true
		}
		missing := []string{}
		for _, n := range names {
			if !seen[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("spans %v never arrived; got %d spans: %v", missing, len(spans), spanNames(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func spanNames(spans []receivedSpan) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.service+":"+s.Name)
	}
	return names
}

// recordingProxy passes requests to target (SSE streams flushed as they
// come) and keeps each request's traceparent header.
func recordingProxy(t *testing.T, target string) (string, func() []string) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	var mu sync.Mutex
	var got []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tp := r.Header.Get("traceparent"); tp != "" {
			mu.Lock()
			got = append(got, tp)
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s.URL + u.Path, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
}

// One run_python call is one trace under the client's span, in one
// process or two: the call, its queue, its instance and its code's run;
// the code's tool call under the run; the proxy's call under the tool
// call, with the policy's gate and the upstream's call under it; the
// upstream's HTTP requests carry the upstream span's traceparent. The
// argument the code sent, and what the tool answered, are in no span.
func TestTracing(t *testing.T) {
	scope := aboveEngine("the traces of a call")
	runsOn(t, scope)
	npm := npmPeers(t)
	httpURL := startEverythingHTTP(t, filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	upstreamURL, upstreamParents := recordingProxy(t, httpURL)
	config := filepath.Join(t.TempDir(), "servers.json")
	writeServers(t, config, map[string]any{"web": map[string]any{"type": "http", "url": upstreamURL}})

	for _, remote := range []bool{false, true} {
		name := "in-process"
		if remote {
			name = "remote-proxy"
		}
		t.Run(name, func(t *testing.T) {
			forEngines(t, scope, func(t *testing.T, e *engine) {
				recv := newOTLPReceiver(t)
				// The standard variables, inherited by serve and proxy.
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
				t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
				flags := []string{"--servers-config", config}
				proxyService := "bridge"
				if remote {
					a, _ := startProxy(t, config)
					flags = []string{"--proxy-url", "http://" + a + "/mcp"}
					proxyService = "bridge-proxy"
				}
				cs, _, _ := connectStdioArgs(t, e, nil, flags...)
				checkTrace(t, e, cs, recv, proxyService, upstreamParents)
			})
		})
	}
}

// checkTrace makes the traced call on cs and checks what recv got.
func checkTrace(t *testing.T, e *engine, cs *mcp.ClientSession, recv *otlpReceiver, proxyService string, upstreamParents func() []string) {
	t.Helper()
	var tid [16]byte
	var clientSpan [8]byte
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(clientSpan[:])
	traceparent := "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(clientSpan[:]) + "-01"
	const secret = "trace-secret-4a7b1f"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python",
		Arguments: map[string]any{"code": "import mcp_tools\nprint(mcp_tools.call('web', 'echo', message='" + secret + "'))\n"},
		Meta:      mcp.Meta{"traceparent": traceparent}})
	if err != nil {
		t.Fatal(err)
	}
	if out := contentText(res); res.IsError || !strings.Contains(out, "Echo: "+secret) {
		t.Fatalf("run: %s", out)
	}
	spans := recv.waitFor(t, "tools/call run_python", "bridge.queue", "bridge.acquire", "bridge.exec",
		"bridge.tool_call", "proxy.call", "proxy.gate", "proxy.upstream")

	byName := map[string]receivedSpan{}
	for _, s := range spans {
		if !bytes.Equal(s.TraceId, tid[:]) {
			t.Errorf("span %s:%s is in trace %x, not the client's %x", s.service, s.Name, s.TraceId, tid)
		}
		if _, dup := byName[s.Name]; dup {
			t.Errorf("span %s twice", s.Name)
		}
		byName[s.Name] = s
	}
	parentOf := func(child, parent string) {
		t.Helper()
		if !bytes.Equal(byName[child].ParentSpanId, byName[parent].SpanId) {
			t.Errorf("%s's parent is %x, not %s (%x)", child, byName[child].ParentSpanId, parent, byName[parent].SpanId)
		}
	}
	root := byName["tools/call run_python"]
	if !bytes.Equal(root.ParentSpanId, clientSpan[:]) || root.Kind != tracepb.Span_SPAN_KIND_SERVER || root.service != "bridge" {
		t.Errorf("the call's span: parent %x (want the client's %x), kind %v, service %q", root.ParentSpanId, clientSpan, root.Kind, root.service)
	}
	parentOf("bridge.queue", "tools/call run_python")
	parentOf("bridge.acquire", "tools/call run_python")
	parentOf("bridge.exec", "tools/call run_python")
	parentOf("bridge.tool_call", "bridge.exec")
	parentOf("proxy.call", "bridge.tool_call")
	parentOf("proxy.gate", "proxy.call")
	parentOf("proxy.upstream", "proxy.call")
	if s := byName["proxy.call"].service; s != proxyService {
		t.Errorf("proxy.call was exported by %q, want %q", s, proxyService)
	}
	attrs := func(s receivedSpan) map[string]string {
		m := map[string]string{}
		for _, kv := range s.Attributes {
			v := kv.GetValue()
			switch {
			case v.GetStringValue() != "":
				m[kv.Key] = v.GetStringValue()
			default:
				m[kv.Key] = strings.TrimSpace(v.String())
			}
		}
		return m
	}
	acq := attrs(byName["bridge.acquire"])
	if acq["bridge.engine"] != e.cand.Engine || (acq["bridge.instance"] != "warm" && acq["bridge.instance"] != "cold") {
		t.Errorf("bridge.acquire: %v; want the engine %s and warm or cold", acq, e.cand.Engine)
	}
	t.Logf("the instance was %s (%s)", acq["bridge.instance"], acq["bridge.instance.cold_reason"])
	for name, want := range map[string]map[string]string{
		"tools/call run_python": {"bridge.run.status": "ok"},
		"bridge.tool_call":      {"bridge.mcp.server": "web", "gen_ai.tool.name": "echo", "bridge.policy.decision": "allow"},
		"proxy.call":            {"bridge.mcp.server": "web", "gen_ai.tool.name": "echo", "bridge.policy.decision": "allow"},
		"proxy.upstream":        {"bridge.mcp.transport": "http"},
	} {
		got := attrs(byName[name])
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q (all: %v)", name, k, got[k], v, got)
			}
		}
	}
	if id := attrs(root)["bridge.run.id"]; id == "" || attrs(byName["proxy.call"])["bridge.run.id"] != id {
		t.Errorf("run ids: call %q, proxy %q", id, attrs(byName["proxy.call"])["bridge.run.id"])
	}
	// The upstream's HTTP requests carry the upstream span's traceparent.
	want := "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(byName["proxy.upstream"].SpanId) + "-01"
	found := false
	for _, tp := range upstreamParents() {
		found = found || tp == want
	}
	if !found {
		t.Errorf("no request to the upstream carried traceparent %s; they carried %v", want, upstreamParents())
	}
	// Nothing the code sent or the tool answered, in any byte exported.
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, b := range recv.raw {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("an export holds the argument's value %q", secret)
		}
	}
	if len(recv.bad) > 0 {
		t.Errorf("the receiver refused: %v", recv.bad)
	}
}
