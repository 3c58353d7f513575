package policy

import (
	"path/filepath"
	"reflect"
	"testing"
)

// A snapshot's record names whose it is, its label, kind and size, and
// the call, when one saved or restored it; fields left empty are left out.
func TestAuditSnapshot(t *testing.T) {
	s, _, records := auditStore(t, "version: 1\n")
	s.Audit().Snapshot(SnapshotRecord{Action: "saved", Owner: "local", Label: "before-join", Kind: "files", Bytes: 10240, RunID: "r1", Session: "s1",
		Reason: "replaced the snapshot of that label"})
	s.Audit().Snapshot(SnapshotRecord{Action: "expired", Owner: "alice", Label: "x", Kind: "files"})
	recs := records()
	if len(recs) != 2 {
		t.Fatalf("%d records: %v", len(recs), recs)
	}
	for _, r := range recs {
		delete(r, "time")
	}
	want := []map[string]any{
		{"audit": "bridge", "event": "snapshot", "action": "saved", "client": "local", "label": "before-join", "kind": "files", "bytes": 10240.0,
			"run_id": "r1", "session": "s1", "reason": "replaced the snapshot of that label"},
		{"audit": "bridge", "event": "snapshot", "action": "expired", "client": "alice", "label": "x", "kind": "files", "bytes": 0.0},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("records\n%v\nwant\n%v", recs, want)
	}
}

func TestSnapshotsFolder(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	if dir, err := (Snapshots{}).Folder(); err != nil || dir != filepath.Join(state, "bridge", "snapshots") {
		t.Errorf("under XDG_STATE_HOME: %q %v", dir, err)
	}
	t.Setenv("XDG_STATE_HOME", "relative")
	home := t.TempDir()
	t.Setenv("HOME", home)
	if dir, err := (Snapshots{}).Folder(); err != nil || dir != filepath.Join(home, ".local", "state", "bridge", "snapshots") {
		t.Errorf("under HOME: %q %v", dir, err)
	}
	if dir, err := (Snapshots{Dir: "/srv/snaps"}).Folder(); err != nil || dir != "/srv/snaps" {
		t.Errorf("Dir: %q %v", dir, err)
	}
	t.Setenv("HOME", "")
	if _, err := (Snapshots{}).Folder(); err == nil {
		t.Error("no home: no error")
	}
}
