package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
)

// TestBenchKubernetes measures the kubernetes engine beside the others in
// the suite (BRIDGE_TEST_ENGINES=docker,kubernetes with the test cluster
// up; BRIDGE_BENCH_KUBE=N runs of each): a cold container's start (the
// executor's create, start and the runner's connection: for a pod, its
// POST to the runner connected), the warm pool's take, `print(1)` end to
// end through `bridge serve` with the pool off and on, and the test
// cluster's memory. docs/performance.md has its table.
func TestBenchKubernetes(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BRIDGE_BENCH_KUBE"))
	if n <= 0 {
		t.Skip("BRIDGE_BENCH_KUBE=N measures the kubernetes engine beside the others (make bench-kube)")
	}
	rows := []string{
		"cold start: create → runner connected (in process; a pod: POST → runner connected)",
		"warm pool take (the run's wait for a ready container; bridge_pool_take_seconds, mean)",
		"`run_python(\"print(1)\")` end to end, pool off",
		"`run_python(\"print(1)\")` end to end, pool on (2)",
	}
	cells := map[string][]string{}
	var names []string
	forEachEngine(t, func(t *testing.T, e *engine) {
		names = append(names, e.name)
		col := make([]string, len(rows))
		cells[e.name] = col

		ex := executor(t, e)
		limits := sandbox.DefaultLimits()
		if e.cand.Engine == sandbox.EngineKubernetes {
			limits.CPUs = 0.25
		}
		var starts []time.Duration
		for range n {
			res, err := ex.Run(context.Background(), sandbox.Request{Code: "pass", Limits: limits})
			if err != nil || res.Status != sandbox.StatusOK {
				t.Fatalf("cold run: %v %+v", err, res)
			}
			starts = append(starts, res.Startup)
		}
		col[0] = latencies(starts)

		// Pool off, then on, through bridge serve as an agent calls it.
		cs, pid, _, addr, _ := poolBridge(t, e, 0, "")
		benchRun(t, cs)
		awaitQuiet(t, addr, 0)
		col[2] = latencies(benchCalls(n, func() { awaitQuiet(t, addr, 0) }, func() { benchRun(t, cs) }))
		stopBridge(t, e, cs, pid)

		policyFile := filepath.Join(t.TempDir(), "policy.yaml")
		writePoolPolicy(t, e, policyFile, 2, "")
		metricsAddr, debugAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
		cs, pid, _ = connectStdioArgs(t, e, nil, "--policy", policyFile, "--debug-addr", debugAddr, "--metrics-addr", metricsAddr)
		benchRun(t, cs)
		awaitQuiet(t, debugAddr, 2)
		sum0, count0 := histogram(t, metricsAddr, "bridge_pool_take_seconds")
		col[3] = latencies(benchCalls(n, func() { awaitQuiet(t, debugAddr, 2) }, func() { benchRun(t, cs) }))
		sum, count := histogram(t, metricsAddr, "bridge_pool_take_seconds")
		if count > count0 {
			col[1] = fmt.Sprintf("%.2f ms (%d takes)", 1000*(sum-sum0)/(count-count0), int(count-count0))
		}
		stopBridge(t, e, cs, pid)
	})

	var b strings.Builder
	fmt.Fprintf(&b, "| figure (%d runs each; p50 / p95 / p99) | %s |\n|---|%s\n", n, strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	for i, r := range rows {
		var cs []string
		for _, name := range names {
			cs = append(cs, cells[name][i])
		}
		fmt.Fprintf(&b, "| %s | %s |\n", r, strings.Join(cs, " | "))
	}
	if out, err := exec.Command("bash", filepath.Join(repoRoot(), "integration", "kube", "kube.sh"), "mem").CombinedOutput(); err == nil {
		fmt.Fprintf(&b, "\nThe test cluster's memory (`integration/kube/kube.sh mem`):\n\n```\n%s```\n", out)
	}
	t.Logf("\n%s", b.String())
	fmt.Println("\n" + b.String())
}

// histogram reads the sum and count of a histogram (all labels) from a
// bridge's /metrics.
func histogram(t *testing.T, addr, name string) (sum, count float64) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for suffix, into := range map[string]*float64{"_sum": &sum, "_count": &count} {
			if strings.HasPrefix(line, name+suffix) {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				*into += v
			}
		}
	}
	return sum, count
}
