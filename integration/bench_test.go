package integration

import (
	"context"
	"strings"
	"testing"

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
