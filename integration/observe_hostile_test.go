package integration

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestObservabilityHostile holds the doors metrics and tracing opened
// against what a client, the code or a broken collector can do, with the
// pool on as users run it:
//   - an OTLP collector that takes connections and never answers: runs go
//     on at their pace, the bridge's memory stays bounded (the exporter's
//     queue drops), and it still stops within its shutdown budget;
//   - a client whose _meta carries a 256 KiB traceparent and tracestate,
//     and garbage ones: the calls work, nothing of them is exported;
//   - 16 scrapers hammering /metrics while runs go on: the runs work and
//     the bridge's memory stays bounded;
//   - the code calling made-up servers and tools by the hundred through
//     the runner's own relay connection: no label takes their names.
func TestObservabilityHostile(t *testing.T) {
	forEngines(t, aboveEngine("metrics and tracing against hostile input"), func(t *testing.T, e *engine) {
		// The collector that never answers.
		var hung atomic.Int64
		release := make(chan struct{})
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hung.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(func() { close(release); collector.Close() })

		npm := npmPeers(t)
		servers := filepath.Join(t.TempDir(), "servers.json")
		writeServers(t, servers, map[string]any{
			"everything": map[string]any{"command": "node", "args": []string{filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
		})
		policyFile := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(policyFile, []byte("version: 1\n"+sandboxSection(e)+"  max_concurrent: 4\npool:\n  size: 2\nbudgets:\n  max_calls_per_run: 1000\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		debugAddr, metricsAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
		cs, pid, stderr := connectStdioArgs(t, e, nil, "--policy", policyFile, "--servers-config", servers,
			"--debug-addr", debugAddr, "--metrics-addr", metricsAddr, "--otlp-endpoint", collector.URL)
		w := watchStats(t, debugAddr)
		mustRun(t, cs, "import mcp_tools\nmcp_tools.call('everything', 'echo', message='warm')\nprint(1)")
		awaitQuiet(t, debugAddr, 2)
		base, err := w.window()
		if err != nil {
			t.Fatal(err)
		}
		w.reset()

		// 16 scrapers, as fast as they can, all along.
		stop := make(chan struct{})
		var scrapes atomic.Int64
		var swg sync.WaitGroup
		for range 16 {
			swg.Add(1)
			go func() {
				defer swg.Done()
				client := &http.Client{Timeout: 10 * time.Second}
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := client.Get("http://" + metricsAddr + "/metrics")
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						scrapes.Add(1)
					}
				}
			}()
		}

		// Calls with hostile trace context, 4 at once; the code calls
		// made-up servers and tools through its relay, and a real one.
		huge := strings.Repeat("f", 256<<10)
		metas := []mcp.Meta{
			{"traceparent": "00-" + huge + "-00f067aa0ba902b7-01", "tracestate": huge},
			{"traceparent": "garbage", "tracestate": "=,=,="},
			{"traceparent": 42, "tracestate": []any{1, 2}},
			{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},
		}
		code := `import mcp_tools, secrets
n = 0
for i in range(100):
    try:
        mcp_tools.call("srv-" + secrets.token_hex(4), "t", x=1)
    except mcp_tools.MCPToolsError:
        n += 1
    try:
        mcp_tools.call("everything", "tool-" + secrets.token_hex(4))
    except mcp_tools.MCPToolsError:
        n += 1
mcp_tools.call("everything", "echo", message="x")
print(n)
`
		const calls = 24
		var cwg sync.WaitGroup
		errs := make(chan string, calls)
		slots := make(chan struct{}, 4)
		for i := range calls {
			cwg.Add(1)
			slots <- struct{}{}
			go func() {
				defer cwg.Done()
				defer func() { <-slots }()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": code}, Meta: metas[i%len(metas)]})
				switch {
				case err != nil:
					errs <- err.Error()
				case res.IsError || !strings.Contains(contentText(res), "200"):
					errs <- contentText(res)
				}
			}()
		}
		cwg.Wait()
		close(stop)
		swg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("a call failed: %.300s", e)
		}
		peak, err := w.window()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d scrapes, %d exports left hanging; bridge RSS %s before, %s peak; goroutines %d, %d",
			e.name, scrapes.Load(), hung.Load(), mib(base.RSS), mib(peak.RSS), base.Goroutines, peak.Goroutines)
		if scrapes.Load() < 16 {
			t.Errorf("only %d scrapes answered", scrapes.Load())
		}
		if hung.Load() == 0 {
			t.Error("no export reached the hanging collector: tracing was not on")
		}
		// The hostile suite's bound: the garbage collector's soft limit
		// (64 MiB) lets the heap of a bridge this busy reach it whatever
		// the attack; past the bound, something held what it should not.
		if peak.RSS >= hostileRSSBound {
			t.Errorf("the bridge's RSS peaked at %s under the attack (from %s; bound %s)", mib(peak.RSS), mib(base.RSS), mib(hostileRSSBound))
		}

		// No label took a made-up name.
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, bad := range []string{`server="srv-`, `tool="tool-`, "ffffffff"} {
			if strings.Contains(string(page), bad) {
				t.Errorf("/metrics has %q: a name the code made up became a label value", bad)
			}
		}
		if !strings.Contains(string(page), `bridge_tool_calls_total{decision="allowed",server="everything",tool="echo"} 25`) {
			t.Errorf("the echo calls were not counted as allowed:\n%s", grepLines(string(page), "bridge_tool_calls_total"))
		}

		// It stops within its budget, the collector still hanging.
		began := time.Now()
		cs.Close()
		waitFor(t, 20*time.Second, "the bridge to exit", func() bool { return exited(pid) })
		t.Logf("%s: stopped %s after its stdin closed, with exports hanging", e.name, time.Since(began).Round(time.Millisecond))
		if left := ownedBy(t, e, pid); left != 0 {
			t.Errorf("%d containers left", left)
		}
		if strings.Contains(stderr.String(), huge[:1024]) {
			t.Error("the bridge logged the client's trace context")
		}
	})
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
