package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// headerSink is a server that records every request that reaches it
// carrying one of the secret headers.
type headerSink struct {
	*httptest.Server
	mu   sync.Mutex
	got  []string
	seen int // requests, with or without the headers
}

var secretHeaders = map[string]string{"Authorization": "Bearer hdr-secret-0123456789", "X-Api-Key": "xkey-secret-0123"}

func newHeaderSink(t *testing.T) *headerSink {
	s := &headerSink{}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return testServer() }, nil)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen++
		s.mu.Unlock()
		for k := range secretHeaders {
			if v := r.Header.Get(k); v != "" {
				s.mu.Lock()
				s.got = append(s.got, fmt.Sprintf("%s %s with %s: %s", r.Method, r.URL, k, v))
				s.mu.Unlock()
			}
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// received returns the requests that carried a secret header, and how
// many requests came.
func (s *headerSink) received() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got, s.seen
}

// redirector answers every request with a redirect to location.
func redirector(t *testing.T, code int, location string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, location, code)
	}))
	t.Cleanup(s.Close)
	return s
}

// A redirect to another host never delivers the configured headers: it is
// refused, with a message that says where it went and what to do.
func TestUpstreamRedirectIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, typ string
		code      int
	}{
		{"http 307", TypeHTTP, http.StatusTemporaryRedirect},
		{"http 308", TypeHTTP, http.StatusPermanentRedirect},
		{"sse 302", TypeSSE, http.StatusFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newHeaderSink(t)
			from := redirector(t, tc.code, sink.URL+"/mcp?sig=redirect-sig-0123")
			_, c, logs := startProxy(t, Options{ConnectTimeout: 5 * time.Second},
				ServerConfig{Name: "moved", Type: tc.typ, URL: from.URL + "/mcp", Headers: secretHeaders})
			servers, err := c.Servers(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := sink.received(); len(got) > 0 {
				t.Fatalf("the other host received the secret headers: %q", got)
			}
			st := servers[0]
			want := fmt.Sprintf("the server redirected to %q; the bridge does not follow redirects", RedactURL(sink.URL+"/mcp?sig=x"))
			if st.State != "unavailable" || !strings.Contains(st.Error, want) || !strings.Contains(st.Error, "configure it instead") {
				t.Fatalf("status: %+v\nwant an error with %q", st, want)
			}
			all := st.Error + logs.String()
			for _, secret := range []string{"redirect-sig-0123", "hdr-secret-0123456789", "xkey-secret-0123"} {
				if strings.Contains(all, secret) {
					t.Errorf("%s leaked:\n%s", secret, all)
				}
			}
		})
	}
}

// A redirect on the same host that echoes the configured URL's query (a
// trailing-slash redirect) is refused too, and the Location that net/http
// quotes does not show the secret.
func TestUpstreamRelativeRedirectIsScrubbed(t *testing.T) {
	from := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"/?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
	}))
	defer from.Close()
	_, c, logs := startProxy(t, Options{ConnectTimeout: 5 * time.Second},
		ServerConfig{Name: "slash", Type: TypeHTTP, URL: from.URL + "/mcp?api_key=cfg-secret-0123456"})
	servers, err := c.Servers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	all := fmt.Sprint(servers) + logs.String()
	if servers[0].State != "unavailable" || !strings.Contains(servers[0].Error, "does not follow redirects") || strings.Contains(all, "cfg-secret-0123456") {
		t.Fatalf("status %+v, logs:\n%s", servers[0], logs)
	}
}

// An SSE server may name any URL as its message endpoint: the headers go
// only to the configured origin.
func TestSSEEndpointElsewhereGetsNoHeaders(t *testing.T) {
	sink := newHeaderSink(t)
	sse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "event: endpoint\ndata: %s/messages?session=1\n\n", sink.URL)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer sse.Close()
	cfg := ServerConfig{Name: "sse", Type: TypeSSE, URL: sse.URL, Headers: secretHeaders}
	p := New(Config{Servers: []ServerConfig{cfg}}, Options{Logger: zerolog.Nop(), ConnectTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Statuses(ctx) // the initialize goes to the sink, which is no SSE server
	p.Close()
	got, seen := sink.received()
	if len(got) > 0 {
		t.Fatalf("the message endpoint on another host received the secret headers: %q", got)
	}
	if seen == 0 {
		t.Fatal("the client never posted to the message endpoint: the test proves nothing")
	}
}

// `bridge serve --proxy-url` sends its bearer token to the proxy only.
func TestDialHTTPRefusesRedirect(t *testing.T) {
	var (
		mu  sync.Mutex
		got []string
	)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer other.Close()
	from := redirector(t, http.StatusTemporaryRedirect, other.URL+"/mcp")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := DialHTTP(ctx, from.URL+"/mcp", "proxy-token-0123456789", "test", zerolog.Nop())
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("the other host received Authorization %q", got)
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the server redirected to %q; the bridge does not follow redirects", other.URL+"/mcp")) ||
		strings.Contains(err.Error(), "proxy-token-0123456789") {
		t.Fatalf("DialHTTP: %v", err)
	}
}

func TestSameOrigin(t *testing.T) {
	base := mustParse(t, "https://API.example.com/mcp")
	for in, want := range map[string]bool{
		"https://api.example.com/other":     true,
		"HTTPS://api.EXAMPLE.com:443/x?y=1": true,
		"http://api.example.com/mcp":        false,
		"https://api.example.com:8443/mcp":  false,
		"https://evil.example.com/mcp":      false,
		"https://api.example.com.evil/mcp":  false,
	} {
		if got := sameOrigin(mustParse(t, in), base); got != want {
			t.Errorf("sameOrigin(%s) = %v, want %v", in, got, want)
		}
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
