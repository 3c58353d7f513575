package transport

import (
	"bufio"
	"context"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// hostGet GETs base+path with the Host header host, and returns the
// status.
func hostGet(t *testing.T, base, path, host, auth string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", path, host, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// foreignHosts are what a DNS rebinding page's requests carry.
var foreignHosts = []string{"rebind.evil.example", "rebind.evil.example:8080", "127.0.0.1.nip.io", "localhost.evil.example", "10.0.0.1"}

// Every endpoint of ServeHTTP and of ServeMetrics refuses a foreign Host on
// loopback (a DNS rebinding page), /metrics, /healthz and /readyz as /mcp
// does; the loopback names, and a request without Host (HTTP/1.0 health
// checks), still get through.
func TestGuardForeignHostOnEveryEndpoint(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "bridge_up 1\n") })
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0", Metrics: metrics})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.base, "http://"))
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/mcp", "/sse", "/nothing-here"} {
		for _, host := range foreignHosts {
			if code := hostGet(t, h.base, path, host, ""); code != http.StatusForbidden {
				t.Errorf("GET %s with Host %s: %d, want 403", path, host, code)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "127.0.0.2", "[::1]:" + port} {
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			if code := hostGet(t, h.base, path, host, ""); code != http.StatusOK {
				t.Errorf("GET %s with Host %s: %d, want 200", path, host, code)
			}
		}
	}
	if got := http10Get(t, strings.TrimPrefix(h.base, "http://"), "/readyz"); !strings.HasPrefix(got, "HTTP/1.0 200") {
		t.Errorf("HTTP/1.0 GET /readyz without Host: %q, want 200", got)
	}

	ready := make(chan net.Addr, 1)
	if err := ServeMetrics(t.Context(), metrics, MetricsOptions{Addr: "127.0.0.1:0", Ready: func(a net.Addr) { ready <- a }}, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + (<-ready).String()
	for _, host := range foreignHosts {
		if code := hostGet(t, base, "/metrics", host, ""); code != http.StatusForbidden {
			t.Errorf("--metrics-addr: GET /metrics with Host %s: %d, want 403", host, code)
		}
	}
	if code := hostGet(t, base, "/metrics", "localhost", ""); code != http.StatusOK {
		t.Errorf("--metrics-addr: GET /metrics with Host localhost: %d, want 200", code)
	}
}

// http10Get sends a bare HTTP/1.0 request without a Host header, as
// HAProxy's `option httpchk GET /readyz` does, and returns the status line.
func http10Get(t *testing.T, addr, path string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.0\r\n\r\n")
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// Beyond loopback the Host is not checked (the bearer token guards what
// is not public): a kubelet probes /readyz at the pod's IP, with that IP
// or a node name as Host. The same server reached over loopback checks
// it.
func TestGuardNonLoopbackBind(t *testing.T) {
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "0.0.0.0:0"})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(h.base, "http://"))
	if code := hostGet(t, h.base, "/readyz", "rebind.evil.example", ""); code != http.StatusForbidden {
		t.Errorf("0.0.0.0 bind reached over loopback, Host rebind.evil.example: %d, want 403", code)
	}
	ip := nonLoopbackIP(t)
	if ip == "" {
		t.Skip("no non-loopback IPv4 address on this machine")
	}
	base := "http://" + net.JoinHostPort(ip, port)
	for _, host := range []string{net.JoinHostPort(ip, port), "node-1.cluster.example:" + port} {
		for _, path := range []string{"/readyz", "/healthz"} {
			if code := hostGet(t, base, path, host, ""); code != http.StatusOK {
				t.Errorf("GET %s at %s with Host %s: %d, want 200", path, ip, host, code)
			}
		}
	}
}

// nonLoopbackIP is an IPv4 address of this machine that is not loopback,
// or "".
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// A cross-origin POST is refused on every path, not only /mcp.
func TestGuardCrossOriginEveryPath(t *testing.T) {
	h := startHTTP(t, newTestMCPServer(t, nil), HTTPOptions{Addr: "127.0.0.1:0"})
	for _, path := range []string{"/mcp", "/sse", "/healthz", "/readyz", "/metrics"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.base+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "https://evil.example")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-origin POST %s: %d, want 403", path, resp.StatusCode)
		}
	}
}

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:80": true, "LocalHost:1": true, "127.0.0.1": true, "127.1.2.3:9": true,
		"[::1]": true, "[::1]:8080": true, "::1": true, "[::ffff:127.0.0.1]:1": true,
		"": false, "evil.example": false, "localhost.evil.example": false, "127.0.0.1.nip.io": false,
		"10.0.0.1": false, "0.0.0.0": false, "[::]:80": false, "localhost.": false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// No file of the repository builds an http.Server but NewServer: a server
// built elsewhere would miss Guard.
func TestEveryHTTPServerIsGuarded(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.Contains(filepath.ToSlash(path), "/integration/") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "http.Server{") && filepath.Base(path) != "guard.go" {
			t.Errorf("%s builds an http.Server: use transport.NewServer, which puts Guard before its routes", path)
		}
		if strings.Contains(string(b), "http.ListenAndServe(") || strings.Contains(string(b), "http.Serve(") {
			t.Errorf("%s serves HTTP without an http.Server of transport.NewServer", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
