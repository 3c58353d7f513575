package integration

// The figures of issue 35 in `make bench`: files into a run (text by value,
// the bridge:// URI of an earlier run's file, and the same data read by the
// code through server-filesystem, the npm server) and sessions' snapshots
// (saved and restored, an idle session and one holding a 200 MB pandas
// DataFrame), each with the bridge's RSS meanwhile. BenchmarkInputs and
// BenchmarkSnapshots measure them for benchstat; TestBenchTable puts the
// same measurements, N runs each, in the third table of docs/performance.md.
// Nothing here asserts a timing; a call that does not do what its figure
// says fails.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stateBridge is a bridge serve of one figure, with the pool on as users
// run it, watched through its /debug/stats.
type stateBridge struct {
	cs  *mcp.ClientSession
	pid int
	w   *statsWatcher
}

// startStateBridge writes a policy (e's sandbox section, sandboxExtra in
// it, then rest) and starts bridge serve with it, --debug-addr and extra
// flags.
func startStateBridge(tb testing.TB, e *engine, sandboxExtra, rest string, extra ...string) *stateBridge {
	tb.Helper()
	pol := filepath.Join(tb.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\n"+sandboxSection(e)+sandboxExtra+rest), 0o644); err != nil {
		tb.Fatal(err)
	}
	addr := freeLoopbackAddr(tb)
	args, env := serveArgs(e)
	args = append(append(withoutSandboxFlags(args), "--policy", pol, "--debug-addr", addr), extra...)
	cmd := exec.Command(testSuite.bridgeBin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	// go-sdk's CommandTransport reads answers of up to 16 MiB (these are
	// small), writes requests of any size, and waits for the bridge to
	// exit on Close: stopBridge counts what it left after that.
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		tb.Fatalf("connecting over stdio: %v\nstderr:\n%s", err, stderr.String())
	}
	tb.Cleanup(func() {
		cs.Close()
		if tb.Failed() {
			tb.Logf("bridge serve stderr:\n%s", stderr.String())
		}
	})
	return &stateBridge{cs: cs, pid: cmd.Process.Pid, w: watchStats(tb, addr)}
}

// call makes one run_python call and returns how long it took; err is the
// client's (a request the bridge refused).
func (sb *stateBridge) call(tb testing.TB, args map[string]any) (time.Duration, *mcp.CallToolResult, callOutput, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := sb.cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: args})
	took := time.Since(start)
	var out callOutput
	if err == nil {
		b, _ := json.Marshal(res.StructuredContent)
		if jerr := json.Unmarshal(b, &out); jerr != nil {
			tb.Fatalf("structuredContent %s: %v", b, jerr)
		}
	}
	return took, res, out, err
}

// mustCall is call for a run that must end ok.
func (sb *stateBridge) mustCall(tb testing.TB, args map[string]any) (time.Duration, *mcp.CallToolResult, callOutput) {
	tb.Helper()
	took, res, out, err := sb.call(tb, args)
	if err != nil {
		tb.Fatalf("run_python: %v", err)
	}
	if res.IsError || out.Status != "ok" {
		tb.Fatalf("run_python: status %q\n%s", out.Status, contentText(res))
	}
	return took, res, out
}

// settle waits until the pool is full and nothing is being started or
// removed: each timed call finds the bridge as calls seconds apart do.
func (sb *stateBridge) settle(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := sb.w.read()
		if err == nil && s.Pool != nil && s.Pool.Ready == s.Pool.Target && s.Pool.Starting == 0 && s.Pool.Removing == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the pool did not settle within 2m: %+v (%v)", s.Pool, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rss is the bridge's RSS now.
func (sb *stateBridge) rss(tb testing.TB) int64 {
	tb.Helper()
	s, err := sb.w.read()
	if err != nil {
		tb.Fatal(err)
	}
	return s.RSS
}

// peak is the bridge's peak RSS since the watcher's last reset.
func (sb *stateBridge) peak(tb testing.TB) int64 {
	tb.Helper()
	s, err := sb.w.window()
	if err != nil {
		tb.Fatalf("polling the bridge's stats: %v", err)
	}
	return s.RSS
}

// Ways the code gets the data of a figure of files in.
const (
	inNone       = "none"       // no data: the same call reading nothing
	inText       = "text"       // inputs: [{path, text}], max_request_bytes raised to 64Mi
	inTextLimit  = "text-limit" // the same under the default max_request_bytes (4Mi)
	inURI        = "uri"        // inputs: [{path, uri}], a bridge:// URI an earlier run handed back
	inFilesystem = "filesystem" // mcp_tools.call("filesystem", "read_text_file", path=...)
)

// inputFigure is one row of files in: how, and how much.
type inputFigure struct {
	row  int
	how  string
	size int
}

// inputFigures are the table's figures of files in, in order.
func inputFigures() []inputFigure {
	return []inputFigure{
		{stNone, inNone, 0},
		{stText1, inText, 1 << 20}, {stURI1, inURI, 1 << 20}, {stFS1, inFilesystem, 1 << 20},
		{stText50, inText, 50 << 20}, {stTextLimit50, inTextLimit, 50 << 20}, {stURI50, inURI, 50 << 20}, {stFS50, inFilesystem, 50 << 20},
	}
}

// stateData is size bytes of CSV text, the same whichever way it goes in;
// stateDataCode writes the same bytes in the sandbox.
func stateData(size int) []byte {
	var b bytes.Buffer
	b.Grow(size + 64)
	for i := uint64(0); b.Len() < size; i++ {
		fmt.Fprintf(&b, "%09d,%010d,abcdefghijklmnopqrstuvwxyz\n", i, i*2654435761%4294967296)
	}
	return b.Bytes()[:size]
}

// stateDataCode is code that writes stateData(size) to path.
func stateDataCode(size int, path string) string {
	return fmt.Sprintf(`
parts, n, i = [], 0, 0
while n < %d:
    line = f"{i:09d},{i * 2654435761 %% 4294967296:010d},abcdefghijklmnopqrstuvwxyz\n"
    parts.append(line)
    n += len(line)
    i += 1
open(%q, "w").write("".join(parts)[:%d])
`, size, path, size)
}

// inputBench is a figure of files in, set up: its bridge and the call it
// times.
type inputBench struct {
	*stateBridge
	fig  inputFigure
	args map[string]any
	idle int64 // the bridge's RSS after its first call, before any data
}

// newInputBench starts a bridge for fig: artifacts by reference, inputs
// up to 64 MiB in a 256 MiB /tmp, the request bound raised (but for
// inTextLimit), and for inFilesystem server-filesystem on a folder holding
// the data. It makes the runs a figure needs first (a by-URI figure's file
// is written by an earlier run) and checks, untimed, that the code reads
// the very bytes of stateData.
func newInputBench(tb testing.TB, e *engine, fig inputFigure) *inputBench {
	tb.Helper()
	dir := tb.TempDir()
	data := stateData(fig.size)
	sandboxExtra := "  tmpfs_size: 256Mi\n"
	if fig.how != inTextLimit {
		sandboxExtra += "  max_request_bytes: 64Mi\n"
	}
	rest := "artifacts:\n  dir: " + filepath.Join(dir, "artifacts") + "\n  by_reference: all\n" +
		"inputs:\n  max_file_bytes: 64Mi\n  max_bytes: 64Mi\n"
	var extra []string
	read := "s = open('/tmp/inputs/data.csv').read()\n"
	if fig.how == inFilesystem {
		root := filepath.Join(dir, "files")
		if err := os.MkdirAll(root, 0o755); err != nil {
			tb.Fatal(err)
		}
		if r, err := filepath.EvalSymlinks(root); err == nil {
			root = r
		}
		if err := os.WriteFile(filepath.Join(root, "data.csv"), data, 0o644); err != nil {
			tb.Fatal(err)
		}
		servers := filepath.Join(dir, "servers.json")
		cfg, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"filesystem": map[string]any{
			"command": "node", "args": []string{filepath.Join(npmPeers(tb), "@modelcontextprotocol", "server-filesystem", "dist", "index.js"), root}}}})
		if err := os.WriteFile(servers, cfg, 0o644); err != nil {
			tb.Fatal(err)
		}
		extra = append(extra, "--servers-config", servers)
		read = fmt.Sprintf("import mcp_tools\ns = mcp_tools.call('filesystem', 'read_text_file', path=%q)['content']\n", filepath.Join(root, "data.csv"))
	}
	ib := &inputBench{stateBridge: startStateBridge(tb, e, sandboxExtra, rest, extra...), fig: fig}
	ib.mustCall(tb, map[string]any{"code": "pass"}) // opens the engine
	ib.settle(tb)
	ib.idle = ib.rss(tb)
	ib.args = map[string]any{"code": read + "print(len(s))"}
	switch fig.how {
	case inNone:
		ib.args["code"] = "s = ''\nprint(len(s))"
	case inText, inTextLimit:
		ib.args["inputs"] = []any{map[string]any{"path": "data.csv", "text": string(data)}}
	case inURI:
		_, res, _ := ib.mustCall(tb, map[string]any{"code": stateDataCode(fig.size, "/tmp/outputs/data.csv")})
		ib.args["inputs"] = []any{map[string]any{"path": "data.csv", "uri": artifactURI(tb, res)}}
	}
	if fig.how == inTextLimit || ib.overResult() {
		return ib // refused: nothing to check
	}
	check := map[string]any{}
	for k, v := range ib.args {
		check[k] = v
	}
	check["code"] = strings.Replace(ib.args["code"].(string), "print(len(s))", "import zlib\nprint(len(s), zlib.crc32(s.encode()))", 1)
	if _, _, out := ib.mustCall(tb, check); out.Stdout != fmt.Sprintf("%d %d\n", len(data), crc32.ChecksumIEEE(data)) {
		tb.Fatalf("%s: the code read %q, not the %d bytes of stateData", fig.how, out.Stdout, len(data))
	}
	return ib
}

// artifactURI is the bridge:// URI of a run's one file handed back by
// reference.
func artifactURI(tb testing.TB, res *mcp.CallToolResult) string {
	tb.Helper()
	var sc struct {
		Artifacts []artifactOut `json:"artifacts"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &sc); err != nil {
		tb.Fatal(err)
	}
	if len(sc.Artifacts) != 1 || !strings.HasPrefix(sc.Artifacts[0].URI, "bridge://runs/") {
		tb.Fatalf("want one file handed back by reference, got %+v", sc.Artifacts)
	}
	return sc.Artifacts[0].URI
}

// ready waits, untimed, until the figure's call finds the bridge as calls
// seconds apart do: the pool full, the upstream connected.
func (ib *inputBench) ready(tb testing.TB) {
	tb.Helper()
	if ib.overResult() {
		ib.reconnect(tb)
	}
	ib.settle(tb)
}

// run makes the figure's call once and returns its wall time and, for a
// figure that is refused, why.
func (ib *inputBench) run(tb testing.TB) (took time.Duration, refused string) {
	tb.Helper()
	took, res, out, err := ib.call(tb, ib.args)
	switch {
	case ib.fig.how == inTextLimit:
		if err == nil || !strings.Contains(err.Error(), "max_request_bytes") {
			tb.Fatalf("%d MiB by value under the default request bound: want a refusal naming sandbox.max_request_bytes, got %v", ib.fig.size>>20, err)
		}
		return took, "refused: " + err.Error()
	case err != nil:
		tb.Fatalf("run_python: %v", err)
	case ib.overResult():
		// Twice the file, as content and structuredContent: over
		// budgets.max_result_bytes, whose range ends at 8Mi; over 16 MiB,
		// also over the line go-sdk's stdio client reads from a server.
		text := contentText(res)
		if out.Status != "error" || !strings.Contains(text, "max_result_bytes") && !strings.Contains(text, "maximum line length") {
			tb.Fatalf("%d MiB through server-filesystem: want the tool call refused, got status %q\n%s", ib.fig.size>>20, out.Status, text)
		}
		return took, "refused: " + lastLine(text)
	case res.IsError || out.Status != "ok" || out.Stdout != strconv.Itoa(ib.fig.size)+"\n":
		tb.Fatalf("%s: status %q, stdout %q\n%s", ib.fig.how, out.Status, out.Stdout, contentText(res))
	}
	return took, ""
}

// overResult reports whether the figure's tool result is over the bounds:
// twice the file is over budgets.max_result_bytes (8Mi at most).
func (ib *inputBench) overResult() bool { return ib.fig.how == inFilesystem && ib.fig.size > 4<<20 }

// reconnect waits until the filesystem server answers a call again: an
// answer over 16 MiB (go-sdk's line bound) drops the bridge's connection
// to it, and it is started again on a later call, after a backoff.
func (ib *inputBench) reconnect(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ib.settle(tb)
		_, res, out, err := ib.call(tb, map[string]any{"code": "import mcp_tools\nmcp_tools.call('filesystem', 'list_allowed_directories')"})
		if err == nil && out.Status == "ok" {
			return
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("status %q: %s", out.Status, contentText(res))
			}
			tb.Fatalf("server-filesystem did not answer again within a minute: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// BenchmarkInputs measures a call whose code reads 1 MiB or 50 MiB of
// text: passed by value, by the URI of an earlier run's file, or read by
// the code through server-filesystem (Node); the figures over the bounds
// measure how soon the refusal comes. Each op is one call, the pool full
// and the upstream connected first (untimed); p50-ms is of the calls,
// rss-peak-MiB the bridge's peak.
func BenchmarkInputs(b *testing.B) {
	for _, e := range testSuite.engines {
		for _, fig := range inputFigures() {
			b.Run(fmt.Sprintf("%s/%s/%dMiB", e.name, fig.how, fig.size>>20), func(b *testing.B) {
				ib := newInputBench(b, e, fig)
				ib.settle(b)
				ib.w.reset()
				var lat []time.Duration
				for b.Loop() {
					b.StopTimer()
					ib.ready(b)
					b.StartTimer()
					took, _ := ib.run(b)
					lat = append(lat, took)
				}
				b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
				b.ReportMetric(float64(ib.peak(b))/(1<<20), "rss-peak-MiB")
			})
		}
	}
}

// Kinds of session a snapshot is measured of.
const (
	snapIdle     = "idle"      // a session that ran `pass`
	snapDFMemory = "df-memory" // one holding a 200 MB DataFrame in memory
	snapDFTmp    = "df-tmp"    // the same, the DataFrame also pickled to /tmp
)

// snapshotSetup is the code each kind's session runs first.
func snapshotSetup(kind string) string {
	df := `
import numpy as np, pandas as pd
df = pd.DataFrame(np.random.default_rng(0).random((1_000_000, 25)))
print(df.memory_usage(index=False).sum())
`
	switch kind {
	case snapDFMemory:
		return df
	case snapDFTmp:
		return df + "df.to_pickle('/tmp/df.pkl')\n"
	}
	return "print(0)"
}

// snapshotBench is a figure of snapshots, set up: a bridge on the
// datascience image with sessions and snapshots, and a session of its
// kind.
type snapshotBench struct {
	*stateBridge
	kind, snaps string
	n           int // sessions made, for new names
	// memory: the engine keeps the session whole (runsc); saves counts
	// those of session "s", which can be saved whole 16 times.
	memory bool
	saves  int
}

// newSnapshotBench starts a bridge for kind (2Gi of memory and a 512Mi
// /tmp a session, snapshots up to 2Gi) and its session "s".
func newSnapshotBench(tb testing.TB, e *engine, kind string) *snapshotBench {
	tb.Helper()
	snaps := filepath.Join(tb.TempDir(), "snapshots")
	sb := &snapshotBench{kind: kind, snaps: snaps, memory: e.kind() == kindRunsc, stateBridge: startStateBridge(tb, e,
		"  variant: datascience\n  memory: 2Gi\n  tmpfs_size: 512Mi\n",
		"sessions:\n  enabled: true\n  max: 8\nsnapshots:\n  dir: "+snaps+"\n  max_bytes: 2Gi\n")}
	sb.mustCall(tb, map[string]any{"code": "pass"}) // opens the engine
	sb.setup(tb)
	return sb
}

// setup starts session "s" anew, of the bench's kind.
func (sb *snapshotBench) setup(tb testing.TB) {
	tb.Helper()
	_, _, out := sb.mustCall(tb, map[string]any{"session": "s", "reset": true, "code": snapshotSetup(sb.kind), "timeout_seconds": 120})
	if sb.kind != snapIdle && out.Stdout != "200000000\n" {
		tb.Fatalf("the DataFrame holds %q bytes, want 200000000", out.Stdout)
	}
	sb.saves = 0
}

// snapshot makes the call of session "s" that saves it as label "L" (with)
// or the same call without, and returns its wall time and the snapshot's
// size (files.tar, and the memory's checkpoint on runsc).
func (sb *snapshotBench) snapshot(tb testing.TB, with bool) (time.Duration, int64) {
	tb.Helper()
	args := map[string]any{"session": "s", "code": "pass"}
	if with {
		if sb.memory && sb.saves == 16 {
			sb.setup(tb) // a session is saved whole 16 times at most
		}
		args["snapshot"] = "L"
		sb.saves++
	}
	took, res, out := sb.mustCall(tb, args)
	if !with {
		return took, 0
	}
	if out.Snapshot == nil || !out.Snapshot.Saved || out.Snapshot.Kind != sb.snapshotKind() {
		tb.Fatalf("snapshot of a %s session: %+v\n%s", sb.kind, out.Snapshot, contentText(res))
	}
	return took, out.Snapshot.Bytes + out.Snapshot.MemoryBytes
}

// snapshotKind is what a snapshot keeps on the bench's engine.
func (sb *snapshotBench) snapshotKind() string {
	if sb.memory {
		return "memory"
	}
	return "files"
}

// restore makes the first call of a new session, from label "L" (with) or
// not, and returns its wall time and the session's name, for end.
func (sb *snapshotBench) restore(tb testing.TB, with bool) (time.Duration, string) {
	tb.Helper()
	sb.n++
	name := fmt.Sprintf("r%d", sb.n)
	args := map[string]any{"session": name, "code": "import os\nprint(os.path.exists('/tmp/df.pkl'), 'df' in globals())"}
	if with {
		args["restore"] = "L"
	}
	took, res, out := sb.mustCall(tb, args)
	// Only a restore of the session that pickled it has the file; only a
	// restore of its memory has the DataFrame.
	want := fmt.Sprintf("%s %s\n", pyBool(with && sb.kind == snapDFTmp), pyBool(with && sb.memory && sb.kind != snapIdle))
	if out.Stdout != want {
		tb.Fatalf("restore %v of a %s session: /tmp/df.pkl there: %q, want %q\n%s", with, sb.kind, out.Stdout, want, contentText(res))
	}
	if with && (out.Restored == nil || out.Restored.Kind != sb.snapshotKind()) {
		tb.Fatalf("restored: %+v", out.Restored)
	}
	return took, name
}

// pyBool is b as Python prints it.
func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// end ends session name (an empty call with reset).
func (sb *snapshotBench) end(tb testing.TB, name string) {
	tb.Helper()
	sb.mustCall(tb, map[string]any{"session": name, "reset": true, "code": ""})
}

// onDisk is the bytes of the files under the snapshots folder (its lock
// file aside).
func (sb *snapshotBench) onDisk(tb testing.TB) int64 {
	tb.Helper()
	var n int64
	err := filepath.WalkDir(sb.snaps, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == ".lock" {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkSnapshots measures saving a session's files (the call with
// `snapshot` of a session that exists) and restoring them (the first call
// of a new session with `restore`), for an idle session and one holding a
// 200 MB DataFrame, in memory only or also pickled to /tmp (datascience
// image). snapshot-bytes is files.tar, rss-peak-MiB the bridge's peak.
func BenchmarkSnapshots(b *testing.B) {
	for _, e := range testSuite.engines {
		for _, kind := range []string{snapIdle, snapDFMemory, snapDFTmp} {
			b.Run(e.name+"/"+kind+"/snapshot", func(b *testing.B) {
				sb := newSnapshotBench(b, e, kind)
				sb.w.reset()
				var lat []time.Duration
				var size int64
				for b.Loop() {
					took, n := sb.snapshot(b, true)
					lat, size = append(lat, took), n
				}
				b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
				b.ReportMetric(float64(size), "snapshot-bytes")
				b.ReportMetric(float64(sb.peak(b))/(1<<20), "rss-peak-MiB")
			})
			b.Run(e.name+"/"+kind+"/restore", func(b *testing.B) {
				sb := newSnapshotBench(b, e, kind)
				sb.snapshot(b, true)
				sb.w.reset()
				var lat []time.Duration
				name := ""
				for b.Loop() {
					b.StopTimer()
					if name != "" {
						sb.end(b, name)
					}
					sb.settle(b)
					b.StartTimer()
					var took time.Duration
					took, name = sb.restore(b, true)
					lat = append(lat, took)
				}
				b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
				b.ReportMetric(float64(sb.peak(b))/(1<<20), "rss-peak-MiB")
			})
		}
	}
}

// The rows of the table of issue 35, in order.
const (
	stNone = iota
	stText1
	stURI1
	stFS1
	stText50
	stTextLimit50
	stURI50
	stFS50
	stSnapIdle
	stRestoreIdle
	stSnapDF
	stRestoreDF
	stSnapDFTmp
	stRestoreDFTmp
	stMemory
	numStateRows
)

// stateTable is the table of issue 35 being filled: one column per engine.
type stateTable struct {
	engines []string
	rows    [numStateRows]benchRow
}

func newStateTable(engines []string) *stateTable {
	s := &stateTable{engines: engines}
	def := func(row int, figure, target string) {
		s.rows[row] = benchRow{figure: figure, target: target, cells: map[string]string{}}
	}
	def(stNone, "a call whose code reads nothing (`s = ''`): p50, p90; the bridge's RSS idle / peak", "")
	def(stText1, "1 MiB of text by value (`inputs: [{path, text}]`), read by the code from `/tmp/inputs`", "")
	def(stURI1, "1 MiB by URI (`inputs: [{path, uri}]`: the `bridge://runs/...` file an earlier run handed back)", "")
	def(stFS1, "1 MiB read by the code through server-filesystem (Node): `mcp_tools.call(\"filesystem\", \"read_text_file\", path=...)`", "")
	def(stText50, "50 MiB by value, `sandbox.max_request_bytes` raised to 64Mi", "")
	def(stTextLimit50, "50 MiB by value, `sandbox.max_request_bytes` at its default (4Mi)", "refused")
	def(stURI50, "50 MiB by URI", "")
	def(stFS50, "50 MiB through server-filesystem (its answer, the text twice, about 100 MiB)", "refused: over `budgets.max_result_bytes` (at most 8Mi)")
	def(stSnapIdle, "snapshot (files) of an idle session (datascience image): the call with `snapshot` / the same call without; files.tar, bytes on disk; bridge RSS before / peak", "")
	def(stRestoreIdle, "restore of it: a new session's first call with `restore` / without; bridge RSS before / peak", "")
	def(stSnapDF, "snapshot of a session holding a 200 MB DataFrame in memory only (a files snapshot does not keep it)", "")
	def(stRestoreDF, "restore of it", "")
	def(stSnapDFTmp, "snapshot of that session with the DataFrame also in `/tmp` (`df.to_pickle`, 200 MB)", "RSS peak − before ≪ the snapshot (streamed)")
	def(stRestoreDFTmp, "restore of it", "RSS peak − before ≪ the snapshot (streamed)")
	def(stMemory, "memory snapshots: variables, imports, the DataFrame in memory", "")
	for _, e := range engines {
		s.rows[stMemory].cells[e] = "files only on this engine: the runsc engine's are `make bench-gvisor`'s (\"Memory snapshots (gVisor)\")"
	}
	return s
}

func (s *stateTable) set(row int, engine, format string, args ...any) {
	s.rows[row].cells[engine] = fmt.Sprintf(format, args...)
}

// stateIntro is the line above the table of issue 35.
func stateIntro(c benchCounts) string {
	return fmt.Sprintf("Files in and sessions' snapshots (issue 35): a `bridge serve` of its own for each figure, pool on (2), "+
		"%d calls each once the pool is full again, timed by the client (go-sdk over stdio: its encoding of the request "+
		"included), p50 and p90; the bridge's RSS (its `/debug/stats`, polled every 150 ms): for files in, after its first "+
		"call (`pass`) and its peak over the figure's calls; for snapshots, before the saves (or the restores) and its peak "+
		"during them. Inputs: `artifacts.dir` with `by_reference: all`, `inputs` up to 64Mi, a 256Mi `/tmp`. "+
		"Snapshots: the datascience image, 2Gi of memory and a 512Mi `/tmp` a session, `snapshots.max_bytes: 2Gi`.", c.state)
}

// p50p90 is the p50 and p90 of d.
func p50p90(d []time.Duration) string {
	return fmt.Sprintf("p50 %s, p90 %s", millis(percentile(d, 50)), millis(percentile(d, 90)))
}

// sizeOf is n bytes as the tables write sizes.
func sizeOf(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// benchStateInputs fills e's cells of the rows of files in: a bridge of
// its own for each figure, c.state calls.
func benchStateInputs(t *testing.T, e *engine, c benchCounts, tab *stateTable, stop stopFunc) {
	for _, fig := range inputFigures() {
		t.Run(fmt.Sprintf("%s %d MiB", fig.how, fig.size>>20), func(t *testing.T) {
			ib := newInputBench(t, e, fig)
			ib.settle(t)
			ib.w.reset()
			var lat []time.Duration
			refused, n := "", c.state
			if ib.overResult() {
				// Each drops the connection to the server, and the next
				// waits for it to start again (seconds): 3 are enough for a
				// refusal this steady.
				n = min(n, 3)
			}
			for range n {
				ib.ready(t)
				took, why := ib.run(t)
				lat, refused = append(lat, took), why
			}
			peak := ib.peak(t)
			stop(t, ib.cs, ib.pid)
			if refused != "" {
				t.Logf("%s", refused)
				refused = "refused (" + refusedKey(refused) + ") in "
			}
			if n != c.state {
				refused = fmt.Sprintf("%s%d calls: ", refused, n)
			}
			tab.set(fig.row, e.name, "%s%s; RSS %s / %s", refused, p50p90(lat), mib(ib.idle), mib(peak))
		})
	}
}

// refusedKey is the policy key a refusal names.
func refusedKey(msg string) string {
	switch {
	case strings.Contains(msg, "max_request_bytes"):
		return "`sandbox.max_request_bytes`"
	case strings.Contains(msg, "max_result_bytes"):
		return "`budgets.max_result_bytes`"
	case strings.Contains(msg, "maximum line length"):
		return "an answer over go-sdk's 16 MiB line: the connection to the server dropped"
	}
	return msg
}

// benchStateSnapshots fills e's cells of the rows of snapshots: a bridge
// of its own for each kind of session, c.state saves and restores, each
// beside the same call without.
func benchStateSnapshots(t *testing.T, e *engine, c benchCounts, tab *stateTable, stop stopFunc) {
	rows := map[string][2]int{snapIdle: {stSnapIdle, stRestoreIdle}, snapDFMemory: {stSnapDF, stRestoreDF}, snapDFTmp: {stSnapDFTmp, stRestoreDFTmp}}
	for _, kind := range []string{snapIdle, snapDFMemory, snapDFTmp} {
		t.Run("snapshot "+kind, func(t *testing.T) {
			sb := newSnapshotBench(t, e, kind)
			sb.settle(t)
			time.Sleep(c.settle)
			before := sb.rss(t)
			sb.w.reset()
			var with, without []time.Duration
			var size int64
			for range c.state {
				d, _ := sb.snapshot(t, false)
				without = append(without, d)
				d, size = sb.snapshot(t, true)
				with = append(with, d)
			}
			savePeak, disk := sb.peak(t), sb.onDisk(t)

			sb.settle(t)
			time.Sleep(c.settle)
			restoreBefore := sb.rss(t)
			sb.w.reset()
			var rWith, rWithout []time.Duration
			for range c.state {
				for _, w := range []bool{false, true} {
					sb.settle(t)
					d, name := sb.restore(t, w)
					sb.end(t, name)
					if w {
						rWith = append(rWith, d)
					} else {
						rWithout = append(rWithout, d)
					}
				}
			}
			restorePeak := sb.peak(t)
			stop(t, sb.cs, sb.pid)
			tab.set(rows[kind][0], e.name, "%s / %s; %s, %s on disk; RSS %s / %s", p50p90(with), p50p90(without),
				sizeOf(size), sizeOf(disk), mib(before), mib(savePeak))
			tab.set(rows[kind][1], e.name, "%s / %s; RSS %s / %s", p50p90(rWith), p50p90(rWithout), mib(restoreBefore), mib(restorePeak))
		})
	}
}
