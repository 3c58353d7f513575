package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestBenchMemorySnapshots measures memory snapshots on the runsc engine
// (gVisor): the snapshot rows of the table of files in and snapshots
// (benchStateSnapshots), where each snapshot keeps the session whole.
// `make bench-gvisor` runs it (BRIDGE_BENCH_TABLE=full) and writes its
// table to BRIDGE_BENCH_OUT; docs/performance.md, "Memory snapshots
// (gVisor)", holds it.
func TestBenchMemorySnapshots(t *testing.T) {
	c := benchTableCounts(t)
	scope := only("memory snapshots need the runsc engine", kindRunsc)
	var names []string
	for _, e := range enginesFor(t, scope) {
		names = append(names, e.name)
	}
	tab := newStateTable(names)
	left, bridges := 0, 0
	started := time.Now()
	forEngines(t, scope, func(t *testing.T, e *engine) {
		stop := func(t *testing.T, cs *mcp.ClientSession, pid int) {
			t.Helper()
			bridges++
			left += stopBridge(t, e, cs, pid)
		}
		benchStateSnapshots(t, e, c, tab, stop)
	})
	rows := tab.rows[stSnapIdle : stRestoreDFTmp+1]
	rows[0].figure = "snapshot (memory and files) of an idle session (datascience image): the call with `snapshot` / the same call without; its size (files.tar and the checkpoint), bytes on disk; bridge RSS before / peak"
	rows[2].figure = "snapshot of a session holding a 200 MB DataFrame in memory (kept: the restored session has `df`)"
	out := fmt.Sprintf("%s\n\nMemory snapshots (issue 35) on the runsc engine, measured as the snapshot rows of the table above "+
		"(%d saves and restores each, the bridge's RSS from `/debug/stats`); containers left behind: %d (%d bridges).\n\n%s",
		strings.Replace(benchHeader(t, c, started), "TestBenchTable", "TestBenchMemorySnapshots", 1), c.state, left, bridges, figuresMarkdown(names, rows))
	t.Logf("%s", out)
	fmt.Println("\n" + out)
	if path := os.Getenv("BRIDGE_BENCH_OUT"); path != "" {
		if t.Failed() {
			t.Errorf("BRIDGE_BENCH_OUT=%s not written: a measurement failed", path)
			return
		}
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
