package integration

// The sustained-load and idle-pool figures of the table (issue 26): many
// MCP clients calling run_python back to back through one `bridge serve`,
// the same load of bare engine runs, and what an idle pool costs.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchSustained runs c.clients MCP clients (streamable HTTP sessions of
// one bridge with the default max_concurrent and queue, and a pool of
// size with the default max), each calling run_python("print(1)") back to
// back for c.sustain; it fills the row of that pool and returns the calls'
// p95. stop ends the bridge and counts what it left.
func benchSustained(t *testing.T, e *engine, c benchCounts, tab *benchTable, size int, stop func(t *testing.T, pid int)) time.Duration {
	policyFile := t.TempDir() + "/policy.yaml"
	writePoolPolicyMax(t, e, policyFile, size, 0, "")
	debugAddr := freeLoopbackAddr(t)
	first, pid, addr := connectHTTPArgs(t, e, nil, "--policy", policyFile, "--debug-addr", debugAddr)
	clients := []*mcp.ClientSession{first}
	for len(clients) < c.clients {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench-sustained", Version: "1"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, cs)
	}
	defer func() {
		for _, cs := range clients {
			cs.Close()
		}
		stop(t, pid)
	}()
	benchRun(t, first) // opens the engine: not measured
	awaitQuiet(t, debugAddr, size)
	st0, _ := poolStats(t, debugAddr)

	// The pool's target, polled while the load lasts.
	var target atomic.Int64
	target.Store(int64(st0.Target))
	done := make(chan struct{})
	var polled sync.WaitGroup
	polled.Go(func() {
		for {
			if st, ok := poolStats(t, debugAddr); ok {
				target.Store(max(target.Load(), int64(st.Target)))
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})

	var mu sync.Mutex
	var lat []time.Duration
	errs, busy := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(c.sustain)
	for i, cs := range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				began := time.Now()
				o := burstCall(cs)
				d := time.Since(began)
				mu.Lock()
				switch o {
				case "":
					lat = append(lat, d)
				case "busy":
					busy++
				default:
					errs++
					t.Errorf("client %d: %s", i, o)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	close(done)
	polled.Wait()
	st, _ := poolStats(t, debugAddr)

	row, cell := rowSustainOff, latencies(lat)
	if size > 0 {
		row = rowSustainPool
		cell += fmt.Sprintf("; %d of %d warm, the pool's target up to %d", st.Hits-st0.Hits, len(lat), target.Load())
	}
	tab.set(row, e.name, "%s; %.1f runs/s; %d errors, %d busy", cell, float64(len(lat))/wall.Seconds(), errs, busy)
	t.Logf("pool: %+v before, %+v after", st0, st)
	return percentile(lat, 95)
}

// stopHTTPBridge ends a bridge serve --http (SIGINT, as its operator
// would) and returns how many of its containers are left, failing the
// test if any.
func stopHTTPBridge(t *testing.T, e *engine, pid int) int {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !exited(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("bridge serve --http (pid %d) still runs 15 s after SIGINT", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n := ownedBy(t, e, pid)
	if n != 0 {
		t.Errorf("%d container(s) of bridge serve (pid %d) left after it exited", n, pid)
	}
	return n
}

// benchSustainedBare runs the same load as benchSustained with e's CLI:
// c.clients loops of bare runs at once for c.sustain. It fills its row
// and returns the runs' p95.
func benchSustainedBare(t *testing.T, e *engine, c benchCounts, tab *benchTable) time.Duration {
	bin := bareCLI(t, e)
	if err := bareRun(e, bin, fmt.Sprintf("bridge-bench-bare-%d-warm", os.Getpid())); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(c.sustain)
	for range c.clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				began := time.Now()
				err := bareRun(e, bin, fmt.Sprintf("bridge-bench-bare-%d-s%d", os.Getpid(), n.Add(1)))
				d := time.Since(began)
				mu.Lock()
				if err != nil {
					errs++
					t.Error(err)
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	tab.set(rowSustainBare, e.name, "%s; %.1f runs/s; %d errors", latencies(lat), float64(len(lat))/wall.Seconds(), errs)
	return percentile(lat, 95)
}

// idlePoolCost reads, over d, the CPU the bridge pid and the processes of
// its ready containers use, and those processes' RSS.
func idlePoolCost(t *testing.T, e *engine, pid int, d time.Duration) string {
	t.Helper()
	var ids []string
	for _, c := range pooledOf(t, e, pid) {
		ids = append(ids, c.ID)
	}
	if len(ids) == 0 {
		t.Fatal("no ready container to measure")
	}
	bin := bareCLI(t, e)
	cmd := exec.Command(bin, append([]string{"inspect", "--format", "{{.State.Pid}}"}, ids...)...)
	cmd.Env = append(os.Environ(), engineEnv(e)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s inspect: %v", e.cand.Engine, err)
	}
	var procs []int
	for _, f := range strings.Fields(string(out)) {
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			t.Fatalf("%s inspect: pid %q", e.cand.Engine, f)
		}
		procs = append(procs, processTree(p)...)
	}
	cpu := func() (bridge, containers time.Duration) {
		bridge, err := cpuTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if c, err := cpuTime(p); err == nil {
				containers += c
			}
		}
		return bridge, containers
	}
	b0, c0 := cpu()
	time.Sleep(d)
	b1, c1 := cpu()
	var rss int64
	for _, p := range procs {
		rss += vmRSS(p)
	}
	share := func(x time.Duration) float64 { return 100 * float64(x) / float64(d) }
	return fmt.Sprintf("%.1f%% / %.1f%%; %d containers, %d processes, %s RSS together", share(b1-b0), share(c1-c0), len(ids), len(procs), mib(rss))
}

// processTree is pid and its descendants.
func processTree(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", out[i], out[i]))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// vmRSS is process pid's resident set in bytes, 0 when unknown.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
