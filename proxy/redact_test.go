package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://h.example.com/mcp", "https://h.example.com/mcp"},
		{"https://h.example.com:8443/v1/mcp/", "https://h.example.com:8443/v1/mcp/"},
		{"http://user:pass@host/p?api_key=S", "http://<redacted>@host/p?api_key=<redacted>"},
		// A token alone as the user (GitHub style).
		{"https://ghp_0123456789abcdef@h/mcp", "https://<redacted>@h/mcp"},
		{"HTTP://HOST.Example.COM/Mcp?Key=V", "http://host.example.com/Mcp?Key=<redacted>"},
		{"https://h/v1/sk-abcdef0123456789abcdef/mcp", "https://h/v1/<redacted>/mcp"},
		{"https://h/mcp/550e8400-e29b-41d4-a716-446655440000", "https://h/mcp/<redacted>"},
		// After a segment that names a secret, whatever its shape.
		{"https://h/api_key/short/mcp", "https://h/api_key/<redacted>/mcp"},
		{"https://h/Token/abc/x", "https://h/Token/<redacted>/x"},
		{"https://h/x-Auth/abc", "https://h/x-Auth/<redacted>"},
		// Several values, repeated keys: every value goes, each key shows once.
		{"https://h/mcp?b=2&a=1&a=3&token=x", "https://h/mcp?a=<redacted>&b=<redacted>&token=<redacted>"},
		// Percent-encoded forms.
		{"https://h/sk%2Dabcdef0123456789abcdef/mcp", "https://h/<redacted>/mcp"},
		{"https://h/key/a%2Fb%20c/mcp", "https://h/key/<redacted>/mcp"},
		{"https://h/mcp?api%5Fkey=S%2FT", "https://h/mcp?api_key=<redacted>"},
		// A key without a value that looks like a key itself.
		{"https://h/mcp?0123456789abcdefghij", "https://h/mcp?<redacted>=<redacted>"},
		// Short or ordinary segments stay; a long slug does not (the price of the rule).
		{"https://h/v1/mcp-server-2024/sse", "https://h/v1/mcp-server-2024/sse"},
		{"https://h/a-very-long-descriptive-path-segment/x", "https://h/<redacted>/x"},
		{"https://h/mcp#frag", "https://h/mcp#<redacted>"},
		{"mailto:someone@example.com", "mailto:<redacted>"},
		{"/relative?key=S", "<invalid url>"},
		{"http://[::1", "<invalid url>"},
	}
	for _, tt := range tests {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// scrubCase is a configured URL, the secrets in it, and whether the
// secret values show as such in errors (their URL forms always do).
var scrubCases = []struct {
	url     string // HOST is replaced by an address
	secrets []string
}{
	{"http://alice-user-7f3k:pw-9d8s7f6g@HOST/p?api_key=S3CRETKEY-q1w2e3r4", []string{"alice-user-7f3k", "pw-9d8s7f6g", "S3CRETKEY-q1w2e3r4"}},
	{"HTTP://HOST/mcp?api_key=S3CRETKEY-q1w2e3r4", []string{"S3CRETKEY-q1w2e3r4"}},
	{"https://HOST/v1/sk-abcdef0123456789abcdef/mcp", []string{"sk-abcdef0123456789abcdef"}},
	{"http://HOST/mcp?a=S3CRETKEY-q1w2e3r4&a=second-value-zz9&b=third-value-yy8", []string{"S3CRETKEY-q1w2e3r4", "second-value-zz9", "third-value-yy8"}},
	{"http://HOST/mcp?api_key=S3CRET%2FKEY%20q1w2", []string{"S3CRET%2FKEY%20q1w2", "S3CRET/KEY q1w2", "S3CRET"}},
	// net/http re-encodes the path: the error has "my%20secret%20value".
	{"http://HOST/token/my secret value", []string{"my secret value", "my%20secret%20value", "secret"}},
	// A quote (Go-quoted in errors as \") and '<' in a raw query.
	{`http://HOST/mcp?api_key=S3CRET"KEY<q1w2>x`, []string{`S3CRET`, `KEY<q1w2>x`, `q1w2`}},
	{"http://tokenonly-abc123@HOST/mcp", []string{"tokenonly-abc123"}},
}

// The exact texts net/http gives for the URLs above, dialled for real at a
// closed port and at a host that does not resolve, lose every secret.
func TestScrubberNetHTTPErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	for _, host := range []string{closed, "BRIDGE-TEST.INVALID"} {
		for _, tc := range scrubCases {
			u := strings.Replace(tc.url, "HOST", host, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			req, err := http.NewRequestWithContext(ctx, "POST", u, strings.NewReader("{}"))
			if err != nil {
				cancel()
				t.Fatalf("%s: %v", u, err)
			}
			resp, err := (&http.Client{}).Do(req)
			cancel()
			if err == nil {
				_ = resp.Body.Close()
				t.Fatalf("%s: no error", u)
			}
			raw := err.Error()
			if !leaks(raw, tc.secrets) {
				t.Fatalf("net/http's error shows none of the secrets, so the test proves nothing: %s", raw)
			}
			s := NewScrubber([]string{u}, nil)
			for _, got := range []string{s.Scrub(raw), s.Error(err).Error(), s.Error(fmt.Errorf("calling \"initialize\": %w", err)).Error()} {
				if leaks(got, tc.secrets) || !strings.Contains(got, redacted) {
					t.Errorf("%s:\nnet/http: %s\nscrubbed: %s", u, raw, got)
				}
			}
		}
	}
}

func leaks(s string, secrets []string) bool {
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			return true
		}
	}
	return false
}

func TestScrubber(t *testing.T) {
	s := NewScrubber([]string{"http://alice:pw-9d8s7f6g@h.example.com/api/key/k-0123/mcp?api_key=SecretValueOnly"},
		[]string{"Bearer tok-abcdefgh12345", "short"})
	tests := []struct{ in, want string }{
		// The configured URL, as net/http shows it (any case).
		{`Post "HTTP://alice:***@H.EXAMPLE.COM/api/key/k-0123/mcp?api_key=SecretValueOnly": refused`,
			`Post "http://<redacted>@h.example.com/api/key/<redacted>/mcp?api_key=<redacted>": refused`},
		// Another URL (a redirect target): redacted by the rule.
		{`Post "https://other.example.com/x?sig=abc&exp=1": the server redirected`,
			`Post "https://other.example.com/x?exp=<redacted>&sig=<redacted>": the server redirected`},
		// A secret value outside any URL: a relative Location, a server echoing it.
		{`Post "/mcp/?api_key=SecretValueOnly": no`, `Post "/mcp/?api_key=<redacted>": no`},
		{"invalid token tok-abcdefgh12345", "invalid token <redacted>"},
		{"the password is pw-9d8s7f6g", "the password is <redacted>"},
		// Short values are not replaced outside URLs: they would hide words.
		{"a short answer", "a short answer"},
		// Scrubbing twice changes nothing more.
		{`Post "http://<redacted>@h.example.com/api/key/<redacted>/mcp?api_key=<redacted>": refused`,
			`Post "http://<redacted>@h.example.com/api/key/<redacted>/mcp?api_key=<redacted>": refused`},
		{`Get "https://<redacted>@other.example/key/<redacted>/x?<redacted>=<redacted>&a=<redacted>#<redacted>": x`,
			`Get "https://<redacted>@other.example/key/<redacted>/x?<redacted>=<redacted>&a=<redacted>#<redacted>": x`},
		{"see https://h/x?k=v, or (https://h/y?k=v).", "see https://h/x?k=<redacted>, or (https://h/y?k=<redacted>)."},
		{"no url here", "no url here"},
		// A path segment the rule keeps, but that is secret in the configured URL.
		{"see https://h.example.com/messages/SecretValueOnly/x", "see https://h.example.com/messages/<redacted>/x"},
	}
	for _, tt := range tests {
		if got := s.Scrub(tt.in); got != tt.want {
			t.Errorf("Scrub(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
	}
	// A nil Scrubber still redacts the URLs it sees.
	if got := (*Scrubber)(nil).Scrub(`Get "http://u:p@h/?k=v"`); got != `Get "http://<redacted>@h/?k=<redacted>"` {
		t.Errorf("nil Scrubber: %q", got)
	}
}

func TestScrubberError(t *testing.T) {
	s := NewScrubber([]string{"http://h/mcp?key=S3CRETKEY-q1w2e3r4"}, nil)
	if s.Error(nil) != nil {
		t.Fatal("Error(nil) is not nil")
	}
	clean := errors.New("nothing to hide")
	if s.Error(clean) != clean {
		t.Fatal("an error without secrets is not returned as is")
	}
	err := s.Error(fmt.Errorf("reading: %w: http://h/mcp?key=S3CRETKEY-q1w2e3r4", io.EOF))
	if strings.Contains(err.Error(), "S3CRET") || !errors.Is(err, io.EOF) {
		t.Fatalf("scrubbed: %v (is EOF: %v)", err, errors.Is(err, io.EOF))
	}
	inner := &Error{Kind: KindTimeout, Message: "http://h/mcp?key=S3CRETKEY-q1w2e3r4 timed out"}
	var pe *Error
	if !errors.As(s.Error(inner), &pe) || pe.Kind != KindTimeout || strings.Contains(pe.Message, "S3CRET") {
		t.Fatalf("an *Error: %+v", pe)
	}
	// errors.As must not reach the unscrubbed original inside a wrapper.
	if errors.As(s.Error(fmt.Errorf("x: %w", inner)), &pe) {
		t.Fatalf("errors.As reached the original: %+v", pe)
	}
}

// Errors of a --proxy-url dial, directly and through Redialing as bridge
// serve uses it, lose the URL's secrets and the token.
func TestDialHTTPErrorsAreScrubbed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	secrets := []string{"proxy-user-x1", "proxy-pw-y2y2", "proxy-qs-z3z3z3", "sk-proxy0123456789abcdef", "tok-0123456789abcdef"}
	url := "HTTP://proxy-user-x1:proxy-pw-y2y2@" + addr + "/v1/sk-proxy0123456789abcdef/mcp?token=proxy-qs-z3z3z3"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = DialHTTP(ctx, url, "tok-0123456789abcdef", "test", zerolog.Nop())
	if err == nil || leaks(err.Error(), secrets) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("DialHTTP: %v", err)
	}
	r := NewRedialing(func(ctx context.Context) (*Client, error) {
		return DialHTTP(ctx, url, "tok-0123456789abcdef", "test", zerolog.Nop())
	})
	defer r.Close()
	_, err = r.Servers(ctx)
	if err == nil || leaks(err.Error(), secrets) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("Redialing: %v", err)
	}
}
