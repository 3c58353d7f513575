package integration

// The table of `make bench` (issue 12): every figure the performance
// targets are about, measured side by side in one run on each engine under
// test, printed as one markdown table and, with BRIDGE_BENCH_OUT, written
// to a file that `make bench` splices into docs/performance.md. Nothing
// here asserts a timing: shared machines are too noisy for that. A call that
// fails, or a container a bridge leaves behind, still fails the test.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/sandbox"
)

// benchCounts are how many of each measurement the table takes.
type benchCounts struct {
	mode      string        // full or short
	calls     int           // run_python calls (and bare runs) per latency figure
	toolCalls int           // tool calls per sequential or at-once figure
	repeats   int           // runs of each tool-call figure; the median is shown
	burst     int           // run_python calls submitted at once
	memPool   int           // pool size the memory of a pooled container is read at
	settle    time.Duration // quiet time before a memory reading
	clients   int           // MCP clients of the sustained load
	sustain   time.Duration // how long the sustained load lasts
	idle      time.Duration // how long an idle pool's CPU is read over
	observe   int           // warm runs of each kind through each bridge of the observed row
	state     int           // calls of each figure of files in and snapshots (issue 35)
}

// benchTableCounts reads BRIDGE_BENCH_TABLE: full (make bench: stable
// medians, a few minutes an engine), short (a handful of each: CI proves the
// harness works), or unset: short with CI=true, else skip.
func benchTableCounts(t *testing.T) benchCounts {
	t.Helper()
	mode := os.Getenv("BRIDGE_BENCH_TABLE")
	if mode == "" && ci() {
		mode = "short"
	}
	switch mode {
	case "full":
		return benchCounts{mode: mode, calls: 40, toolCalls: 200, repeats: 5, burst: 32, memPool: 8, settle: 2 * time.Second,
			clients: 8, sustain: 20 * time.Second, idle: 10 * time.Second, observe: 100, state: 10}
	case "short":
		return benchCounts{mode: mode, calls: 5, toolCalls: 20, repeats: 1, burst: 8, memPool: 2, settle: 500 * time.Millisecond,
			clients: 8, sustain: 3 * time.Second, idle: time.Second, observe: 5, state: 2}
	case "":
		t.Skip("the benchmark table is `make bench` (or `make bench-table`; BRIDGE_BENCH_TABLE=full or short)")
	}
	t.Fatalf("BRIDGE_BENCH_TABLE=%q: want full or short", mode)
	return benchCounts{}
}

// The rows of the table, in order.
const (
	rowPoolOn = iota
	rowPoolOff
	rowBare
	rowPoolOnRatio
	rowPoolOffRatio
	rowBurstOff
	rowBurstPool
	rowSustainOff
	rowSustainPool
	rowSustainBare
	rowSustainRatio
	rowLeft
	rowRSSIdle
	rowRSSPool
	rowRSSBurst
	rowPoolMemory
	rowIdlePool
	rowObserve
	rowTokens
	numRows
)

type benchRow struct {
	figure, target string
	cells          map[string]string // by engine name
}

// benchTable is the table being filled: one column per engine. Subtests run
// one after another, so it needs no lock.
type benchTable struct {
	engines []string
	rows    [numRows]benchRow
	calls   *upstreamTable // the tool-call table, by upstream
	state   *stateTable    // the table of files in and snapshots
}

func newBenchTable(c benchCounts, engines []string) *benchTable {
	b := &benchTable{engines: engines, calls: &upstreamTable{}, state: newStateTable(engines)}
	def := func(row int, figure, target string) {
		b.rows[row] = benchRow{figure: figure, target: target, cells: map[string]string{}}
	}
	def(rowPoolOn, "`run_python(\"print(1)\")` end to end, calls seconds apart, pool on (2)", "p50 ≤ 15 ms, p99 ≤ 15 ms")
	def(rowPoolOff, "the same, pool off", "")
	def(rowBare, "bare `docker run --rm` / `podman run --rm`, same hardening, `python3 -I -B -c pass`", "")
	def(rowPoolOnRatio, "pool on / bare (p50)", "≤ 0.06×")
	def(rowPoolOffRatio, "pool off / bare (p50)", "≤ 1.0×")
	def(rowBurstOff, fmt.Sprintf("burst: %d `run_python` at once (max_concurrent 4), pool off: wall time; each call's p50, p95, p99", c.burst), "zero errors")
	def(rowBurstPool, "the same burst, pool of 4 (max 8)", "zero errors")
	def(rowSustainOff, fmt.Sprintf("sustained: %d MCP clients (HTTP) each calling `run_python` back to back for %s (max_concurrent 4), pool off", c.clients, units.FormatDuration(c.sustain)), "zero errors")
	def(rowSustainPool, "the same load, pool on (2, max 8)", "zero errors")
	def(rowSustainBare, fmt.Sprintf("the same load of bare `docker run --rm` / `podman run --rm`: %d loops at once", c.clients), "")
	def(rowSustainRatio, fmt.Sprintf("sustained p95, pool on / bare run p95: one at a time; %d at once", c.clients), "≤ 1.0× (issue 26)")
	def(rowLeft, "containers left after each bridge exited", "zero")
	def(rowRSSIdle, "bridge RSS idle after one call, pool off", "≤ 30 MB (28.6 MiB)")
	def(rowRSSPool, "bridge RSS idle, pool full (2)", "")
	def(rowRSSBurst, "bridge RSS peak under the burst: pool off / pool of 4", "")
	def(rowPoolMemory, fmt.Sprintf("memory one pooled container costs (host MemAvailable drop / %d, approximate)", c.memPool), "")
	def(rowIdlePool, fmt.Sprintf("idle pool of 2, over %s: CPU of the bridge / of its ready containers' processes (of one core); their RSS", units.FormatDuration(c.idle)), "")
	def(rowObserve, fmt.Sprintf("warm run p50, bare / observed (metrics scraped by a real Prometheus every second, every span exported over OTLP), %d runs each, taking turns: `print(1)`; one call to server-everything; the median paired difference; the bridge's CPU per run, observed less bare (%% of the bare p50)", c.observe), "< 2% of p50 (issue 26)")
	def(rowTokens, "`tools/list` tokens (o200k_base): the bridge vs server-everything + -filesystem + -memory (engine-independent)", "≤ 300 (TestToolsListTokenBudget)")
	return b
}

func (b *benchTable) set(row int, engine, format string, args ...any) {
	b.rows[row].cells[engine] = fmt.Sprintf(format, args...)
}

func (b *benchTable) markdown() string { return figuresMarkdown(b.engines, b.rows[:]) }

func (s *stateTable) markdown() string { return figuresMarkdown(s.engines, s.rows[:]) }

// figuresMarkdown is a table of rows, one column per engine.
func figuresMarkdown(engines []string, rows []benchRow) string {
	var s strings.Builder
	s.WriteString("| figure | " + strings.Join(engines, " | ") + " | target |\n|")
	for range len(engines) + 2 {
		s.WriteString(" --- |")
	}
	s.WriteString("\n")
	for _, r := range rows {
		s.WriteString("| " + r.figure + " |")
		for _, e := range engines {
			v := r.cells[e]
			if v == "" {
				v = "—" // not measured: its subtest failed or was skipped
			}
			s.WriteString(" " + v + " |")
		}
		s.WriteString(" " + r.target + " |\n")
	}
	return s.String()
}

// TestBenchTable measures the table of issue 12. See benchTableCounts for
// when it runs, and docs/performance.md for what each row means.
func TestBenchTable(t *testing.T) {
	c := benchTableCounts(t)
	scope := only("the table of docs/performance.md compares Docker and Podman, and their bare runs by their CLIs; "+
		"the kubernetes engine's figures are TestBenchKubernetes's (make bench-kube)", kindDocker, kindPodman)
	var names []string
	for _, e := range enginesFor(t, scope) {
		names = append(names, e.name)
	}
	tab := newBenchTable(c, names)
	started := time.Now()
	forEngines(t, scope, func(t *testing.T, e *engine) { benchEngine(t, e, c, tab) })
	t.Run("tokens", func(t *testing.T) { benchTokens(t, tab) })

	header := benchHeader(t, c, started)
	out := header + "\n\n" + tab.markdown() + "\n" + benchCallsIntro(c) + "\n\n" + tab.calls.markdown() +
		"\n" + stateIntro(c) + "\n\n" + tab.state.markdown()
	t.Logf("took %s\n%s", time.Since(started).Round(time.Second), out)
	fmt.Println("\n" + out)
	if path := os.Getenv("BRIDGE_BENCH_OUT"); path != "" {
		// A table with holes must not replace the documented one.
		if t.Failed() {
			t.Errorf("BRIDGE_BENCH_OUT=%s not written: a measurement failed", path)
			return
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}

// benchHeader is the line saying when and where the table was measured.
func benchHeader(t *testing.T, c benchCounts, started time.Time) string {
	t.Helper()
	var engines []string
	cgroup := "?"
	for _, e := range testSuite.engines {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		info, err := e.rt.Info(ctx)
		cancel()
		if err != nil {
			engines = append(engines, e.name+" (version unknown)")
			continue
		}
		engines = append(engines, fmt.Sprintf("%s %s (%s)", e.name, info.Version, info.OCIRuntime))
		cgroup = info.CgroupVersion
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("Measured %s by TestBenchTable (BRIDGE_BENCH_TABLE=%s) on %s/%s, %d CPUs (%s), Linux %s, cgroup v%s; %s.",
		started.UTC().Format("2006-01-02 15:04 MST"), c.mode, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel(),
		strings.TrimSpace(string(kernel)), cgroup, strings.Join(engines, ", "))
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown model"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown model"
}

// stopFunc stops a bridge a figure started and counts what it left.
type stopFunc func(t *testing.T, cs *mcp.ClientSession, pid int)

// benchEngine fills e's column. Each group of figures is a subtest with
// bridges of its own, stopped before the next group starts, so that no pool
// fills in the background of another figure.
func benchEngine(t *testing.T, e *engine, c benchCounts, tab *benchTable) {
	var poolOn, poolOff, bare time.Duration // p50s, for the ratios
	var bareP95, sustainP95, sustainBareP95 time.Duration
	var peaks [2]string // RSS under the burst: pool off, pool of 4
	bridges, left := 0, 0
	stop := func(t *testing.T, cs *mcp.ClientSession, pid int) {
		t.Helper()
		bridges++
		left += stopBridge(t, e, cs, pid)
	}

	t.Run("pool off", func(t *testing.T) {
		cs, pid, _, addr, policyFile := poolBridge(t, e, 0, "")
		benchRun(t, cs) // opens the engine: not measured
		awaitQuiet(t, addr, 0)
		time.Sleep(c.settle)
		tab.set(rowRSSIdle, e.name, "%s", mib(debugStats(t, addr).RSS))
		// Each call once the last one's container is removed, as calls an
		// agent makes a few seconds apart would find the bridge.
		lat := benchCalls(c.calls, func() { awaitQuiet(t, addr, 0) }, func() { benchRun(t, cs) })
		poolOff = percentile(lat, 50)
		tab.set(rowPoolOff, e.name, "%s", latencies(lat))

		// What a pooled container costs the host: MemAvailable with the
		// pool empty, then full. Host-wide: whatever else runs is in it.
		awaitQuiet(t, addr, 0)
		time.Sleep(c.settle)
		before := memAvailable(t)
		writePoolPolicy(t, e, policyFile, c.memPool, "") // hot-reloaded
		awaitQuiet(t, addr, c.memPool)
		time.Sleep(c.settle)
		after := memAvailable(t)
		tab.set(rowPoolMemory, e.name, "≈ %.0f MiB", float64(before-after)/float64(c.memPool)/(1<<20))
		stop(t, cs, pid)
	})

	t.Run("pool on", func(t *testing.T) {
		const size = 2
		cs, pid, _, addr, _ := poolBridge(t, e, size, "")
		benchRun(t, cs)
		awaitQuiet(t, addr, size)
		time.Sleep(c.settle)
		tab.set(rowRSSPool, e.name, "%s", mib(debugStats(t, addr).RSS))
		st0, _ := poolStats(t, addr)
		// As an agent calls: the pool has refilled between two calls.
		lat := benchCalls(c.calls, func() { awaitQuiet(t, addr, size) }, func() { benchRun(t, cs) })
		poolOn = percentile(lat, 50)
		cell := latencies(lat)
		// A cold run among them would make this figure a mix: say so.
		if st, _ := poolStats(t, addr); st.Hits-st0.Hits < int64(len(lat)) {
			cell += fmt.Sprintf(" (%d of %d warm)", st.Hits-st0.Hits, len(lat))
			t.Logf("pool: %+v before, %+v after", st0, st)
		}
		tab.set(rowPoolOn, e.name, "%s", cell)

		// The idle pool's cost: CPU over c.idle, RSS of its containers.
		awaitQuiet(t, addr, size)
		time.Sleep(c.settle)
		tab.set(rowIdlePool, e.name, "%s", idlePoolCost(t, e, pid, c.idle))
		stop(t, cs, pid)
	})

	t.Run("bare", func(t *testing.T) {
		lat := bareRuns(t, e, c)
		bare, bareP95 = percentile(lat, 50), percentile(lat, 95)
		tab.set(rowBare, e.name, "%s", latencies(lat))
	})
	if bare > 0 && poolOn > 0 {
		tab.set(rowPoolOnRatio, e.name, "%.2f×", float64(poolOn)/float64(bare))
	}
	if bare > 0 && poolOff > 0 {
		tab.set(rowPoolOffRatio, e.name, "%.2f×", float64(poolOff)/float64(bare))
	}

	t.Run("tool calls", func(t *testing.T) { benchUpstreamCalls(t, e, c, tab.calls, stop) })

	for i, size := range []int{0, 4} {
		t.Run(fmt.Sprintf("burst pool %d", size), func(t *testing.T) { peaks[i] = benchBurst(t, e, c, tab, size, stop) })
	}
	if peaks[0] != "" || peaks[1] != "" {
		tab.set(rowRSSBurst, e.name, "%s / %s", cmp.Or(peaks[0], "—"), cmp.Or(peaks[1], "—"))
	}

	stopHTTP := func(t *testing.T, pid int) {
		t.Helper()
		bridges++
		left += stopHTTPBridge(t, e, pid)
	}
	t.Run("sustained pool off", func(t *testing.T) { benchSustained(t, e, c, tab, 0, stopHTTP) })
	t.Run("sustained pool on", func(t *testing.T) { sustainP95 = benchSustained(t, e, c, tab, 2, stopHTTP) })
	t.Run("sustained bare", func(t *testing.T) { sustainBareP95 = benchSustainedBare(t, e, c, tab) })
	if sustainP95 > 0 && bareP95 > 0 && sustainBareP95 > 0 {
		tab.set(rowSustainRatio, e.name, "%.2f×; %.2f×", float64(sustainP95)/float64(bareP95), float64(sustainP95)/float64(sustainBareP95))
	}
	t.Run("observed", func(t *testing.T) {
		var cells []string
		for _, r := range benchObserve(t, e, c.observe) {
			cells = append(cells, fmt.Sprintf("%s / %s, paired %+.2f ms (%+.1f%%), bridge CPU %+.2f ms (%+.1f%%)", millis(r.off), millis(r.on),
				ms(r.diff), 100*float64(r.diff)/float64(r.off), ms(r.cpuOn-r.cpuOff), 100*float64(r.cpuOn-r.cpuOff)/float64(r.off)))
		}
		tab.set(rowObserve, e.name, "%s", strings.Join(cells, "; "))
	})
	t.Run("inputs", func(t *testing.T) { benchStateInputs(t, e, c, tab.state, stop) })
	t.Run("snapshots", func(t *testing.T) { benchStateSnapshots(t, e, c, tab.state, stop) })
	tab.set(rowLeft, e.name, "%d (%d bridges)", left, bridges)
}

// stopBridge ends a bridge serve started by connectStdioArgs as its client
// would (stdin closed; go-sdk waits for the process to exit) and returns how
// many of its containers are left, failing the test if any.
func stopBridge(t *testing.T, e *engine, cs *mcp.ClientSession, pid int) int {
	t.Helper()
	if err := cs.Close(); err != nil {
		t.Errorf("bridge serve (pid %d) did not exit cleanly on stdin EOF: %v", pid, err)
	}
	n := ownedBy(t, e, pid)
	if n != 0 {
		t.Errorf("%d container(s) of bridge serve (pid %d) left after it exited", n, pid)
	}
	return n
}

// benchRun makes one run_python("print(1)") call, which must print 1.
func benchRun(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	if out := mustRun(t, cs, "print(1)"); out != "1\n" {
		t.Fatalf("print(1) printed %q", out)
	}
}

// benchCalls times n calls of call, each after an untimed wait (nil: none).
func benchCalls(n int, wait, call func()) []time.Duration {
	lat := make([]time.Duration, 0, n)
	for range n {
		if wait != nil {
			wait()
		}
		start := time.Now()
		call()
		lat = append(lat, time.Since(start))
	}
	return lat
}

// awaitQuiet waits until the bridge's pool has size containers ready (or
// its target, when it grew under the runs before) and none starting or
// being removed.
func awaitQuiet(t *testing.T, addr string, size int) {
	t.Helper()
	awaitPool(t, addr, 2*time.Minute, fmt.Sprintf("%d ready, none starting or being removed", size), func(s sandbox.PoolStats) bool {
		return s.Ready == max(size, s.Target) && s.Starting == 0 && s.Removing == 0
	})
}

// debugStats reads the bridge's /debug/stats once.
func debugStats(t *testing.T, addr string) bridgeStats {
	t.Helper()
	w := &statsWatcher{url: "http://" + addr + "/debug/stats", client: &http.Client{Timeout: 5 * time.Second}}
	s, err := w.read()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// bareHardening are the flags of the bare engine run the bridge is
// compared with: the limits and hardening of the bridge's own containers
// (sandbox.DefaultLimits), the nofile and nproc limits included (without
// them the Podman CLI asks for its own, higher ones, which the service
// refuses).
func bareHardening() []string {
	return []string{
		"--network", "none", "--read-only", "--user", "65534:65534", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges", "--pids-limit", "128",
		"--memory", "512m", "--memory-swap", "512m", "--cpus", "1",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096",
		"--tmpfs", "/tmp:rw,noexec,nosuid,nodev,size=64m",
	}
}

// bareRuns times c.calls runs of `python3 -I -B -c pass` in the runner
// image with the engine's own CLI (`docker run --rm`, `podman run --rm`,
// Podman's as a client of the same service the bridge uses).
func bareRuns(t *testing.T, e *engine, c benchCounts) []time.Duration {
	t.Helper()
	bin := bareCLI(t, e)
	n := 0
	run := func() {
		n++
		if err := bareRun(e, bin, fmt.Sprintf("bridge-bench-bare-%d-%d", os.Getpid(), n)); err != nil {
			t.Fatal(err)
		}
	}
	run() // as the bridges' first call: not measured
	return benchCalls(c.calls, nil, run)
}

// bareCLI is the path of e's CLI, for the bare runs.
func bareCLI(t *testing.T, e *engine) string {
	t.Helper()
	bin, err := exec.LookPath(e.cand.Engine)
	if err != nil {
		if ci() {
			t.Fatalf("the %s CLI is not on PATH (%v): the bare run cannot be measured", e.cand.Engine, err)
		}
		t.Skipf("the %s CLI is not on PATH (%v): the bare run is not measured", e.cand.Engine, err)
	}
	return bin
}

// bareRun runs `python3 -I -B -c pass` in the runner image with e's CLI
// bin, in a container named name (so that a run cut short can still be
// removed).
func bareRun(e *engine, bin, name string) error {
	args := slices.Concat([]string{"run", "--rm", "--name", name}, bareHardening(),
		[]string{imageName(), "python3", "-I", "-B", "-c", "pass"})
	env := append(os.Environ(), engineEnv(e)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		rm := exec.Command(bin, "rm", "-f", name)
		rm.Env = env
		_ = rm.Run()
		return fmt.Errorf("%s %s: %v\n%s", e.cand.Engine, strings.Join(args, " "), err, out)
	}
	return nil
}

// benchBigResult is the size of the big result, in bytes.
const benchBigResult = 4 << 20

// benchBurst submits c.burst run_python calls at once to a bridge with
// max_concurrent 4 and a queue for all of them, and a pool of size; it
// fills that burst's row and returns the bridge's peak RSS meanwhile.
func benchBurst(t *testing.T, e *engine, c benchCounts, tab *benchTable, size int, stop stopFunc) string {
	cs, pid, _, addr, _ := poolBridgeMax(t, e, size, 0, fmt.Sprintf("  max_concurrent: 4\n  queue: %d\n", c.burst))
	benchRun(t, cs)
	awaitQuiet(t, addr, size)
	st0, _ := poolStats(t, addr)
	w := watchStats(t, addr)
	w.reset()
	outcomes := make([]string, c.burst) // "" ok, "busy", else what went wrong
	lat := make([]time.Duration, c.burst)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c.burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			outcomes[i] = burstCall(cs)
			lat[i] = time.Since(began)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	peak, werr := w.window()
	st, _ := poolStats(t, addr)
	stop(t, cs, pid)

	busy, errs := 0, 0
	for i, o := range outcomes {
		switch o {
		case "":
		case "busy": // a documented answer; none is expected with this queue
			busy++
		default:
			errs++
			t.Errorf("burst call %d: %s", i, o)
		}
	}
	row, warm := rowBurstOff, ""
	if size > 0 {
		row, warm = rowBurstPool, fmt.Sprintf("; %d warm, the pool's target %d after", st.Hits-st0.Hits, st.Target)
	}
	tab.set(row, e.name, "%.1f s, %.1f runs/s; %s%s; %d errors, %d busy", wall.Seconds(), float64(c.burst)/wall.Seconds(), latencies(lat), warm, errs, busy)
	if werr != nil {
		t.Errorf("reading the bridge's stats under the burst: %v", werr)
		return ""
	}
	return mib(peak.RSS)
}

// burstCall makes one run_python("print(1)") call and says how it went:
// "" for 1 printed, "busy", or what else happened.
func burstCall(cs *mcp.ClientSession) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "print(1)"}})
	if err != nil {
		return err.Error()
	}
	var out callOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Sprintf("structuredContent %s: %v", b, err)
	}
	switch {
	case out.Status == "busy":
		return "busy"
	case res.IsError || out.Status != "ok" || out.Stdout != "1\n":
		return fmt.Sprintf("status %q, stdout %q: %s", out.Status, out.Stdout, contentText(res))
	}
	return ""
}

// benchTokens fills the token row: the bridge's tools/list result against
// the three npm reference servers' (as startUpstreams runs them), each
// counted as TestToolsListTokenBudget counts the bridge's.
func benchTokens(t *testing.T, tab *benchTable) {
	if len(testSuite.engines) == 0 {
		t.Skip("no engine under test")
	}
	npm := npmPeers(t)
	bridge := toolsListTokens(t, npm, testSuite.engines[0], toolsListTokenBudget)
	b, err := os.ReadFile(startUpstreams(t).config)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	sum, tools := 0, 0
	for _, name := range []string{"everything", "filesystem", "memory"} {
		s, ok := cfg.MCPServers[name]
		if !ok {
			t.Fatalf("startUpstreams has no %s server any more", name)
		}
		var env []string
		for k, v := range s.Env {
			env = append(env, k+"="+v)
		}
		n, k := serverToolsListTokens(t, npm, s.Command, s.Args, env)
		t.Logf("%s: %d tools, %d tokens", name, k, n)
		sum, tools = sum+n, tools+k
	}
	for _, e := range tab.engines {
		tab.set(rowTokens, e, "%d vs %s (%d tools): %.1f%%", bridge, grouped(int64(sum)), tools, 100*float64(bridge)/float64(sum))
	}
}

// serverToolsListTokens counts the o200k_base tokens of a stdio MCP
// server's raw tools/list results (every page) and its tools.
func serverToolsListTokens(t *testing.T, npm, command string, args, env []string) (tokens, tools int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, command, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	tr := &captureTransport{Transport: &mcp.CommandTransport{Command: cmd}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bridge-integration-test", Version: "0"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting to %s %v: %v\nstderr:\n%s", command, args, err, stderr.String())
	}
	defer cs.Close()
	params := &mcp.ListToolsParams{}
	for {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			t.Fatalf("tools/list of %v: %v\nstderr:\n%s", args, err, stderr.String())
		}
		tools += len(res.Tools)
		tokens += countTokens(t, npm, tr.result("tools/list"))
		if res.NextCursor == "" {
			return tokens, tools
		}
		params.Cursor = res.NextCursor
	}
}

// percentile is the p-th percentile of d, by nearest rank.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[max(0, int(math.Ceil(float64(p)/100*float64(len(s))))-1)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func latencies(d []time.Duration) string {
	return fmt.Sprintf("p50 %s, p95 %s, p99 %s", millis(percentile(d, 50)), millis(percentile(d, 95)), millis(percentile(d, 99)))
}

func millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 10 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// perCallRate is a per-call time and the calls a second it makes.
func perCallRate(d time.Duration) string {
	return fmt.Sprintf("%.0f µs/call, %s calls/s", float64(d)/float64(time.Microsecond), grouped(int64(math.Round(float64(time.Second)/float64(d)))))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// grouped writes n with thousands separators.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// memAvailable is the host's MemAvailable, in bytes: the median of five
// readings 200 ms apart, against the noise of whatever else runs.
func memAvailable(t *testing.T) int64 {
	t.Helper()
	var v []float64
	for i := range 5 {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		v = append(v, float64(memAvailableOnce(t)))
	}
	return int64(median(v))
}

func memAvailableOnce(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no MemAvailable in /proc/meminfo:\n%s", b)
	return 0
}

// benchCallsIntro is the line above the tool-call table.
func benchCallsIntro(c benchCounts) string {
	return fmt.Sprintf("Tool calls, by upstream: %d calls in a row and %d at once from the sandbox (timed by the code), "+
		"and the same from a go-sdk client straight to the same server (direct), medians of %d; the bridge's figure is "+
		"the median of the run's `tool_calls[].duration_ms` (whole) and of the bridge's own part of each call, the "+
		"upstream's taken out (its `/debug/stats`).", c.toolCalls, c.toolCalls, c.repeats)
}
