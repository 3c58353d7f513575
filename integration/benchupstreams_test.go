package integration

// The tool-call table of `make bench` (issue 22): tool calls from the
// sandbox to the MCP servers people run (three Node servers from npm, a
// Python server on the standard library, and the Go test upstream), each
// beside the same calls from a go-sdk client straight to the same server,
// in the same run. Nothing here asserts a timing; a call that fails, or a
// result of the wrong size, fails the test.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// benchCall is one tool call of the table.
type benchCall struct {
	server, tool string
	args         map[string]any
}

// benchUpstream is one row group of the table: a server and the calls
// made to it.
type benchUpstream struct {
	label   string                    // as the table names it
	servers map[string]map[string]any // its servers config entries, by name
	call    benchCall                 // made in a row and at once
	big     *benchCall                // a result of about 4 MiB; nil: the server has no such tool
}

// benchUpstreams are the servers of the table, with their files under dir.
func benchUpstreams(t *testing.T, dir string) []benchUpstream {
	t.Helper()
	npm := npmPeers(t)
	node := func(pkg string, args ...string) map[string]any {
		return map[string]any{"command": "node", "args": append([]string{filepath.Join(npm, "@modelcontextprotocol", pkg, "dist", "index.js")}, args...)}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		if ci() {
			t.Fatalf("python3 is not on PATH (%v): the Python upstream cannot be measured (make setup installs Debian's python3)", err)
		}
		t.Skipf("python3 is not on PATH (%v)", err)
	}

	// server-filesystem answers read_text_file with the text twice (as
	// content and as structuredContent): a 2 MiB file is a 4 MiB result.
	root := filepath.Join(dir, "files")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	writeFile(t, filepath.Join(root, "small.txt"), "a line of text\n")
	writeFile(t, filepath.Join(root, "big.txt"), strings.Repeat("0123456789abcdef\n", (2<<20)/17+1)[:2<<20])

	// server-memory reads its whole file at each call; read_graph answers
	// with the graph twice (indented text, and structuredContent): 64
	// entities of one 32 KiB observation each make about 4 MiB.
	memSmall, memBig := filepath.Join(dir, "memory-small.jsonl"), filepath.Join(dir, "memory-big.jsonl")
	var small, big strings.Builder
	for i := range 8 {
		fmt.Fprintf(&small, `{"type":"entity","name":"bench-%d","entityType":"bench","observations":["entity %d of the benchmark"]}`+"\n", i, i)
	}
	obs := strings.Repeat("x", 32<<10)
	for i := range 64 {
		fmt.Fprintf(&big, `{"type":"entity","name":"big-%d","entityType":"bench","observations":[%q]}`+"\n", i, obs)
	}
	writeFile(t, memSmall, small.String())
	writeFile(t, memBig, big.String())

	memory := func(file string) map[string]any {
		m := node("server-memory")
		m["env"] = map[string]string{"MEMORY_FILE_PATH": file}
		return m
	}
	return []benchUpstream{
		{
			label:   "Go test upstream (stdio)",
			servers: map[string]map[string]any{"misbehave": {"command": self, "env": map[string]string{upstreamEnv: "1"}}},
			call:    benchCall{"misbehave", "echo", map[string]any{"message": "x"}},
			big:     &benchCall{"misbehave", "big", map[string]any{"bytes": benchBigResult}},
		},
		{
			label:   "server-everything (Node)",
			servers: map[string]map[string]any{"everything": node("server-everything", "stdio")},
			call:    benchCall{"everything", "echo", map[string]any{"message": "x"}},
		},
		{
			label:   "server-filesystem (Node)",
			servers: map[string]map[string]any{"filesystem": node("server-filesystem", root)},
			call:    benchCall{"filesystem", "read_text_file", map[string]any{"path": filepath.Join(root, "small.txt")}},
			big:     &benchCall{"filesystem", "read_text_file", map[string]any{"path": filepath.Join(root, "big.txt")}},
		},
		{
			label:   "server-memory (Node)",
			servers: map[string]map[string]any{"memory": memory(memSmall), "memory_big": memory(memBig)},
			call:    benchCall{"memory", "search_nodes", map[string]any{"query": "bench"}},
			big:     &benchCall{"memory_big", "read_graph", map[string]any{}},
		},
		{
			label:   "Python, standard library only (stdio)",
			servers: map[string]map[string]any{"python": {"command": python, "args": []string{filepath.Join(repoRoot(), "integration", "pyupstream", "server.py")}}},
			call:    benchCall{"python", "echo", map[string]any{"message": "x"}},
			big:     &benchCall{"python", "big", map[string]any{"bytes": benchBigResult}},
		},
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// upstreamRow is one line of the tool-call table: an upstream on an engine.
type upstreamRow struct {
	upstream, engine string
	cells            [numUpstreamCols]string
	seq, gather      time.Duration // the sandbox's per call, for the ratios
}

// The columns of the tool-call table, after the upstream and the engine.
const (
	colSeq = iota
	colSeqDirect
	colSeqRatio
	colBridge
	colGather
	colGatherDirect
	colGatherRatio
	colBig
	colBigDirect
	colRSS
	numUpstreamCols
)

var upstreamColumns = [numUpstreamCols]string{
	colSeq:          "in a row: sandbox",
	colSeqDirect:    "direct",
	colSeqRatio:     "sandbox / direct (target ≤ 1.5×)",
	colBridge:       "the bridge's figure per call: whole / its own part (target ≤ 100 µs)",
	colGather:       "at once: sandbox",
	colGatherDirect: "direct",
	colGatherRatio:  "sandbox / direct throughput (target ≥ 1×)",
	colBig:          "~4 MiB result: sandbox",
	colBigDirect:    "direct",
	colRSS:          "bridge RSS: at start / peak",
}

// upstreamTable is the tool-call table being filled.
type upstreamTable struct{ rows []upstreamRow }

func (u *upstreamTable) markdown() string {
	var s strings.Builder
	s.WriteString("| upstream | engine |")
	for _, c := range upstreamColumns {
		s.WriteString(" " + c + " |")
	}
	s.WriteString("\n|")
	for range numUpstreamCols + 2 {
		s.WriteString(" --- |")
	}
	s.WriteString("\n")
	for _, r := range u.rows {
		s.WriteString("| " + r.upstream + " | " + r.engine + " |")
		for _, v := range r.cells {
			if v == "" {
				v = "—"
			}
			s.WriteString(" " + v + " |")
		}
		s.WriteString("\n")
	}
	return s.String()
}

// benchUpstreamCalls fills e's rows of the tool-call table: for each
// upstream, one bridge serve (no pool: nothing else runs while the code
// times) and one go-sdk client straight to the same server.
func benchUpstreamCalls(t *testing.T, e *engine, c benchCounts, tab *upstreamTable, stop stopFunc) {
	for _, u := range benchUpstreams(t, t.TempDir()) {
		t.Run(u.label, func(t *testing.T) {
			row := upstreamRow{upstream: u.label, engine: e.name}
			sandboxUpstreamCalls(t, e, c, u, &row, stop)
			directUpstreamCalls(t, c, u, &row)
			tab.rows = append(tab.rows, row)
		})
	}
}

// sandboxUpstreamCalls times u's calls from the sandbox, through a bridge
// serve of its own, by the code itself.
func sandboxUpstreamCalls(t *testing.T, e *engine, c benchCounts, u benchUpstream, row *upstreamRow, stop stopFunc) {
	dir := t.TempDir()
	servers := filepath.Join(dir, "servers.json")
	cfg := map[string]any{}
	for name, entry := range u.servers {
		cfg[name] = entry
	}
	writeServers(t, servers, cfg)
	policyFile := filepath.Join(dir, "policy.yaml")
	writePoolPolicy(t, e, policyFile, 0, "")
	addr := freeLoopbackAddr(t)
	cs, pid, _ := connectStdioArgs(t, e, nil, "--servers-config", servers, "--policy", policyFile, "--debug-addr", addr)
	defer stop(t, cs, pid)
	w := watchStats(t, addr)
	idle := debugStats(t, addr).RSS
	w.reset()
	defer func() {
		peak, err := w.window()
		if err != nil {
			t.Errorf("polling the bridge's stats: %v", err)
			return
		}
		row.cells[colRSS] = fmt.Sprintf("%s / %s", mib(idle), mib(peak.RSS))
	}()

	// run runs code, which prints one number a line (microseconds), and
	// returns them with the durations of the run's tool_calls trace.
	run := func(code string) (printed, traced []float64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, out := callRunPython(t, ctx, cs, code, nil)
		if res.IsError || out.Status != "ok" {
			t.Fatalf("status %q: %s\ncode:\n%s", out.Status, contentText(res), code)
		}
		for _, line := range strings.Fields(out.Stdout) {
			v, err := strconv.ParseFloat(line, 64)
			if err != nil {
				t.Fatalf("the code printed %q, not a number", line)
			}
			printed = append(printed, v)
		}
		var trace struct {
			Calls []struct {
				DurationMS float64 `json:"duration_ms"`
				Error      string  `json:"error"`
			} `json:"tool_calls"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &trace); err != nil {
			t.Fatal(err)
		}
		for _, tc := range trace.Calls {
			if tc.Error != "" {
				t.Fatalf("a tool call failed: %s", tc.Error)
			}
			traced = append(traced, tc.DurationMS*1000)
		}
		return printed, traced
	}

	var seqs, traced []float64
	for range c.repeats {
		p, tr := run(upstreamCallCode(u.call, "seq", c.toolCalls))
		seqs, traced = append(seqs, p...), append(traced, tr...)
	}
	// Only the calls in a row are in the bridge's window now.
	st := debugStats(t, addr).ToolCalls
	if st == nil || st.Calls == 0 {
		t.Fatalf("the bridge's /debug/stats has no tool_calls after %d runs of calls", c.repeats)
	}
	row.seq = usDuration(median(seqs))
	row.cells[colSeq] = perCallRate(row.seq)
	row.cells[colBridge] = fmt.Sprintf("%s / %s", micros(median(traced)), micros(st.BridgeP50))

	var gathers []float64
	for range c.repeats {
		p, _ := run(upstreamCallCode(u.call, "gather", c.toolCalls))
		gathers = append(gathers, p...)
	}
	row.gather = usDuration(median(gathers))
	row.cells[colGather] = perCallRate(row.gather)

	if u.big != nil {
		p, _ := run(bigCallCode(*u.big, c.repeats))
		size := int(p[0])
		row.cells[colBig] = bigRateOf(usDuration(median(p[1:])), size)
	}
}

// upstreamCallCode is run_python code that makes call n times, in a row
// (mode seq) or at once (gather), after one call not timed, and prints
// the time per call in microseconds.
func upstreamCallCode(call benchCall, mode string, n int) string {
	loop := map[string]string{
		"seq": `for i in range(N):
    mcp_tools.call(S, T, A)`,
		"gather": `await asyncio.gather(*(mcp_tools.acall(S, T, A) for i in range(N)))`,
	}[mode]
	return strings.ReplaceAll(pythonCallHeader(call)+`mcp_tools.call(S, T, A)
t = time.perf_counter()
`+loop+`
print((time.perf_counter() - t) / N * 1e6)`, "N", strconv.Itoa(n))
}

// bigCallCode is run_python code that prints the size of call's result as
// JSON (what the relay carries), then the time of each of n calls.
func bigCallCode(call benchCall, n int) string {
	return pythonCallHeader(call) + fmt.Sprintf(`print(len(json.dumps(mcp_tools.call_raw(S, T, A))))
for i in range(%d):
    t = time.perf_counter()
    mcp_tools.call_raw(S, T, A)
    print((time.perf_counter() - t) * 1e6)`, n)
}

func pythonCallHeader(call benchCall) string {
	args, err := json.Marshal(call.args)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("import asyncio, json, time, mcp_tools\nS, T, A = %q, %q, json.loads(%q)\n", call.server, call.tool, args)
}

// directUpstreamCalls makes u's calls from a go-sdk client straight to the
// server, as the sandbox's were made: medians of c.repeats.
func directUpstreamCalls(t *testing.T, c benchCounts, u benchUpstream, row *upstreamRow) {
	connect := func(server string) *mcp.ClientSession {
		t.Helper()
		entry := u.servers[server]
		cmd := exec.Command(entry["command"].(string))
		if args, ok := entry["args"].([]string); ok {
			cmd.Args = append(cmd.Args, args...)
		}
		cmd.Env = os.Environ()
		if env, ok := entry["env"].(map[string]string); ok {
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
			Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connecting to %s: %v", server, err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession, bc benchCall) (*mcp.CallToolResult, error) {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: bc.tool, Arguments: bc.args})
		if err == nil && res.IsError {
			err = fmt.Errorf("%s: %s", bc.tool, contentText(res))
		}
		return res, err
	}
	cs := connect(u.call.server)
	if _, err := call(cs, u.call); err != nil {
		t.Fatal(err)
	}
	var seqs, concs []float64
	for range c.repeats {
		start := time.Now()
		for range c.toolCalls {
			if _, err := call(cs, u.call); err != nil {
				t.Fatal(err)
			}
		}
		seqs = append(seqs, float64(time.Since(start))/float64(c.toolCalls))

		var wg sync.WaitGroup
		errs := make([]error, c.toolCalls)
		start = time.Now()
		for i := range c.toolCalls {
			wg.Go(func() { _, errs[i] = call(cs, u.call) })
		}
		wg.Wait()
		concs = append(concs, float64(time.Since(start))/float64(c.toolCalls))
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	seq, conc := time.Duration(median(seqs)), time.Duration(median(concs))
	row.cells[colSeqDirect] = perCallRate(seq)
	row.cells[colGatherDirect] = perCallRate(conc)
	if row.seq > 0 {
		row.cells[colSeqRatio] = fmt.Sprintf("%.2f×", float64(row.seq)/float64(seq))
	}
	if row.gather > 0 {
		row.cells[colGatherRatio] = fmt.Sprintf("%.2f×", float64(conc)/float64(row.gather))
	}

	if u.big == nil {
		row.cells[colBig], row.cells[colBigDirect] = "no such tool", "no such tool"
		return
	}
	bcs := cs
	if u.big.server != u.call.server {
		bcs = connect(u.big.server)
	}
	var bigs []float64
	size := 0
	for range c.repeats {
		start := time.Now()
		res, err := call(bcs, *u.big)
		bigs = append(bigs, float64(time.Since(start)))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(res)
		size = len(js)
	}
	if size < 3<<20 {
		t.Fatalf("%s/%s: a result of %d bytes, want about 4 MiB", u.big.server, u.big.tool, size)
	}
	row.cells[colBigDirect] = bigRateOf(time.Duration(median(bigs)), size)
}

// usDuration is a number of microseconds as a Duration.
func usDuration(us float64) time.Duration { return time.Duration(us * float64(time.Microsecond)) }

// micros is a number of microseconds, written as the table writes them.
func micros(us float64) string {
	if us >= 10_000 {
		return millis(usDuration(us))
	}
	return fmt.Sprintf("%.0f µs", us)
}

// bigRateOf is the time of a result of size bytes and its throughput.
func bigRateOf(d time.Duration, size int) string {
	return fmt.Sprintf("%s, %.0f MiB/s (%.1f MiB)", millis(d), float64(size)/(1<<20)/d.Seconds(), float64(size)/(1<<20))
}
