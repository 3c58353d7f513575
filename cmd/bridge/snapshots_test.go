package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/bridge/snapshots"
)

// snapshotsPolicyFile writes a policy whose snapshots folder is dir, with
// its audit in audit, and returns its path.
func snapshotsPolicyFile(t *testing.T, dir, audit string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte("version: 1\nsnapshots:\n  dir: "+dir+"\n  ttl: 1h\naudit:\n  file: "+audit+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// saveSnapshot saves data as owner's label, made at made.
func saveSnapshot(t *testing.T, dir, owner, label, data string, made time.Time) {
	t.Helper()
	st, err := snapshots.Open(snapshots.Options{Dir: dir, SweepEvery: -1, Now: func() time.Time { return made }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := st.Create(owner, label, snapshots.Meta{Engine: "docker"})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(data))
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotsCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	pol := snapshotsPolicyFile(t, dir, audit)
	// No folder yet: none, and none created.
	if _, errOut, code := runCLI(t, "snapshots", "list", "--policy", pol); code != 0 || !strings.Contains(errOut, "no snapshots in "+dir) {
		t.Errorf("list of none: %d %q", code, errOut)
	}
	if out, _, code := runCLI(t, "snapshots", "list", "--json", "--policy", pol); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("list --json of none: %d %q", code, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("list created the folder: %v", err)
	}
	if _, errOut, code := runCLI(t, "snapshots", "rm", "--policy", pol, "local", "a"); code != 1 || !strings.Contains(errOut, `no snapshot "a" of "local"`) {
		t.Errorf("rm of none: %d %q", code, errOut)
	}

	now := time.Now()
	saveSnapshot(t, dir, "local", "before-join", "tar bytes", now)
	saveSnapshot(t, dir, "alice@example.com", "what-if", strings.Repeat("x", 2048), now)
	saveSnapshot(t, dir, "local", "old", "x", now.Add(-2*time.Hour)) // past the policy's ttl
	out, errOut, code := runCLI(t, "snapshots", "list", "--policy", pol)
	if code != 0 || !strings.Contains(out, "OWNER") || !strings.Contains(out, "before-join") || !strings.Contains(out, "alice@example.com") ||
		!strings.Contains(out, "2 KiB") || strings.Contains(out, "old") || !strings.Contains(errOut, "2 snapshots in ") {
		t.Errorf("list: %d\n%s%s", code, out, errOut)
	}
	out, _, code = runCLI(t, "snapshots", "list", "--json", "--owner", "local", "--policy", pol)
	var list []snapshots.Entry
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 1 || list[0].Label != "before-join" ||
		list[0].Size != 9 || list[0].Engine != "docker" || !list[0].Expires.Equal(list[0].Created.Add(time.Hour)) {
		t.Errorf("list --json --owner local: %d %v\n%s", code, err, out)
	}

	// prune removes the expired one; rm removes one, of its owner only.
	if out, _, code := runCLI(t, "snapshots", "prune", "--policy", pol); code != 0 || !strings.Contains(out, "removed old of local") {
		t.Errorf("prune: %d %q", code, out)
	}
	if _, errOut, code := runCLI(t, "snapshots", "rm", "--policy", pol, "local", "what-if"); code != 1 || !strings.Contains(errOut, `no snapshot "what-if" of "local"`) {
		t.Errorf("rm of another owner's label: %d %q", code, errOut)
	}
	if out, _, code := runCLI(t, "snapshots", "rm", "--policy", pol, "alice@example.com", "what-if"); code != 0 || out != "removed what-if of alice@example.com\n" {
		t.Errorf("rm: %d %q", code, out)
	}
	out, _, _ = runCLI(t, "snapshots", "list", "--json", "--policy", pol)
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].Label != "before-join" {
		t.Errorf("after rm and prune: %v\n%s", err, out)
	}
	data, err := os.ReadFile(audit)
	if err != nil || !strings.Contains(string(data), `"action":"expired","client":"local","label":"old"`) ||
		!strings.Contains(string(data), `"action":"removed","client":"alice@example.com","label":"what-if","kind":"files","bytes":2048,"reason":"by the operator (bridge snapshots rm)"`) {
		t.Errorf("audit: %v\n%s", err, data)
	}

	// Mistakes.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshots"}, "want `bridge snapshots list`"},
		{[]string{"snapshots", "frob"}, `unknown subcommand "frob"`},
		{[]string{"snapshots", "rm", "--policy", pol, "local"}, "want OWNER and LABEL"},
		{[]string{"snapshots", "list", "--policy", pol, "x"}, "takes no arguments"},
		{[]string{"snapshots", "prune", "--policy", pol, "x"}, "takes no arguments"},
	} {
		if _, errOut, code := runCLI(t, c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: %d %q", c.args, code, errOut)
		}
	}
	if _, errOut, code := runCLI(t, "snapshots", "rm", "--policy", pol, "local", "../x"); code != 1 || !strings.Contains(errOut, "1 to 64 letters") {
		t.Errorf("rm of a bad label: %d %q", code, errOut)
	}
	if out, _, code := runCLI(t, "snapshots", "-h"); code != 0 || !strings.Contains(out, "bridge snapshots prune") {
		t.Errorf("-h: %d %q", code, out)
	}
}

// list shows a memory snapshot's kind and the bytes of its checkpoint.
func TestSnapshotsListMemory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "snapshots")
	pol := snapshotsPolicyFile(t, dir, filepath.Join(t.TempDir(), "audit.jsonl"))
	saveSnapshot(t, dir, "local", "cold", "tar", time.Now())
	st, err := snapshots.Open(snapshots.Options{Dir: dir, SweepEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Create("local", "warm", snapshots.Meta{Kind: snapshots.KindMemory, OCIRuntime: "runsc"})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := w.MemoryDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mem, "pages.img"), make([]byte, 3<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	st.Close()
	out, errOut, code := runCLI(t, "snapshots", "list", "--policy", pol)
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) < 3 || !strings.Contains(lines[0], "MEMORY") ||
		!strings.Contains(lines[1], "cold") || !strings.Contains(lines[1], " files ") || !strings.Contains(lines[1], " - ") ||
		!strings.Contains(lines[2], "warm") || !strings.Contains(lines[2], " memory ") || !strings.Contains(lines[2], "3 KiB") {
		t.Errorf("list: %d\n%s%s", code, out, errOut)
	}
	out, _, _ = runCLI(t, "snapshots", "list", "--json", "--policy", pol)
	if !strings.Contains(out, `"memory_bytes": 3072`) {
		t.Errorf("list --json:\n%s", out)
	}
}
