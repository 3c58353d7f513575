package proxy

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/bridge-mcp/bridge/internal/tracing"
)

// maxUpstreamMessage bounds one message from an HTTP or SSE upstream, the
// same bound the MCP SDK puts on one line from a stdio upstream
// (mcp.DefaultMaxLineLength, which mcp.CommandTransport always uses: a
// longer line ends the session with "inbound JSON-RPC frame exceeded the
// configured maximum line length") and on one server-sent event
// (mcp.DefaultMaxEventSize): 16 MiB, twice the 8 MiB a tool result may
// have when it enters the sandbox, so that JSON-RPC's wrapping and escaping
// of a result the sandbox would take never hit it.
const maxUpstreamMessage = 16 << 20

// maxProxyMessage bounds one message from a remote proxy (bridge serve
// --proxy-url): the bound of the in-memory session to a proxy in the same
// process, which carries the same answers.
const maxProxyMessage = inMemoryMaxLine

// newHTTPClient returns the client for an HTTP or SSE upstream, or for a
// remote proxy: headers go with each request to the origin (scheme, host
// and port) of endpoint and to no other, redirects are refused, and a
// response body other than an event stream is cut at maxBody bytes.
//
// Why refuse redirects rather than follow those to the same origin: an MCP
// endpoint has no reason to redirect, a 307 or 308 would re-send the
// request's body (the tool's arguments) along with the secret headers, and
// "same origin" has edge cases (http to https, default ports, IDN hosts)
// that a refusal with a clear message does not. The message names where
// the server redirected to, so the user can configure that URL if they
// trust it. net/http's own rule (drop Authorization and Cookie on a
// redirect to another domain) would not help: the headers are added below
// it, in the RoundTripper, and custom ones (X-Api-Key) are never dropped.
//
// Why event streams are not cut: an SSE stream is long-lived (the legacy
// SSE transport's one GET carries the whole session, a streamable-HTTP
// answer may carry progress notifications before the result), so a bound
// on its total size would end healthy sessions. The SDK bounds each event
// instead (MaxEventSize, which the callers set to maxBody), and an event
// is what is held in memory. A body that is not labelled
// text/event-stream is read whole by the SDK (io.ReadAll of an
// application/json answer, of an error status's body), so it is the body
// that is bounded. The label is read as the SDK reads it, so a body cannot
// be bounded as a stream and read whole as JSON.
func newHTTPClient(endpoint string, headers map[string]string, maxBody int64) *http.Client {
	origin, _ := url.Parse(endpoint) // validated by the config, or failing in the SDK first
	return &http.Client{
		Transport: limitTransport{
			max:  maxBody,
			next: headerTransport{headers: headers, origin: origin, next: tracing.Transport{Next: http.DefaultTransport}},
		},
		CheckRedirect: refuseRedirect,
	}
}

// refuseRedirect is the CheckRedirect of the clients newHTTPClient makes.
// net/http reports its error as `Post "LOCATION": ...`, with the Location
// as the server sent it: callers scrub it ([Scrubber]) like every error.
func refuseRedirect(req *http.Request, via []*http.Request) error {
	return fmt.Errorf("the server redirected to %q; the bridge does not follow redirects "+
		"(they would take the request and its configured headers elsewhere): "+
		"if you trust that URL, configure it instead", RedactURL(req.URL.String()))
}

// headerTransport adds headers to each request to origin; requests to any
// other place (an SSE server may name another host as its message
// endpoint) go without them.
type headerTransport struct {
	headers map[string]string
	origin  *url.URL
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 && h.origin != nil && sameOrigin(req.URL, h.origin) {
		req = req.Clone(req.Context())
		for k, v := range h.headers {
			req.Header.Set(k, v)
		}
	}
	return h.next.RoundTrip(req)
}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// limitTransport cuts each response body that is not an event stream at
// max bytes (see newHTTPClient).
type limitTransport struct {
	max  int64
	next http.RoundTripper
}

func (l limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	// The SDK tells an event stream from a JSON answer the same way.
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mt == "text/event-stream" {
		return resp, nil
	}
	resp.Body = &limitedBody{rc: resp.Body, left: l.max, max: l.max}
	return resp, nil
}

// limitedBody reads at most max bytes of rc, then fails.
type limitedBody struct {
	rc   io.ReadCloser
	left int64 // bytes that may still be read
	max  int64
	err  error // sticky, once the bound was passed
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Read one byte more than is left: a body of exactly max bytes is fine.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) <= b.left {
		b.left -= int64(n)
		return n, err
	}
	n = int(b.left)
	b.left = 0
	b.err = fmt.Errorf("the server's answer is larger than %d MiB, the most the bridge reads in one HTTP response: "+
		"ask for less (a tool result may be at most 8 MiB in the sandbox)", b.max>>20)
	return n, b.err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
