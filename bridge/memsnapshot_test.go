package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/snapshots"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// memInstances is Instances on an engine that checkpoints: its sessions
// ("k=v" sets k, "?k" prints it) pack a fixed /tmp and save their memory
// as a file of their variables; Restore starts one from such a file.
type memInstances struct {
	mu         sync.Mutex
	tag        string // what CheckpointTag and MemoryTag say
	noParks    bool   // MemoryTag says ErrNoParks
	saveErr    error  // what SaveMemory fails with
	memBytes   int    // the size of the checkpoint SaveMemory writes besides vars.json
	noResume   bool   // SaveMemory writes the checkpoint, and the session cannot go on
	restoreErr error  // what Restore fails with
	restored   []string
	archives   []string // each instance's first Exec: its archive input, "" without one
}

var (
	_ memoryRestorer      = (*memInstances)(nil)
	_ sandbox.MemorySaver = (*memInstance)(nil)
	_ sandbox.Packer      = (*memInstance)(nil)
)

func (m *memInstances) Acquire(context.Context, sandbox.Limits, string) (sandbox.Instance, error) {
	return &memInstance{m: m, vars: map[string]string{}}, nil
}

func (m *memInstances) CheckpointTag(context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tag, nil
}

func (m *memInstances) Restore(_ context.Context, _ sandbox.Limits, _, dir string) (sandbox.Instance, error) {
	if m.restoreErr != nil {
		return nil, m.restoreErr
	}
	b, err := os.ReadFile(filepath.Join(dir, "vars.json"))
	if err != nil {
		return nil, err
	}
	i := &memInstance{m: m, execs: 1}
	if err := json.Unmarshal(b, &i.vars); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.restored = append(m.restored, dir)
	m.mu.Unlock()
	return i, nil
}

type memInstance struct {
	m      *memInstances
	mu     sync.Mutex
	vars   map[string]string
	execs  int
	lost   bool
	closed bool
}

func (i *memInstance) Exec(_ context.Context, x sandbox.ExecRequest) (sandbox.Result, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.execs == 0 {
		got := ""
		if len(x.Inputs) > 0 && x.Inputs[0].Archive {
			rc, err := x.Inputs[0].Open()
			if err != nil {
				return sandbox.Result{}, err
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			got = string(b)
		}
		i.m.mu.Lock()
		i.m.archives = append(i.m.archives, got)
		i.m.mu.Unlock()
	}
	i.execs++
	var out strings.Builder
	for _, line := range strings.Split(x.Code, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			i.vars[k] = v
		} else if k, ok := strings.CutPrefix(line, "?"); ok {
			out.WriteString(i.vars[k] + "\n")
		}
	}
	return sandbox.Result{RunID: x.RunID, Status: sandbox.StatusOK, Stdout: out.String()}, nil
}

func (i *memInstance) Pack(_ context.Context, w io.Writer, _ int64) (int64, error) {
	n, err := io.WriteString(w, "TAR OF /tmp")
	return int64(n), err
}

func (i *memInstance) MemoryTag(context.Context) (string, error) {
	i.m.mu.Lock()
	defer i.m.mu.Unlock()
	if i.m.noParks {
		return "", sandbox.ErrNoParks
	}
	return i.m.tag, nil
}

func (i *memInstance) SaveMemory(_ context.Context, dir string) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.m.saveErr != nil {
		i.lost = true // a failed save ends the session
		return i.m.saveErr
	}
	b, _ := json.Marshal(i.vars)
	if i.m.memBytes > 0 {
		if err := os.WriteFile(filepath.Join(dir, "pages.img"), make([]byte, i.m.memBytes), 0o600); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "vars.json"), b, 0o600); err != nil {
		return err
	}
	if i.m.noResume {
		i.lost = true
		return &sandbox.ResumeError{Err: errors.New("the restored runner did not connect within 30s")}
	}
	return nil
}

func (i *memInstance) Kept() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return !i.lost && !i.closed
}

func (i *memInstance) Closed() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.closed
}

func (i *memInstance) Close(context.Context) error {
	i.mu.Lock()
	i.closed = true
	i.mu.Unlock()
	return nil
}

// filesOnly is Instances that cannot restore memory (an engine without
// CheckpointTag and Restore).
type filesOnly struct{ Instances }

// memServer is a server with sessions and snapshots on instances, and
// its store.
func memServer(t *testing.T, instances Instances, snaps *snapshots.Store) *Server {
	t.Helper()
	pol := policy.Default()
	pol.Sessions.Enabled = true
	store, err := policy.NewStore(pol, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newServer(t, Options{Policy: store, Snapshots: snaps, Instances: instances})
}

func memStore(t *testing.T) *snapshots.Store {
	t.Helper()
	return memStoreOf(t, 0)
}

// memStoreOf is memStore keeping at most maxBytes (0: the default).
func memStoreOf(t *testing.T, maxBytes int64) *snapshots.Store {
	t.Helper()
	snaps, err := snapshots.Open(snapshots.Options{Dir: filepath.Join(t.TempDir(), "snaps"), MaxBytes: maxBytes, SweepEvery: -1, WaitHeld: 3 * time.Second, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snaps.Close() })
	return snaps
}

// A session whose sandbox can be checkpointed is saved whole, and a
// restore where the tag is the same starts the next session from its
// memory, not its files.
func TestMemorySnapshotSavedAndRestored(t *testing.T) {
	m := &memInstances{tag: "fake 1"}
	snaps := memStore(t)
	cs := connect(t, memServer(t, m, snaps), nil)
	res, out := call(t, cs, map[string]any{"session": "s1", "code": "x=41", "snapshot": "m"})
	sn := out.Snapshot
	if res.IsError || sn == nil || !sn.Saved || sn.Kind != snapshots.KindMemory || sn.MemoryBytes == 0 || !strings.Contains(sn.Note, "memory and files") {
		t.Fatalf("the snapshot: %+v %q", sn, text(res))
	}
	e, rc, err := snaps.Get("test", "m")
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if e.Kind != snapshots.KindMemory || e.Extra[memoryTagKey] != "fake 1" || e.Extra["session"] != "s1" {
		t.Fatalf("the stored entry: %+v", e)
	}

	res, out = call(t, cs, map[string]any{"session": "s2", "code": "?x", "restore": "m"})
	if res.IsError || out.Stdout != "41\n" {
		t.Fatalf("the restored session: %q", text(res))
	}
	if r := out.Restored; r == nil || r.Kind != snapshots.KindMemory || r.Note != memoryNote || r.Bytes != e.Size+e.MemoryBytes {
		t.Fatalf("restored: %+v", out.Restored)
	}
	if len(m.restored) != 1 || filepath.Base(m.restored[0]) != "memory" {
		t.Fatalf("Restore was given %q, want the snapshot's memory folder", m.restored)
	}
	if len(m.archives) != 1 {
		t.Fatalf("%d instances acquired, want only the saved session's (the restored one came from Restore)", len(m.archives))
	}
}

// A memory snapshot restored where it cannot be, whole: its files come
// back, and the result says why not its memory.
func TestMemorySnapshotRestoredAsFiles(t *testing.T) {
	tests := []struct {
		name  string
		under func(m *memInstances) Instances
		why   string
	}{
		{"another tag", func(m *memInstances) Instances { m.tag = "fake 2"; return m }, "it was saved by fake 1, and this bridge runs fake 2"},
		{"no restorer", func(m *memInstances) Instances { return filesOnly{m} }, "this bridge cannot restore memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &memInstances{tag: "fake 1"}
			snaps := memStore(t)
			res, out := call(t, connect(t, memServer(t, m, snaps), nil), map[string]any{"session": "s1", "code": "x=41", "snapshot": "m"})
			if res.IsError || out.Snapshot == nil || out.Snapshot.Kind != snapshots.KindMemory {
				t.Fatalf("the snapshot: %+v %q", out.Snapshot, text(res))
			}
			cs := connect(t, memServer(t, tt.under(m), snaps), nil)
			res, out = call(t, cs, map[string]any{"session": "s2", "code": "?x", "restore": "m"})
			if res.IsError || out.Stdout != "\n" {
				t.Fatalf("the restored session: %q", text(res))
			}
			r := out.Restored
			if r == nil || r.Kind != snapshots.KindFiles || !strings.Contains(r.Note, "only the session's /tmp files came back") || !strings.Contains(r.Note, tt.why) {
				t.Fatalf("restored: %+v; want files and a note saying %q", r, tt.why)
			}
			if len(m.restored) != 0 || len(m.archives) != 2 || m.archives[1] != "TAR OF /tmp" {
				t.Fatalf("restored from memory %q; the archives given %q", m.restored, m.archives)
			}
		})
	}
}

// A session out of spare parks is saved as files, saying why; a save of
// its memory that fails saves nothing and leaves the store clean.
func TestMemorySnapshotFilesOrNothing(t *testing.T) {
	m := &memInstances{tag: "fake 1", noParks: true}
	snaps := memStore(t)
	cs := connect(t, memServer(t, m, snaps), nil)
	res, out := call(t, cs, map[string]any{"session": "s1", "code": "x=1", "snapshot": "f"})
	sn := out.Snapshot
	if res.IsError || sn == nil || !sn.Saved || sn.Kind != snapshots.KindFiles || sn.MemoryBytes != 0 || !strings.Contains(sn.Note, "saved and restored as often") {
		t.Fatalf("the snapshot without parks: %+v", sn)
	}

	m.noParks, m.saveErr = false, errors.New("checkpoint failed: disk full")
	res, out = call(t, cs, map[string]any{"session": "s2", "code": "x=1", "snapshot": "g"})
	sn = out.Snapshot
	if res.IsError || sn == nil || sn.Saved || !strings.Contains(sn.Note, "not saved: checkpoint failed: disk full") {
		t.Fatalf("the snapshot whose save failed: %+v %q", sn, text(res))
	}
	if out.SessionEnded == "" {
		t.Errorf("the session lives on after its save failed: %q", text(res))
	}
	es, err := snaps.List("test")
	if err != nil || len(es) != 1 || es[0].Label != "f" {
		t.Fatalf("snapshots %+v, %v; want only f", es, err)
	}
	// Nothing of g is left on disk: only f's files, and the store's lock.
	var left []string
	fFiles := 0
	_ = filepath.WalkDir(snaps.Dir(), func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil || d.IsDir() || p == filepath.Join(snaps.Dir(), ".lock"):
		case strings.Contains(p, string(filepath.Separator)+"f"+string(filepath.Separator)):
			fFiles++
		default:
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 0 || fFiles == 0 {
		t.Fatalf("files left by the failed save: %q (%d of f)", left, fFiles)
	}
}

// A call that restores a memory snapshot and saves one of the same label
// does not wait for itself: the snapshot is let go of once its sandbox
// was restored.
func TestMemorySnapshotRestoreAndSaveSameLabel(t *testing.T) {
	m := &memInstances{tag: "fake 1"}
	snaps := memStore(t)
	cs := connect(t, memServer(t, m, snaps), nil)
	if res, out := call(t, cs, map[string]any{"session": "s1", "code": "x=1", "snapshot": "m"}); res.IsError || !out.Snapshot.Saved {
		t.Fatalf("the first save: %q", text(res))
	}
	start := time.Now()
	res, out := call(t, cs, map[string]any{"session": "s2", "code": "?x\nx=2", "restore": "m", "snapshot": "m"})
	if res.IsError || out.Stdout != "1\n" || out.Restored == nil || out.Restored.Kind != snapshots.KindMemory {
		t.Fatalf("the restore: %+v %q", out.Restored, text(res))
	}
	if sn := out.Snapshot; sn == nil || !sn.Saved || sn.Kind != snapshots.KindMemory {
		t.Fatalf("the save over the restored snapshot: %+v", sn)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the call took %s: it waited for the snapshot it held", d)
	}
	res, out = call(t, cs, map[string]any{"session": "s3", "code": "?x", "restore": "m"})
	if res.IsError || out.Stdout != "2\n" {
		t.Fatalf("the second restore: %q", text(res))
	}
}

// A session whose memory would put the snapshot over the store's bound is
// saved as files only, and the note says why; the session goes on.
func TestMemorySnapshotOverTheBoundIsFiles(t *testing.T) {
	m := &memInstances{tag: "fake 1", memBytes: 2 << 20}
	snaps := memStoreOf(t, 1<<20)
	cs := connect(t, memServer(t, m, snaps), nil)
	res, out := call(t, cs, map[string]any{"session": "s", "code": "x=1", "snapshot": "big"})
	sn := out.Snapshot
	if res.IsError || sn == nil || !sn.Saved || sn.Kind != snapshots.KindFiles || sn.MemoryBytes != 0 ||
		!strings.Contains(sn.Note, "with its memory it was over snapshots.max_bytes") {
		t.Fatalf("the snapshot over the bound with its memory: %+v", sn)
	}
	if _, out := call(t, cs, map[string]any{"session": "s", "code": "?x"}); out.Stdout != "1\n" {
		t.Fatalf("the session after: %+v", out)
	}
	es, err := snaps.List("test")
	if err != nil || len(es) != 1 || es[0].Kind != snapshots.KindFiles || es[0].MemoryBytes != 0 {
		t.Fatalf("snapshots %+v, %v", es, err)
	}
}

// A checkpoint written whole is kept when the session could not go on
// from it: the session ends, and the note says to restore it.
func TestMemorySnapshotSavedButNotResumed(t *testing.T) {
	m := &memInstances{tag: "fake 1", noResume: true}
	snaps := memStore(t)
	cs := connect(t, memServer(t, m, snaps), nil)
	res, out := call(t, cs, map[string]any{"session": "s", "code": "x=1", "snapshot": "m"})
	sn := out.Snapshot
	if res.IsError || sn == nil || !sn.Saved || sn.Kind != snapshots.KindMemory || !strings.Contains(sn.Note, `could not go on from it`) ||
		!strings.Contains(sn.Note, `restore "m" to go on`) || out.SessionEnded == "" {
		t.Fatalf("a save whose session could not go on: %+v, ended %q", sn, out.SessionEnded)
	}
	m.noResume = false
	if _, out := call(t, cs, map[string]any{"session": "t", "restore": "m", "code": "?x"}); out.Stdout != "1\n" || out.Restored == nil || out.Restored.Kind != snapshots.KindMemory {
		t.Fatalf("its restore: %+v", out)
	}
}

// A memory snapshot whose restore fails (its checkpoint no longer fits the
// sandbox's limits, say) is restored as files, and the note says why.
func TestMemorySnapshotRestoreFailsToFiles(t *testing.T) {
	m := &memInstances{tag: "fake 1"}
	snaps := memStore(t)
	cs := connect(t, memServer(t, m, snaps), nil)
	if _, out := call(t, cs, map[string]any{"session": "s", "code": "x=1", "snapshot": "m"}); out.Snapshot == nil || out.Snapshot.Kind != snapshots.KindMemory {
		t.Fatalf("save: %+v", out.Snapshot)
	}
	m.restoreErr = errors.New("restore: the checkpoint needs more memory than the sandbox's limit")
	res, out := call(t, cs, map[string]any{"session": "t", "restore": "m", "code": "?x"})
	if res.IsError || out.Stdout != "\n" || out.Restored == nil || out.Restored.Kind != snapshots.KindFiles ||
		!strings.Contains(out.Restored.Note, "restoring its memory failed: restore: the checkpoint needs more memory") {
		t.Fatalf("a failed memory restore: %q %+v", out.Stdout, out.Restored)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if last := m.archives[len(m.archives)-1]; last != "TAR OF /tmp" {
		t.Fatalf("the new session's archive input: %q, want the snapshot's files", last)
	}
}
