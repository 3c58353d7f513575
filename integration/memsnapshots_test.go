package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// memoryState is Python that prints what of a session's memory is there:
// x, a module imported, a thread ticking, a file of /tmp.
const memoryState = `
import sys, threading
print(x, "json" in sys.modules, any(t.name == "ticker" and t.is_alive() for t in threading.enumerate()), open("/tmp/work/data.txt").read())
`

// TestMemorySnapshots: on the runsc engine (gVisor) a snapshot keeps the
// session whole: its variables, imports, a thread and /tmp come back in
// two sessions side by side (a fork), each its own, also in another
// bridge on the same folder; the saved session goes on where it was; a
// bridge whose engine cannot restore memory restores the files and says
// why; a session saved more often than its runner can come back is saved
// as files from then on.
func TestMemorySnapshots(t *testing.T) {
	forEngines(t, only("memory snapshots need the runsc engine (gVisor's checkpoint)", kindRunsc), func(t *testing.T, e *engine) {
		pol, snaps := snapshotsPolicy(t, e)
		cs := connectStdioLarge(t, e, "--policy", pol)

		res, out := callWith(t, cs, map[string]any{"session": "a", "snapshot": "mem", "code": `
import json, os, threading, time
os.makedirs("/tmp/work", exist_ok=True)
open("/tmp/work/data.txt", "w").write("kept")
ticks = 0
def tick():
    global ticks
    while True:
        ticks += 1
        time.sleep(0.05)
threading.Thread(target=tick, name="ticker", daemon=True).start()
x = 41
print("saved")
`})
		snap := out.Snapshot
		if res.IsError || snap == nil || !snap.Saved || snap.Kind != "memory" || snap.MemoryBytes <= 0 || !strings.Contains(snap.Note, "memory and files") {
			t.Fatalf("memory snapshot: %+v\n%s", snap, contentText(res))
		}
		t.Logf("memory snapshot: files %d B, memory %d B", snap.Bytes, snap.MemoryBytes)
		// help() says what a snapshot keeps here.
		if _, out := callWith(t, cs, map[string]any{"session": "a", "code": "import mcp_tools\nmcp_tools.help()"}); !strings.Contains(strings.Join(strings.Fields(out.Stdout), " "), "A snapshot keeps it all (gVisor)") {
			t.Errorf("help() in a session on runsc:\n%s", out.Stdout)
		}
		// The saved session goes on, in the sandbox restored in its place.
		if _, out := callWith(t, cs, map[string]any{"session": "a", "code": "x += 1\nprint(x, ticks > 0)" + memoryState}); out.Stdout != "42 True\n42 True True kept\n" {
			t.Fatalf("the session after its memory snapshot: %q (%s)", out.Stdout, out.Message)
		}

		for _, fork := range []string{"b", "c"} {
			res, out := callWith(t, cs, map[string]any{"session": fork, "restore": "mem", "code": memoryState + "y = " + fmt.Sprintf("%q", fork)})
			if res.IsError || out.Stdout != "41 True True kept\n" {
				t.Fatalf("restore into %s: %q\n%s", fork, out.Stdout, contentText(res))
			}
			if out.Restored == nil || out.Restored.Kind != "memory" || !strings.Contains(out.Restored.Note, "came back whole") {
				t.Errorf("restored into %s: %+v", fork, out.Restored)
			}
		}
		// Side by side, each its own.
		if _, out := callWith(t, cs, map[string]any{"session": "b", "code": "print(y, x)"}); out.Stdout != "b 41\n" {
			t.Errorf("fork b holds %q", out.Stdout)
		}
		if _, out := callWith(t, cs, map[string]any{"session": "c", "code": "print(y, x)"}); out.Stdout != "c 41\n" {
			t.Errorf("fork c holds %q", out.Stdout)
		}

		// Another bridge on the same folder (a restart) restores it whole.
		other := connectStdioLarge(t, e, "--policy", pol)
		if res, out := callWith(t, other, map[string]any{"session": "d", "restore": "mem", "code": memoryState}); res.IsError || out.Stdout != "41 True True kept\n" {
			t.Fatalf("restore by another bridge: %q\n%s", out.Stdout, contentText(res))
		}

		// A bridge on the engine that holds the images cannot restore the
		// memory: the files come back, and the result says why.
		files := *e
		files.name, files.cand.Engine = e.imagesEngine(), e.imagesEngine()
		plain := connectStdioLarge(t, &files, "--policy", policyIn(t, sandboxSection(&files)+"sessions:\n  enabled: true\nsnapshots:\n  dir: "+snaps+"\n  max_bytes: 16Mi\n"))
		res, out = callWith(t, plain, map[string]any{"session": "e", "restore": "mem", "code": "print('x' in globals(), open('/tmp/work/data.txt').read())"})
		if res.IsError || out.Stdout != "False kept\n" {
			t.Fatalf("restore of a memory snapshot on %s: %q\n%s", files.cand.Engine, out.Stdout, contentText(res))
		}
		if out.Restored == nil || out.Restored.Kind != "files" || !strings.Contains(out.Restored.Note, "cannot restore memory") {
			t.Errorf("restored on %s: %+v", files.cand.Engine, out.Restored)
		}

		// Session a was saved once; its runner comes back 15 more times
		// (16 spare connections), then only its files can be saved.
		const spares = 16
		for i := 2; i <= spares+1; i++ {
			_, out := callWith(t, cs, map[string]any{"session": "a", "snapshot": fmt.Sprintf("s%d", i%3), "code": "x += 1"})
			want := "memory"
			if i == spares+1 {
				want = "files"
			}
			if out.Snapshot == nil || !out.Snapshot.Saved || out.Snapshot.Kind != want {
				t.Fatalf("save %d of session a: %+v (%s)", i, out.Snapshot, out.Message)
			}
			if i == spares+1 && !strings.Contains(out.Snapshot.Note, "saved and restored as often as it can be") {
				t.Errorf("the files-only save does not say why: %q", out.Snapshot.Note)
			}
		}
		if _, out := callWith(t, cs, map[string]any{"session": "a", "code": "print(x)"}); out.Stdout != fmt.Sprint(42+spares, "\n") {
			t.Errorf("session a after %d saves: %q", spares+1, out.Stdout)
		}
	})
}

// TestMemorySnapshotsHostile: the code shares the runner's process, so it
// can hold on to the relay connection across a park. A session that keeps
// a copy of it is not saved (the runner's end does not close) and ends;
// a restored session that writes to the dead connection it kept from
// before gets an error, and its new connection works on; the bridge keeps
// serving others.
func TestMemorySnapshotsHostile(t *testing.T) {
	forEngines(t, only("memory snapshots need the runsc engine (gVisor's checkpoint)", kindRunsc), func(t *testing.T, e *engine) {
		pol, _ := snapshotsPolicy(t, e)
		cs, pid, _ := connectStdioArgs(t, e, nil, "--policy", pol)
		defer func() {
			// A checkpoint goes from runsc to disk: the bridge holds none.
			peak := peakRSS(t, pid)
			t.Logf("bridge peak RSS over the hostile memory snapshots: %.1f MiB", float64(peak)/(1<<20))
			if peak > 150<<20 {
				t.Errorf("the bridge's peak RSS reached %.1f MiB", float64(peak)/(1<<20))
			}
		}()

		// The old connection, kept as a Python object: closed by the park.
		res, out := callWith(t, cs, map[string]any{"session": "stale", "snapshot": "stale", "code": `
import _bridge_relay
old = _bridge_relay.query.__self__._sock
x = 1
`})
		if res.IsError || out.Snapshot == nil || out.Snapshot.Kind != "memory" {
			t.Fatalf("snapshot of a session holding its relay: %+v\n%s", out.Snapshot, contentText(res))
		}
		res, out = callWith(t, cs, map[string]any{"session": "stale2", "restore": "stale", "code": `
import mcp_tools
try:
    old.sendall(b"\x00\x00\x00\x10{\"type\":\"exit\"}")
    print("sent")
except OSError as e:
    print("refused", type(e).__name__)
try:
    mcp_tools.servers()
except mcp_tools.ToolsUnavailableError as e:
    print("the bridge answered:", "no upstream MCP servers" in str(e), x)
`})
		if res.IsError || out.Stdout != "refused OSError\nthe bridge answered: True 1\n" {
			t.Fatalf("a restored session writing to its dead relay: %q (%s)\n%s", out.Stdout, out.Message, contentText(res))
		}

		// A copy of the connection's descriptor keeps it open past the
		// park: the bridge does not checkpoint a sandbox still connected.
		res, out = callWith(t, cs, map[string]any{"session": "dup", "snapshot": "dup", "code": `
import os, _bridge_relay
keep = os.dup(_bridge_relay.query.__self__._sock.fileno())
`})
		if out.Snapshot == nil || out.Snapshot.Saved || !strings.Contains(out.Snapshot.Note, "runner went on after parked") || out.SessionEnded == "" {
			t.Fatalf("a session that kept a copy of its relay: %+v, session ended: %q\n%s", out.Snapshot, out.SessionEnded, contentText(res))
		}
		if _, out := callWith(t, cs, map[string]any{"session": "dup", "code": "print('keep' in globals())"}); out.Stdout != "False\n" {
			t.Errorf("the session after its failed save is not a new one: %q %q", out.Stdout, out.Message)
		}
		// Others are served all along.
		if _, out := callWith(t, cs, map[string]any{"session": "stale2", "code": "print(x + 1)"}); out.Stdout != "2\n" {
			t.Errorf("another session after the hostile ones: %q", out.Stdout)
		}
	})
}

// policyIn writes a policy of doc (its version line added) in a folder
// of the test's and returns its path.
func policyIn(t *testing.T, doc string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte("version: 1\n"+doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
