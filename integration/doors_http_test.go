package integration

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The HTTP doors of issue 33, tried as an attacker would against the real
// binary, with the warm pool on: a DNS rebinding page (a foreign Host on
// loopback) reaches no endpoint of `serve --http`, `proxy --http`,
// --metrics-addr or --debug-addr.

// doorsPolicy writes a policy with the warm pool on (size 1) and extra
// sections, and returns its path.
func doorsPolicy(t *testing.T, e *engine, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	pol := "version: 1\n" + sandboxSection(e) + "pool:\n  size: 1\n  max: 1\n" + extra
	if err := os.WriteFile(path, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startDoorsProxy runs `bridge proxy --http 127.0.0.1:0` on config with
// extra flags, and returns its address and pid.
func startDoorsProxy(t *testing.T, config string, extra ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(testSuite.bridgeBin, append([]string{"proxy", "--http", "127.0.0.1:0", "--servers-config", config}, extra...)...)
	cmd.Env = append(os.Environ(), "BRIDGE_LOG_LEVEL=info", "XDG_CONFIG_HOME="+filepath.Join(filepath.Dir(testSuite.bridgeBin), "xdg-config"))
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"addr":"(127\.0\.0\.1:[0-9]+)".*serving MCP over HTTP`)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		pw.Close()
		if t.Failed() {
			t.Logf("bridge proxy stderr:\n%s", logs.String())
		}
	})
	select {
	case a := <-addr:
		return a, cmd.Process.Pid
	case <-time.After(30 * time.Second):
		t.Fatalf("bridge proxy never said where it listens:\n%s", logs.String())
	}
	return "", 0
}

// hostStatus GETs url with the Host header host and returns the status.
func hostStatus(t *testing.T, url, host string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", url, host, err)
	}
	resp.Body.Close() // an SSE stream ends here
	return resp.StatusCode
}

// checkDoors asks every path of addr with a rebinding page's Host (403
// wanted) and with the address itself and localhost as Host (anything but
// 403: 200 for what only reads).
func checkDoors(t *testing.T, what string, addr string, paths ...string) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	for _, path := range paths {
		url := "http://" + addr + path
		for _, host := range []string{"rebind.evil.example", "rebind.evil.example:" + port, "127.0.0.1.nip.io:" + port} {
			if code := hostStatus(t, url, host); code != http.StatusForbidden {
				t.Errorf("%s: GET %s with Host %s: %d, want 403", what, path, host, code)
			}
		}
		for _, host := range []string{addr, "localhost:" + port} {
			code := hostStatus(t, url, host)
			// What only reads answers 200; /mcp and /sse want more than a
			// GET, /readyz may be 503, and an unknown path is 404.
			reads := path == "/metrics" || path == "/healthz" || strings.HasPrefix(path, "/debug/")
			if code == http.StatusForbidden || (reads && code != http.StatusOK) {
				t.Errorf("%s: GET %s with Host %s: %d, want it answered", what, path, host, code)
			}
		}
	}
}

// A foreign Host on loopback (a DNS rebinding page) is refused on every
// endpoint: serve --http (with --metrics-addr and --debug-addr) and proxy
// --http (with --metrics-addr); the bridge still runs code for a client
// that names it properly.
func TestDoorsHTTPForeignHost(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		metricsAddr, debugAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
		cs, _, addr := connectHTTPArgs(t, e, nil, "--policy", doorsPolicy(t, e, ""),
			"--metrics-addr", metricsAddr, "--debug-addr", debugAddr)
		if out, _ := runCode(t, cs, "print(6 * 7)"); out != "42\n" {
			t.Fatalf("run: %q", out)
		}
		checkDoors(t, "serve --http", addr, "/mcp", "/sse", "/metrics", "/healthz", "/readyz", "/no-such-path")
		checkDoors(t, "serve --metrics-addr", metricsAddr, "/metrics")
		checkDoors(t, "serve --debug-addr", debugAddr, "/debug/stats", "/debug/pprof/heap")

		proxyMetrics := freeLoopbackAddr(t)
		proxyAddr, _ := startDoorsProxy(t, misbehaveServers(t), "--metrics-addr", proxyMetrics)
		checkDoors(t, "proxy --http", proxyAddr, "/mcp", "/sse", "/metrics", "/healthz", "/readyz")
		checkDoors(t, "proxy --metrics-addr", proxyMetrics, "/metrics")
	})
}
