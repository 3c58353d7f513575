package transport

import (
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// NewServer is the http.Server of every endpoint the bridge serves (MCP,
// /metrics, /readyz, /healthz, --metrics-addr, --debug-addr): its handler
// is h behind [Guard], so that a route added to h later cannot miss the
// Host and Origin checks. Callers may set more fields (WriteTimeout,
// ConnState) but must not replace Handler; a test in this package checks
// that no other file of the repository builds an http.Server.
func NewServer(h http.Handler, log zerolog.Logger) *http.Server {
	return &http.Server{
		Handler:           Guard(h),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          stdlog.New(httpErrorLog{log}, "", 0),
	}
}

// Guard refuses, with 403, what a web page could make a browser send to a
// server on this machine:
//
//   - a request that reached a loopback address with a Host header that
//     is not a loopback name (localhost, 127.0.0.0/8, [::1]): a DNS
//     rebinding page, whose own name now points at 127.0.0.1. This is the
//     rule the MCP SDK applies to /mcp and /sse, for every path. A request
//     to a non-loopback address is not checked (a name the operator gave
//     the machine, a kubelet's probe of the pod's IP): beyond loopback the
//     bearer token guards what is not public. A request without a Host
//     (HTTP/1.0, as HAProxy's plain health check sends) is let through: a
//     browser always sends one;
//   - a cross-origin request that is not GET, HEAD or OPTIONS
//     (http.CrossOriginProtection: Sec-Fetch-Site, else Origin against
//     Host).
func Guard(h http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r) {
			http.Error(w, fmt.Sprintf("forbidden: Host %q is not a loopback name; on a loopback address the bridge answers only requests for localhost, 127.0.0.1 or [::1] (DNS rebinding protection)", r.Host), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// hostAllowed reports whether r's Host may reach the address it came in
// on (see Guard).
func hostAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !isLoopbackAddr(local) || r.Host == "" {
		return true
	}
	return isLoopbackHost(r.Host)
}

// isLoopbackHost reports whether a Host header (name or IP, with or
// without a port) names this machine's loopback: "localhost" or a
// loopback IP.
func isLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
