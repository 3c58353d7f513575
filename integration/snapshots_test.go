package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/snapshots"
)

// snapshotsPolicy is a policy with sessions, snapshots in a folder of the
// test's (16 MiB a snapshot), the pool on as users run it, and a 64 MiB
// /tmp; it returns the policy's path and the snapshots folder.
func snapshotsPolicy(t *testing.T, e *engine) (string, string) {
	t.Helper()
	dir := t.TempDir()
	snaps := filepath.Join(dir, "snapshots")
	doc := "version: 1\n" + sandboxSection(e) + "  tmpfs_size: 64Mi\npool:\n  size: 1\nsessions:\n  enabled: true\n  max: 16\n" +
		"snapshots:\n  dir: " + snaps + "\n  max_bytes: 16Mi\n  max_count: 3\n"
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p, snaps
}

// TestSnapshots: a session's /tmp is saved under a label, a new session
// starts from it (twice: a fork, each its own), also after the bridge
// restarted; what is not there, exists already, or is too large is
// refused with the session kept.
func TestSnapshots(t *testing.T) {
	forEngines(t, except("the runsc engine keeps memory too: TestMemorySnapshots", kindRunsc), func(t *testing.T, e *engine) {
		pol, snaps := snapshotsPolicy(t, e)
		cs := connectStdioLarge(t, e, "--policy", pol)
		name := func(s string) string { return s + "-" + strings.ToLower(e.name) }

		res, out := callWith(t, cs, map[string]any{"session": name("a"), "snapshot": "before", "code": `
import os
os.makedirs("/tmp/work", exist_ok=True)
open("/tmp/work/data.csv", "w").write("x,y\n1,2\n")
os.symlink("data.csv", "/tmp/work/latest")
open("/tmp/outputs/first-call.txt", "w").write("sent once")
x = 41
print("saved")
`, "inputs": []any{map[string]any{"path": "in.txt", "text": "input one"}}})
		snap := out.Snapshot
		if res.IsError || snap == nil || !snap.Saved || snap.Kind != "files" || snap.Bytes <= 0 {
			t.Fatalf("snapshot: %+v\n%s", snap, contentText(res))
		}
		if !strings.Contains(contentText(res), `[snapshot "before" saved`) {
			t.Errorf("the result's text does not say the snapshot was saved:\n%s", contentText(res))
		}
		// The session lives on after its snapshot.
		if _, out := callWith(t, cs, map[string]any{"session": name("a"), "code": "print(x + 1)"}); out.Stdout != "42\n" {
			t.Fatalf("the session after its snapshot: %q", out.Stdout)
		}

		check := `
import os
print(open("/tmp/work/data.csv").read().strip(), os.readlink("/tmp/work/latest"), open("/tmp/inputs/in.txt").read())
print("x" in globals())
`
		for _, fork := range []string{"b", "c"} {
			res, out := callWith(t, cs, map[string]any{"session": name(fork), "restore": "before", "code": check + "_ = open('/tmp/work/mine', 'w').write('" + fork + "')\n"})
			if res.IsError || out.Stdout != "x,y\n1,2 data.csv input one\nFalse\n" {
				t.Fatalf("restore into %s: %q\n%s", fork, out.Stdout, contentText(res))
			}
			if out.Restored == nil || out.Restored.Label != "before" || !strings.Contains(out.Restored.Note, "variables, imports and threads did not") {
				t.Errorf("restored: %+v", out.Restored)
			}
			if strings.Contains(contentText(res), "first-call.txt") {
				t.Errorf("the restored session handed back the snapshot's old output again:\n%s", contentText(res))
			}
		}
		// The two forks are each their own.
		_, out = callWith(t, cs, map[string]any{"session": name("b"), "code": "print(open('/tmp/work/mine').read())"})
		if out.Stdout != "b\n" {
			t.Errorf("fork b holds %q, want its own file", out.Stdout)
		}

		for _, c := range []struct {
			name string
			args map[string]any
			want string
		}{
			{"no such label", map[string]any{"session": name("d"), "restore": "never-saved", "code": "print(1)"}, `there is no snapshot "never-saved"`},
			{"existing session", map[string]any{"session": name("a"), "restore": "before", "code": "print(1)"}, "exists: restore starts a new session"},
			{"no session", map[string]any{"snapshot": "x", "code": "print(1)"}, "pass the session's name"},
			{"bad label", map[string]any{"session": name("a"), "snapshot": "../x", "code": "print(1)"}, "is not a snapshot label"},
		} {
			res, out := callWith(t, cs, map[string]any(c.args))
			if !res.IsError || out.Status != "invalid" || !strings.Contains(out.Message, c.want) {
				t.Errorf("%s: status %q, %q; want invalid saying %q", c.name, out.Status, out.Message, c.want)
			}
		}

		// A session whose /tmp is over the bound: not saved, and the
		// session goes on.
		res, out = callWith(t, cs, map[string]any{"session": name("a"), "snapshot": "huge", "code": "import os\n_ = open('/tmp/big', 'wb').write(os.urandom(40 << 20))"})
		if out.Snapshot == nil || out.Snapshot.Saved || !strings.Contains(out.Snapshot.Note, "over the 16Mi a snapshot may hold (snapshots.max_bytes)") {
			t.Fatalf("a snapshot over the bound: %+v\n%s", out.Snapshot, contentText(res))
		}
		if _, out := callWith(t, cs, map[string]any{"session": name("a"), "code": "print(x)"}); out.Stdout != "41\n" {
			t.Fatalf("the session after a refused snapshot: %q", out.Stdout)
		}

		// Another bridge on the same folder (a restart): the label is there.
		other := connectStdioLarge(t, e, "--policy", pol)
		res, out = callWith(t, other, map[string]any{"session": name("e"), "restore": "before", "code": "print(open('/tmp/work/data.csv').read().strip())"})
		if res.IsError || out.Stdout != "x,y\n1,2\n" {
			t.Fatalf("restore after a restart: %q\n%s", out.Stdout, contentText(res))
		}
		if entries, err := os.ReadDir(snaps); err != nil || len(entries) < 2 {
			t.Errorf("the snapshots folder holds %v (%v)", entries, err)
		}
	})
}

// snapshotLiar replaces the runner's pack (the code shares its process)
// with one that answers as the code likes; how is Python run in it.
const snapshotLiar = `
import _bridge_relay
relay = _bridge_relay.query.__self__
runner = type(relay).put.__globals__
mod = runner["load_lib"]("_runner_snapshot")
def lie(send, root, max_bytes):
%s
mod.pack = lie
print("armed")
`

// TestSnapshotsHostile: a session's code that lies to the pack, a session
// that fills its memory, and thousands of snapshots on disk: the bridge
// answers each call with a clear note, ends only the session that lied,
// keeps its memory, and leaves no container.
func TestSnapshotsHostile(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		pol, snaps := snapshotsPolicy(t, e)
		fillSnapshots(t, snaps, 2000)
		cs, pid, _ := connectStdioArgs(t, e, nil, "--policy", pol)
		defer func() {
			// Every pack is streamed to disk: the bridge holds no snapshot
			// whole, whatever the sessions did.
			peak := peakRSS(t, pid)
			t.Logf("bridge peak RSS over the hostile snapshots: %.1f MiB", float64(peak)/(1<<20))
			if peak > 150<<20 {
				t.Errorf("the bridge's peak RSS reached %.1f MiB", float64(peak)/(1<<20))
			}
		}()
		name := func(s string) string { return s + "-" + strings.ToLower(e.name) }
		for _, c := range []struct {
			name, lie, want string
		}{
			{"announces past the bound", `    send({"type": "file", "id": 1, "name": "tmp.tar", "size": max_bytes + 1})`, "over the"},
			{"another file", `    send({"type": "file", "id": 1, "name": "../../etc/passwd", "size": 1})`, "empty, . or .. part"},
			{"output instead", `    send({"type": "stdout", "data": "x" * 1000})`, "stdout frame while packing"},
			{"never ends", `    send({"type": "file", "id": 1, "name": "tmp.tar", "size": 10})
    import time
    time.sleep(600)`, "the runner did not finish the pack within 3s"},
		} {
			t.Run(c.name, func(t *testing.T) {
				sess := name("liar")
				res, out := callWith(t, cs, map[string]any{"session": sess, "reset": true, "code": fmt.Sprintf(snapshotLiar, c.lie)})
				if res.IsError || out.Stdout != "armed\n" {
					t.Fatalf("arming: %q\n%s", out.Stdout, contentText(res))
				}
				start := time.Now()
				res, out = callWith(t, cs, map[string]any{"session": sess, "snapshot": "lie", "timeout_seconds": 3, "code": "print('before')"})
				if out.Stdout != "before\n" || out.Snapshot == nil || out.Snapshot.Saved || !strings.Contains(out.Snapshot.Note, c.want) {
					t.Fatalf("a lying pack: %q %+v\n%s", out.Stdout, out.Snapshot, contentText(res))
				}
				if d := time.Since(start); d > 30*time.Second {
					t.Errorf("the lying pack held the call %s", d)
				}
				// The session that lied is over; its name starts a new one.
				_, out = callWith(t, cs, map[string]any{"session": sess, "code": "print('armed' in dir())"})
				if out.Stdout != "False\n" {
					t.Errorf("after a lying pack the session lives on: %q", out.Stdout)
				}
			})
		}

		t.Run("a session that fills its memory", func(t *testing.T) {
			// Past its limit: the session dies with the call, and there is
			// nothing to save. Only where the engine enforces the memory
			// limit (not rootless Podman on cgroup v1: docs/testing.md).
			if e.enforced {
				res, out := callWith(t, cs, map[string]any{"session": name("full"), "snapshot": "full", "timeout_seconds": 30, "code": `
hog = []
while True:
    hog.append(bytearray(16 << 20))
`})
				if out.Status != "memory" || out.Snapshot == nil || out.Snapshot.Saved || !strings.Contains(out.Snapshot.Note, "the session ended with the call") {
					t.Fatalf("a session past its memory: status %q, snapshot %+v\n%s", out.Status, out.Snapshot, contentText(res))
				}
			}
			// Near its limit (512Mi): the pack, streamed, still fits.
			res, out := callWith(t, cs, map[string]any{"session": name("near"), "snapshot": "near", "code": `
hog = [bytearray(16 << 20) for _ in range(24)]
for b in hog:
    b[::4096] = b"x" * len(b[::4096])
_ = open("/tmp/kept.txt", "w").write("still here")
`})
			if out.Snapshot == nil || !out.Snapshot.Saved {
				t.Fatalf("a session near its memory limit: status %q, snapshot %+v\n%s", out.Status, out.Snapshot, contentText(res))
			}
			res, out = callWith(t, cs, map[string]any{"session": name("near2"), "restore": "near", "code": "print(open('/tmp/kept.txt').read())"})
			if out.Stdout != "still here\n" {
				t.Fatalf("restoring the near-full session's files: %q\n%s", out.Stdout, contentText(res))
			}
		})

		t.Run("a 14 MiB /tmp, streamed", func(t *testing.T) {
			_, out := callWith(t, cs, map[string]any{"session": name("big"), "snapshot": "big", "code": "import os\n_ = open('/tmp/big.bin', 'wb').write(os.urandom(14 << 20))"})
			if out.Snapshot == nil || !out.Snapshot.Saved || out.Snapshot.Bytes < 14<<20 {
				t.Fatalf("a 14 MiB snapshot: %+v", out.Snapshot)
			}
			_, out = callWith(t, cs, map[string]any{"session": name("big2"), "restore": "big", "code": "import os\nprint(os.path.getsize('/tmp/big.bin'))"})
			if out.Stdout != "14680064\n" {
				t.Fatalf("restoring 14 MiB: %q (%s)", out.Stdout, out.Message)
			}
		})

		t.Run("restore among thousands", func(t *testing.T) {
			_, out := callWith(t, cs, map[string]any{"session": name("k"), "snapshot": "among", "code": "open('/tmp/x', 'w').write('x')"})
			if out.Snapshot == nil || !out.Snapshot.Saved {
				t.Fatalf("a snapshot among 2,000: %+v", out.Snapshot)
			}
			_, out = callWith(t, cs, map[string]any{"session": name("k2"), "restore": "among", "code": "print(open('/tmp/x').read())"})
			if out.Stdout != "x\n" {
				t.Fatalf("a restore among 2,000: %q (%s: %s)", out.Stdout, out.Status, out.Message)
			}
		})
	})
}

// fillSnapshots writes n small snapshots of other owners into the folder,
// as other clients' would be.
func fillSnapshots(t *testing.T, dir string, n int) {
	t.Helper()
	st, err := snapshots.Open(snapshots.Options{Dir: dir, MaxCount: 1000, SweepEvery: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range n {
		w, err := st.Create(fmt.Sprintf("client-%d", i%10), fmt.Sprintf("label-%d", i), snapshots.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 1024)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}
