package main

import (
	"net"
	"net/http"
	"testing"

	"github.com/rs/zerolog"
)

// --debug-addr is loopback only: a DNS rebinding page is the one way a
// browser reaches it, and its Host gives it away.
func TestDebugRefusesForeignHost(t *testing.T) {
	addr, err := serveDebug(t.Context(), "127.0.0.1:0", debugSources{}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	for host, want := range map[string]int{
		"rebind.evil.example": http.StatusForbidden, "rebind.evil.example:" + port: http.StatusForbidden,
		addr: http.StatusOK, "localhost": http.StatusOK,
	} {
		for _, path := range []string{"/debug/stats", "/debug/pprof/goroutine"} {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+path, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("GET %s with Host %s: %d, want %d", path, host, resp.StatusCode, want)
			}
		}
	}
}
