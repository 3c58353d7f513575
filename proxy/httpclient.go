package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// newHTTPClient returns the client for an HTTP or SSE upstream, or for a
// remote proxy: headers go with each request to the origin (scheme, host
// and port) of endpoint and to no other, and redirects are refused.
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
func newHTTPClient(endpoint string, headers map[string]string) *http.Client {
	origin, _ := url.Parse(endpoint) // validated by the config, or failing in the SDK first
	return &http.Client{
		Transport:     headerTransport{headers: headers, origin: origin, next: http.DefaultTransport},
		CheckRedirect: refuseRedirect,
	}
}

// refuseRedirect is the CheckRedirect of the clients newHTTPClient makes.
// net/http reports its error as `Post "LOCATION": ...`, with the Location
// as the server sent it: callers scrub it (Scrubber) like every error.
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
