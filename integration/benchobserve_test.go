package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// observeRow is what observing costs a warm run, one kind of code: the p50
// and p90 of the same runs through a bare bridge and through one whose
// metrics a real Prometheus scrapes every second and whose spans go to an
// OTLP receiver.
type observeRow struct {
	name          string
	off, on       time.Duration // p50
	offP90, onP90 time.Duration
	// diff is the median of the differences of the pairs (each observed
	// run less the bare one just before it): steadier than the
	// difference of the medians on a noisy machine.
	diff time.Duration
	// cpuOff and cpuOn are each bridge's CPU time per run (user and
	// system, in 10 ms ticks over all n runs), scrapes and exports
	// included: what observing costs, without the noise of the runs'
	// latency.
	cpuOff, cpuOn time.Duration
}

// mustCPU is process pid's CPU time so far.
func mustCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	d, err := cpuTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// benchObserve times n warm runs of each kind through two bridges on e
// taking turns, each call once both pools (2) are full again: the code
// prints, or calls server-everything's echo (Node, over stdio) and prints.
func benchObserve(t *testing.T, e *engine, n int) []observeRow {
	t.Helper()
	npm := npmPeers(t)
	servers := filepath.Join(t.TempDir(), "servers.json")
	writeServers(t, servers, map[string]any{
		"everything": map[string]any{"command": "node", "args": []string{filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
	})
	recv := newOTLPReceiver(t)
	start := func(extra ...string) (*mcp.ClientSession, string, int) {
		// A pool of 2 that does not grow: each run waits for it to be
		// full again, as an agent's calls seconds apart find it.
		policyFile := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(policyFile, []byte("version: 1\n"+sandboxSection(e)+"pool:\n  size: 2\n  max: 2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		addr := freeLoopbackAddr(t)
		cs, pid, _ := connectStdioArgs(t, e, nil, append([]string{"--policy", policyFile, "--debug-addr", addr, "--servers-config", servers}, extra...)...)
		return cs, addr, pid
	}
	off, offAddr, offPID := start()
	metricsAddr := freeLoopbackAddr(t)
	on, onAddr, onPID := start("--otlp-endpoint", recv.URL, "--metrics-addr", metricsAddr)
	prom := startPrometheus(t, metricsAddr)
	var rows []observeRow
	for _, c := range []struct{ name, code string }{
		{"print", "print(1)"},
		{"one tool call (server-everything)", "import mcp_tools\nmcp_tools.call('everything', 'echo', message='x')\nprint(1)"},
	} {
		mustRun(t, off, c.code) // opens the engine, starts the upstream
		mustRun(t, on, c.code)
		awaitQuiet(t, offAddr, 2)
		awaitQuiet(t, onAddr, 2)
		cpuOff0, cpuOn0 := mustCPU(t, offPID), mustCPU(t, onPID)
		var latOff, latOn []time.Duration
		for i := range 2 * n {
			awaitQuiet(t, offAddr, 2)
			awaitQuiet(t, onAddr, 2)
			cs, lat := off, &latOff
			if i%2 == 1 {
				cs, lat = on, &latOn
			}
			began := time.Now()
			if out := mustRun(t, cs, c.code); out != "1\n" {
				t.Fatalf("printed %q", out)
			}
			*lat = append(*lat, time.Since(began))
		}
		cpuOff, cpuOn := mustCPU(t, offPID)-cpuOff0, mustCPU(t, onPID)-cpuOn0
		diffs := make([]time.Duration, len(latOn))
		for i := range latOn {
			diffs[i] = latOn[i] - latOff[i]
		}
		rows = append(rows, observeRow{name: c.name, off: percentile(latOff, 50), on: percentile(latOn, 50),
			offP90: percentile(latOff, 90), onP90: percentile(latOn, 90), diff: percentile(diffs, 50),
			cpuOff: cpuOff / time.Duration(n), cpuOn: cpuOn / time.Duration(n)})
	}
	// What was observed arrived: the spans of the runs, and the runs in
	// Prometheus.
	recv.waitFor(t, "tools/call run_python", "bridge.exec", "proxy.upstream")
	prom.await(t, map[string]float64{`sum(bridge_runs_total{status="ok"})`: float64(2*n + 2)})
	return rows
}

// TestBenchObservability logs what metrics and tracing cost a warm run
// (BRIDGE_BENCH_OBSERVE=N runs of each kind per bridge); the bench table
// has the same row (docs/performance.md).
func TestBenchObservability(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BRIDGE_BENCH_OBSERVE"))
	if n <= 0 {
		t.Skip("set BRIDGE_BENCH_OBSERVE=N to time N warm runs with metrics and tracing on and off")
	}
	forEachEngine(t, func(t *testing.T, e *engine) {
		for _, r := range benchObserve(t, e, n) {
			t.Logf("%s, %s: warm run p50 %s bare, %s observed (%+.1f%%); median paired difference %+.2f ms (%+.1f%% of the bare p50); p90 %s, %s; bridge CPU per run %.2f ms bare, %.2f ms observed (%+.1f%% of the bare p50)",
				e.name, r.name, millis(r.off), millis(r.on), 100*(float64(r.on)/float64(r.off)-1), float64(r.diff.Microseconds())/1000, 100*float64(r.diff)/float64(r.off),
				millis(r.offP90), millis(r.onP90), ms(r.cpuOff), ms(r.cpuOn), 100*float64(r.cpuOn-r.cpuOff)/float64(r.off))
		}
	})
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
