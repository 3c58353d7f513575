package integration

// Doors of the proxy (issue 33), with the pool on as users run it, on
// each engine: what the code names in a tool call never reaches the
// traces, the metrics or the log.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/sandbox"
)

// doorsPolicy writes a policy with a warm pool of one container and the
// sections in extra, auditing to a file; it returns both paths.
func doorsPolicy(t *testing.T, e *engine, extra string) (policyFile, audit string) {
	t.Helper()
	dir := t.TempDir()
	policyFile, audit = filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.jsonl")
	pol := "version: 1\n" + sandboxSection(e) + "pool:\n  size: 1\n" + extra + "audit:\n  file: " + audit + "\n"
	if err := os.WriteFile(policyFile, []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	return policyFile, audit
}

// doorsBridge is `bridge serve` under policyFile (doorsPolicy) with the
// flags in extra, and --debug-addr, by which run waits for a warm
// container.
type doorsBridge struct {
	cs        *mcp.ClientSession
	stderr    *syncBuffer
	debugAddr string
}

func startDoorsBridge(t *testing.T, e *engine, policyFile string, extra ...string) *doorsBridge {
	t.Helper()
	b := &doorsBridge{debugAddr: freeLoopbackAddr(t)}
	b.cs, _, b.stderr = connectStdioArgs(t, e, nil, append([]string{"--policy", policyFile, "--debug-addr", b.debugAddr}, extra...)...)
	return b
}

// run runs code in a warm container, once the pool has one, and returns
// its stdout; the run must end ok.
func (b *doorsBridge) run(t *testing.T, code string) string {
	t.Helper()
	before := awaitPool(t, b.debugAddr, 2*time.Minute, "a ready container", func(st sandbox.PoolStats) bool { return st.Ready >= 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, out := callRunPython(t, ctx, b.cs, code, nil)
	if res.IsError || out.Status != "ok" {
		t.Fatalf("run: status %q: %s", out.Status, contentText(res))
	}
	if st, _ := poolStats(t, b.debugAddr); st.Hits != before.Hits+1 {
		t.Errorf("the run did not take the ready container: pool hits %d, then %d", before.Hits, st.Hits)
	}
	return out.Stdout
}

// doorsToolCallNames are the server and tool of each bridge.tool_call span.
func doorsToolCallNames(spans []receivedSpan) []string {
	var out []string
	for _, s := range spans {
		if s.Name != "bridge.tool_call" {
			continue
		}
		var server, tool string
		for _, kv := range s.Attributes {
			switch kv.Key {
			case "bridge.mcp.server":
				server = kv.GetValue().GetStringValue()
			case "gen_ai.tool.name":
				tool = kv.GetValue().GetStringValue()
			}
		}
		out = append(out, server+"/"+tool)
	}
	return out
}

// TestDoorsTraceNamesOnly: code that names a made-up server, a made-up
// tool of a real one, and puts a marker in the arguments of calls that
// work and fail, in a search and a tools query, cannot write it into the
// traces the bridge (and a remote proxy) export, nor into /metrics nor
// the log: the tool call's span names what the proxy resolved, and
// "(unknown)" for the rest. It used to export the code's names as they
// were, up to 256 bytes a call.
func TestDoorsTraceNamesOnly(t *testing.T) {
	for _, remote := range []bool{false, true} {
		name := "in-process"
		if remote {
			name = "remote-proxy"
		}
		t.Run(name, func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, e *engine) {
				recv := newOTLPReceiver(t)
				t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
				servers, _ := recordingServers(t)
				policyFile, _ := doorsPolicy(t, e, "")
				metricsAddr := freeLoopbackAddr(t)
				flags := []string{"--otlp-endpoint", recv.URL, "--metrics-addr", metricsAddr, "--servers-config", servers}
				var proxyLog *syncBuffer
				if remote {
					var addr string
					addr, proxyLog = startProxy(t, servers, "--otlp-endpoint", recv.URL)
					flags = append(flags[:len(flags)-2], "--proxy-url", "http://"+addr+"/mcp")
				}
				br := startDoorsBridge(t, e, policyFile, flags...)
				var b [6]byte
				_, _ = rand.Read(b[:])
				marker := "doors" + hex.EncodeToString(b[:])
				out := br.run(t, strings.ReplaceAll(`import mcp_tools
M = "MARKER"
out = []
for server, tool in [(M + "-server", M + "-tool"), ("misbehave", M + "-tool")]:
    try:
        mcp_tools.call(server, tool, note=M)
        out.append("called")
    except mcp_tools.MCPToolsError as e:
        out.append(type(e).__name__)
out.append(mcp_tools.call("misbehave", "echo", message=M)["message"] == M)
try:
    mcp_tools.call("misbehave", "fail", message=M)
except mcp_tools.ToolError as e:
    out.append(M in str(e))
out.append(len(mcp_tools.search(M + " echo", limit=3)) > 0)
try:
    mcp_tools.tools(M)
except mcp_tools.UnknownServerError:
    out.append("no such server")
print(out)
`, "MARKER", marker))
				if want := "['UnknownServerError', 'UnknownToolError', True, True, True, 'no such server']"; strings.TrimSpace(out) != want {
					t.Fatalf("the run printed %q, want %q", out, want)
				}
				// The bridge's spans end before its call's; the proxy's
				// (another process when remote) are those of the two calls
				// that reached it, echo and fail.
				recv.waitFor(t, "tools/call run_python")
				var spans []receivedSpan
				waitFor(t, 20*time.Second, "the proxy's two proxy.call spans", func() bool {
					recv.mu.Lock()
					spans = append([]receivedSpan(nil), recv.spans...)
					recv.mu.Unlock()
					n := 0
					for _, s := range spans {
						if s.Name == "proxy.call" {
							n++
						}
					}
					return n == 2
				})
				names := strings.Join(doorsToolCallNames(spans), " ")
				if names != "(unknown)/(unknown) misbehave/(unknown) misbehave/echo misbehave/fail" {
					t.Errorf("the tool calls' spans name %q", names)
				}
				recv.mu.Lock()
				for _, raw := range recv.raw {
					if strings.Contains(string(raw), marker) {
						t.Errorf("an export holds the code's marker %q", marker)
						break
					}
				}
				recv.mu.Unlock()
				resp, err := http.Get("http://" + metricsAddr + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				page, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(page), marker) {
					t.Errorf("/metrics holds the code's marker:\n%s", grepLines(string(page), marker))
				}
				if strings.Contains(br.stderr.String(), marker) {
					t.Errorf("the bridge's log holds the code's marker:\n%s", grepLines(br.stderr.String(), marker))
				}
				if proxyLog != nil && strings.Contains(proxyLog.String(), marker) {
					t.Errorf("the proxy's debug log holds the code's marker:\n%s", grepLines(proxyLog.String(), marker))
				}
			})
		})
	}
}
