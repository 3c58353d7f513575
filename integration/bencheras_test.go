package integration

// The figures of issue 36 in `make bench` (make bench-eras): a warm
// run_python("print(1)") over HTTP from a 2026-07-28 client (stateless)
// against a 2025-11-25 one (its MCP session), the cost of a task against
// the same call answered at once, and the bridge's memory per idle
// principal and per kept task result. Nothing here asserts a timing; a
// call that does not do what its figure says fails.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestBenchEras measures the figures of issue 36 on docker, and writes
// them (a markdown table) to $BRIDGE_BENCH_OUT when set.
func TestBenchEras(t *testing.T) {
	c := benchTableCounts(t)
	e := enginesFor(t, only("the protocol's cost does not depend on the engine: measured on docker", kindDocker))[0]
	n, principals, kept := 40, 1000, 200
	if c.mode == "short" {
		n, principals, kept = 5, 20, 5
	}
	started := time.Now()

	// One bridge: pool of 2 as users run it, sessions and tasks on (a
	// call becomes a task after 100 ms), many principals.
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\n"+sandboxSection(e)+"pool:\n  size: 2\nsessions:\n  enabled: true\n"+
		fmt.Sprintf("tasks:\n  after: 100ms\n  max: %d\n  max_per_principal: %d\n  result_ttl: 1h\n  max_result_bytes: 1Gi\n", kept+8, kept+8)), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := make([]string, principals)
	var lines strings.Builder
	for i := range tokens {
		b := make([]byte, 16)
		rand.Read(b)
		tokens[i] = hex.EncodeToString(b)
		sum := sha256.Sum256([]byte(tokens[i]))
		fmt.Fprintf(&lines, "p%d sha256:%s\n", i, hex.EncodeToString(sum[:]))
	}
	pfile := filepath.Join(dir, "principals")
	if err := os.WriteFile(pfile, []byte(lines.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	debug := freeLoopbackAddr(t)
	args, _ := serveArgs(e)
	addr, _ := startHTTPBridge(t, e, append(withoutSandboxFlags(args), "--policy", pol, "--principals", pfile, "--debug-addr", debug))
	endpoint := "http://" + addr + "/mcp"
	awaitQuiet(t, debug, 2)

	connect := func(version string) *mcp.ClientSession {
		tr := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer(tokens[0])}}
		var opts *mcp.ClientSessionOptions
		if version != "" {
			opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-eras", Version: "1"}, nil).Connect(context.Background(), tr, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		listed(t, cs)
		return cs
	}
	legacy, modern := connect(legacyVersion), connect("")
	if modern.InitializeResult().ProtocolVersion != "2026-07-28" || legacy.ID() == "" {
		t.Fatalf("the clients negotiated %q and %q", modern.InitializeResult().ProtocolVersion, legacy.InitializeResult().ProtocolVersion)
	}
	call := func(cs *mcp.ClientSession) time.Duration {
		start := time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(1)"}})
		took := time.Since(start)
		if err != nil || res.IsError || !strings.Contains(contentText(res), "1") {
			t.Fatalf("print(1): %v %v", err, res)
		}
		return took
	}
	// Warm print(1): the two eras take turns, the pool refilled before
	// each call.
	var latLegacy, latModern []time.Duration
	call(legacy)
	call(modern)
	for range n {
		awaitQuiet(t, debug, 2)
		latLegacy = append(latLegacy, call(legacy))
		awaitQuiet(t, debug, 2)
		latModern = append(latModern, call(modern))
	}

	// A task against the same run answered at once: a 1 s run, as a plain
	// call, and as a task polled at its pollIntervalMs (1 s) and at 100 ms;
	// and one tasks/get.
	runCode := map[string]any{"name": "run_python", "arguments": map[string]any{"code": "import time\ntime.sleep(1)\nprint(1)"}}
	var plain, taskAdvised, taskFast, polls []time.Duration
	task := func(every time.Duration) time.Duration {
		start := time.Now()
		res, jerr := modernCall(t, endpoint, tokens[0], "tools/call", "run_python", "", runCode, true)
		id, _ := res["taskId"].(string)
		if jerr != nil || id == "" {
			t.Fatalf("a task: %v %v", res, jerr)
		}
		for {
			time.Sleep(every)
			p := time.Now()
			got, jerr := modernCall(t, endpoint, tokens[0], "tasks/get", id, "", map[string]any{"taskId": id}, true)
			polls = append(polls, time.Since(p))
			if jerr != nil {
				t.Fatal(jerr)
			}
			if got["status"] == "completed" {
				return time.Since(start)
			}
		}
	}
	for range max(n/4, 3) {
		awaitQuiet(t, debug, 2)
		start := time.Now()
		if res, jerr := modernCall(t, endpoint, tokens[0], "tools/call", "run_python", "", runCode, false); jerr != nil || res["resultType"] != "complete" {
			t.Fatalf("the plain call: %v %v", res, jerr)
		}
		plain = append(plain, time.Since(start))
		awaitQuiet(t, debug, 2)
		taskAdvised = append(taskAdvised, task(time.Second))
		awaitQuiet(t, debug, 2)
		taskFast = append(taskFast, task(100*time.Millisecond))
	}

	// Memory: each principal makes one stateless call (and so is known:
	// its files' owner, its approvals); then kept task results of 10 KB.
	awaitQuiet(t, debug, 2)
	time.Sleep(time.Second)
	heap0, rss0 := gcHeap(t, debug), debugStats(t, debug).RSS
	for i := 1; i < principals; i++ {
		if _, jerr := modernCall(t, endpoint, tokens[i], "tools/list", "", "", map[string]any{}, false); jerr != nil {
			t.Fatal(jerr)
		}
	}
	awaitQuiet(t, debug, 2)
	time.Sleep(time.Second)
	heap1, rss1 := gcHeap(t, debug), debugStats(t, debug).RSS
	var ids []string
	for range kept {
		res, jerr := modernCall(t, endpoint, tokens[0], "tools/call", "run_python", "", map[string]any{"name": "run_python",
			"arguments": map[string]any{"code": "import time\ntime.sleep(0.3)\nprint('x' * 10000)"}}, true)
		id, _ := res["taskId"].(string)
		if jerr != nil || id == "" {
			t.Fatalf("a kept task: %v %v", res, jerr)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		awaitModernTask(t, endpoint, tokens[0], id, time.Minute)
	}
	awaitQuiet(t, debug, 2)
	time.Sleep(time.Second)
	heap2, rss2 := gcHeap(t, debug), debugStats(t, debug).RSS

	out := fmt.Sprintf("Measured %s by TestBenchEras (BRIDGE_BENCH_TABLE=%s) on docker, bridge serve --http on loopback, pool of 2, go-sdk v1.8.0 clients.\n\n",
		started.UTC().Format("2006-01-02 15:04 MST"), c.mode) +
		"| figure | value |\n| --- | --- |\n" +
		fmt.Sprintf("| warm `print(1)` over HTTP, MCP 2025-11-25 client (its MCP session), %d calls | %s |\n", n, latencies(latLegacy)) +
		fmt.Sprintf("| the same, MCP 2026-07-28 client (stateless: no session, `_meta` and headers on each request) | %s |\n", latencies(latModern)) +
		fmt.Sprintf("| a 1 s run answered at once (plain call), %d calls | %s |\n", len(plain), latencies(plain)) +
		fmt.Sprintf("| the same run as a task (after 100 ms), polled every `pollIntervalMs` (1 s) | %s |\n", latencies(taskAdvised)) +
		fmt.Sprintf("| the same task polled every 100 ms | %s |\n", latencies(taskFast)) +
		fmt.Sprintf("| one `tasks/get`, %d polls | %s |\n", len(polls), latencies(polls)) +
		fmt.Sprintf("| bridge memory per idle principal (%d principals, each one request): live heap after a GC; RSS | %.1f KiB; %.1f KiB |\n", principals-1,
			float64(heap1-heap0)/float64(principals-1)/1024, float64(rss1-rss0)/float64(principals-1)/1024) +
		fmt.Sprintf("| bridge memory per kept task result of 10 KB of output (%d tasks; the result holds it twice: text and structuredContent): live heap after a GC; RSS | %.1f KiB; %.1f KiB |\n", kept,
			float64(heap2-heap1)/float64(kept)/1024, float64(rss2-rss1)/float64(kept)/1024) +
		fmt.Sprintf("| bridge RSS: before, with the principals, with the kept tasks | %s, %s, %s |\n", mib(rss0), mib(rss1), mib(rss2))
	t.Logf("took %s\n%s", time.Since(started).Round(time.Second), out)
	if path := os.Getenv("BRIDGE_BENCH_OUT"); path != "" && !t.Failed() {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// gcHeap is the bridge's live heap: its /debug/pprof/heap?gc=1 runs a
// collection first, then /debug/stats reads the heap.
func gcHeap(t *testing.T, addr string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/debug/pprof/heap?gc=1: %s", resp.Status)
	}
	return int64(debugStats(t, addr).HeapAlloc)
}
