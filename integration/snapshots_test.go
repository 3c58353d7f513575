package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// snapshotsPolicy is a policy with sessions, snapshots in a folder of the
// test's (16 MiB a snapshot), the pool on as users run it, and a 64 MiB
// /tmp; it returns the policy's path and the snapshots folder.
func snapshotsPolicy(t *testing.T, e *engine) (string, string) {
	t.Helper()
	dir := t.TempDir()
	snaps := filepath.Join(dir, "snapshots")
	doc := "version: 1\n" + sandboxSection(e) + "  tmpfs_size: 64Mi\npool:\n  size: 1\nsessions:\n  enabled: true\n" +
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
	forEachEngine(t, func(t *testing.T, e *engine) {
		pol, snaps := snapshotsPolicy(t, e)
		cs := connectStdioLarge(t, e, "--policy", pol)
		name := func(s string) string { return s + "-" + strings.ToLower(e.name) }

		res, out := callWith(t, cs, map[string]any{"session": name("a"), "snapshot": "before", "code": `
import os
os.makedirs("/tmp/work", exist_ok=True)
open("/tmp/work/data.csv", "w").write("x,y\n1,2\n")
os.symlink("data.csv", "/tmp/work/latest")
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
