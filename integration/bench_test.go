package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/sandbox"
)

// BenchmarkRun measures one whole run per engine: create, start, runner
// connect, exec, exit, remove. make bench runs it; docs/performance.md
// reports it.
func BenchmarkRun(b *testing.B) {
	cases := []struct {
		name, code string
	}{
		{"pass", "pass"},
		{"print_1MiB", "import sys\nsys.stdout.write('x' * (1 << 20))"},
		{"asyncio", "import asyncio\nawait asyncio.sleep(0)"},
	}
	for _, e := range testSuite.engines {
		ex, err := sandbox.NewExecutor(context.Background(), e.rt, sandbox.ExecutorOptions{
			Image: imageName(), AllowUnenforcedLimits: !e.enforced, Logger: quiet(),
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cases {
			b.Run(e.name+"/"+c.name, func(b *testing.B) {
				l := limits()
				l.OutputBytes = 2 << 20
				var startup int64
				for b.Loop() {
					res, err := ex.Run(context.Background(), sandbox.Request{Code: c.code, Limits: l})
					if err != nil || res.Status != sandbox.StatusOK {
						b.Fatalf("status %s %v: %s", res.Status, err, strings.TrimSpace(res.Stderr))
					}
					startup += res.Startup.Microseconds()
				}
				b.ReportMetric(float64(startup)/float64(b.N)/1000, "startup-ms/op")
			})
		}
	}
}

// BenchmarkServeCall measures one run_python call through `bridge serve`
// over stdio, as an agent's client makes it: the MCP round trip on top of
// BenchmarkRun's whole run.
func BenchmarkServeCall(b *testing.B) {
	for _, e := range testSuite.engines {
		b.Run(e.name, func(b *testing.B) {
			args, env := serveArgs(e)
			cmd := exec.Command(testSuite.bridgeBin, args...)
			cmd.Env = append(os.Environ(), env...)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
				Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			p := &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(21*2)"}}
			// The first call opens the engine; it is not what is measured.
			if res, err := cs.CallTool(context.Background(), p); err != nil || res.IsError {
				b.Fatalf("warm-up call: %v %+v", err, res)
			}
			for b.Loop() {
				res, err := cs.CallTool(context.Background(), p)
				if err != nil || res.IsError {
					b.Fatalf("call: %v %+v", err, res)
				}
			}
		})
	}
}
