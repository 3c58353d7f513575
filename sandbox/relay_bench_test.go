package sandbox

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// instantTools answers every tool call at once with a small text result.
type instantTools struct{}

func (instantTools) CallTool(_ context.Context, _ string, call relay.ToolCall) relay.ToolResult {
	return relay.ToolResult{ID: call.ID, Result: json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`)}
}

func (instantTools) Query(_ context.Context, _ string, q relay.Query) relay.ToolResult {
	return relay.ToolResult{ID: q.ID, Result: json.RawMessage(`null`)}
}

// BenchmarkRelayToolCall measures the relay's own share of a tool call
// from the sandbox: mcp_tools.call in the real runner (a host process
// here, no container) -> relay socket -> the Executor's reader -> a tool
// handler that answers at once -> the answer frame -> the runner's reader
// thread -> the caller. One op is one run (a Python process start
// included) of 500 calls one after another, timed by the code itself:
// ns/call is their mean.
func BenchmarkRelayToolCall(b *testing.B) {
	rt := newFake(pythonRunner(b))
	ex := newTestExecutor(b, rt, ExecutorOptions{Tools: instantTools{}})
	code := `import time, mcp_tools
mcp_tools.call("s", "t")
t = time.perf_counter()
for i in range(500):
    mcp_tools.call("s", "t", message=str(i))
print((time.perf_counter() - t) / 500 * 1e9)`
	var total float64
	runs := 0
	for b.Loop() {
		runs++
		res, err := ex.Run(context.Background(), Request{Code: code, Limits: testLimits()})
		if err != nil || res.Status != StatusOK {
			b.Fatalf("run: %+v, %v", res, err)
		}
		ns, err := strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
		if err != nil {
			b.Fatalf("the code printed %q", res.Stdout)
		}
		total += ns
	}
	b.ReportMetric(total/float64(runs), "ns/call")
}
