package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// startTestUpstreamHTTP runs this test binary as the test upstream
// (integration/testupstream), a stateful go-sdk server, over streamable
// HTTP on a free loopback port, and returns its /mcp URL.
func startTestUpstreamHTTP(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	urlFile := filepath.Join(t.TempDir(), "url")
	cmd := exec.Command(self, "--name", "go_http", "--http", "127.0.0.1:0", "--url-file", urlFile)
	cmd.Env = append(os.Environ(), upstreamEnv+"=1")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var url string
	waitFor(t, 30*time.Second, "the test upstream's URL", func() bool {
		b, err := os.ReadFile(urlFile)
		url = strings.TrimSpace(string(b))
		return err == nil && url != ""
	})
	return url
}

// upstreamRequest is what an upstream got: the JSON-RPC method of the
// request's body, and its headers.
type upstreamRequest struct {
	method string
	header http.Header
}

// headerProxy passes requests to target (SSE streams flushed as they
// come) and keeps each POST's method and headers.
func headerProxy(t *testing.T, target string) (string, func() []upstreamRequest) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	var mu sync.Mutex
	var got []upstreamRequest
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct{ Method string }
			_ = json.Unmarshal(body, &msg)
			mu.Lock()
			got = append(got, upstreamRequest{msg.Method, r.Header.Clone()})
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s.URL + u.Path, func() []upstreamRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]upstreamRequest(nil), got...)
	}
}

// httpUpstreamCode lists both HTTP upstreams' tools and calls their echo.
const httpUpstreamCode = `
import mcp_tools
for s in ("everything_http", "go_http"):
    print(s, "echo" in [t["name"] for t in mcp_tools.tools(s)])
print(mcp_tools.call("everything_http", "echo", message="hi"))
print(mcp_tools.call("go_http", "echo", message="hi")["message"])
`

// TestHTTPUpstreamUnderHTTPServe: under `bridge serve --http`, code calls
// upstreams served over streamable HTTP (server-everything, and a
// stateful go-sdk server) for an agent of either era, and from a task.
// The agent's request context once carried go-sdk's server-side values
// (the agent's Mcp-Protocol-Version) into the proxy's client calls, and
// every upstream call was refused with Bad Request.
func TestHTTPUpstreamUnderHTTPServe(t *testing.T) {
	scope := aboveEngine("calling HTTP upstreams under serve --http")
	runsOn(t, scope)
	npm := npmPeers(t)
	everything := startEverythingHTTP(t, filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	everything, everythingGot := headerProxy(t, everything)
	goURL, goGot := headerProxy(t, startTestUpstreamHTTP(t))
	config := filepath.Join(t.TempDir(), "servers.json")
	writeServers(t, config, map[string]any{
		"everything_http": map[string]any{"type": "http", "url": everything},
		"go_http":         map[string]any{"type": "http", "url": goURL},
	})
	want := "everything_http True\ngo_http True\nEcho: hi\nhi\n"

	forEngines(t, scope, func(t *testing.T, e *engine) {
		args, _ := serveArgs(e)
		// As users run it: a warm pool; tasks, for the detached path.
		addr, _ := startHTTPBridge(t, e, append(withoutSandboxFlags(args), "--servers-config", config,
			"--policy", tasksPolicy(t, e, 1, 3, "1m", "10m")))
		endpoint := "http://" + addr + "/mcp"

		for _, version := range []string{"", legacyVersion} {
			name := version
			if name == "" {
				name = "2026-07-28"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "httpupstream", Version: "1"}, nil).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{}},
					&mcp.ClientSessionOptions{ProtocolVersion: version})
				if err != nil {
					t.Fatal(err)
				}
				defer cs.Close()
				if v := cs.InitializeResult().ProtocolVersion; v != name {
					t.Fatalf("negotiated %q, want %q", v, name)
				}
				listed(t, cs)
				// Twice: the first call connects the upstreams, the second
				// reuses the connections.
				for range 2 {
					if out, _ := runCode(t, cs, httpUpstreamCode); out != want {
						t.Errorf("output %q, want %q", out, want)
					}
				}
			})
		}

		t.Run("task", func(t *testing.T) {
			// Past tasks.after (500 ms) before it calls: the calls are
			// made from the detached run.
			res := runTask(t, endpoint, "", map[string]any{"code": "import time\ntime.sleep(1.5)\n" + httpUpstreamCode})
			id, _ := res["taskId"].(string)
			if res["resultType"] != "task" || id == "" {
				t.Fatalf("a 1.5 s run: %v", res)
			}
			got := awaitModernTask(t, endpoint, "", id, 2*time.Minute)
			result, _ := got["result"].(map[string]any)
			if text := fmt.Sprint(result["content"]); got["status"] != "completed" || !strings.Contains(text, strings.TrimSuffix(want, "\n")) {
				t.Errorf("the task: %v", got)
			}
		})

		// Neither upstream speaks 2026-07-28 (both refuse its
		// server/discover): no request but that probe may name it, and
		// nothing of the agent's request (its Mcp-Param-* headers) reaches
		// them.
		for _, r := range append(everythingGot(), goGot()...) {
			if r.method != "server/discover" && r.header.Get("Mcp-Protocol-Version") == "2026-07-28" {
				t.Errorf("%s went to the upstream as 2026-07-28: %v", r.method, r.header)
			}
			for k := range r.header {
				if strings.HasPrefix(k, "Mcp-Param-") {
					t.Errorf("%s went to the upstream with %s: %v", r.method, k, r.header)
				}
			}
		}
	})
}
