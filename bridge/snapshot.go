package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/bridge/snapshots"
	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// SnapshotOutput is structuredContent.snapshot: what a call's snapshot
// argument saved, or why it did not.
type SnapshotOutput struct {
	Label string `json:"label"`
	Saved bool   `json:"saved"`
	Kind  string `json:"kind,omitempty"` // files or memory
	Bytes int64  `json:"bytes,omitempty"`
	// MemoryBytes is the size of its memory (a memory snapshot's).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Evicted are this client's older snapshots removed to make room.
	Evicted []string `json:"evicted,omitempty"`
	Note    string   `json:"note,omitempty"`
}

// RestoredOutput is structuredContent.restored: the snapshot a call's
// session started from, and what of it came back.
type RestoredOutput struct {
	Label string `json:"label"`
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
	Note  string `json:"note"`
}

// filesOnlyNote is what a restore of a files snapshot says came back.
const filesOnlyNote = "the session's /tmp files came back; its variables, imports and threads did not (the snapshot kept only its files: the note of the call that saved it said why)"

// snapshotsOn reports whether calls may save and restore sessions.
func (s *Server) snapshotsOn() bool {
	if s.opts.Snapshots == nil || s.opts.Policy == nil {
		return false
	}
	p := s.opts.Policy.Current().Policy
	return p.Sessions.Enabled && p.Snapshots.Enabled
}

// LocalPrincipal is the principal of a request no bearer token names:
// the one user of a stdio bridge, or of an HTTP bridge's own token.
const LocalPrincipal = "local"

// principal is who makes req: the owner of its sessions, snapshots and
// stored files.
func (s *Server) principal(req mcp.Request) string {
	p := ""
	if s.opts.Principal != nil {
		p = s.opts.Principal(req)
	} else if x := req.GetExtra(); x != nil && x.TokenInfo != nil {
		p = x.TokenInfo.UserID
	}
	if p == "" {
		return LocalPrincipal
	}
	return p
}

// parseLabels checks the snapshot and restore arguments of a call.
func (s *Server) parseLabels(in input, a *callArgs, sessions bool) error {
	if !sessions || !s.snapshotsOn() {
		return errors.New("snapshot and restore need sessions with snapshots, which this bridge's policy does not enable (sessions.enabled, snapshots.enabled)")
	}
	for _, f := range []struct {
		name string
		raw  *json.RawMessage
		dst  *string
	}{{"snapshot", in.Snapshot, &a.snapshot}, {"restore", in.Restore, &a.restore}} {
		if f.raw == nil || string(*f.raw) == "null" {
			continue
		}
		if err := json.Unmarshal(*f.raw, f.dst); err != nil {
			return fmt.Errorf("%s must be a string naming the snapshot, got %s", f.name, *f.raw)
		}
		if err := snapshots.CheckLabel(*f.dst); err != nil {
			return fmt.Errorf("%s %q is not a snapshot label: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", f.name, *f.dst)
		}
	}
	if a.session == "" {
		return errors.New("snapshot and restore are of a session: pass the session's name with them")
	}
	return nil
}

// memoryTagKey is the Meta.Extra key of a memory snapshot's
// [sandbox.Checkpointer.CheckpointTag]: where it can be restored.
const memoryTagKey = "memory_tag"

// memoryRestorer is [Instances] that can start a session from a memory
// snapshot: *[sandbox.Engine] on the runsc engine.
type memoryRestorer interface {
	CheckpointTag(ctx context.Context) (string, error)
	Restore(ctx context.Context, l sandbox.Limits, runID, dir string) (sandbox.Instance, error)
}

var _ memoryRestorer = (*sandbox.Engine)(nil)

// restoreFrom is [Instances] whose one Acquire restores a memory snapshot:
// the start of a session restored whole. When the restore fails (a bound
// the checkpoint no longer fits, a restore slower than the start's
// timeout), the session starts as any other, from plain, and failed says
// why: its files are restored then (aRestore.acquired).
type restoreFrom struct {
	r      memoryRestorer
	dir    string
	plain  Instances
	failed error
}

// Acquire restores the snapshot as the session's sandbox.
func (f *restoreFrom) Acquire(ctx context.Context, l sandbox.Limits, runID string) (sandbox.Instance, error) {
	inst, err := f.r.Restore(ctx, l, runID, f.dir)
	if err == nil || ctx.Err() != nil {
		return inst, err
	}
	f.failed = err
	return f.plain.Acquire(ctx, l, runID)
}

// aRestore is how a call's session starts from its snapshot: from its
// memory (under, with release to call once it started), or from its
// files (archive, put in /tmp before the first exec; files, the archive
// of a memory snapshot, for when its memory could not be restored).
type aRestore struct {
	archive *sandbox.InputFile
	files   *sandbox.InputFile
	under   *restoreFrom
	release func()
	out     *RestoredOutput
}

// acquired is called once the session's sandbox was got: it lets go of
// the snapshot, and when its memory could not be restored, puts its files
// first in inputs and says why in out.
func (p *aRestore) acquired(inputs *[]sandbox.InputFile) {
	p.release()
	if p.under.failed == nil {
		return
	}
	*inputs = append([]sandbox.InputFile{*p.files}, *inputs...)
	p.out.Kind, p.out.Bytes = snapshots.KindFiles, p.files.Size
	p.out.Note = "only the session's /tmp files came back, not its variables, imports and threads: restoring its memory failed: " + p.under.failed.Error()
}

// planRestore says how the call's new session starts from the snapshot
// a.restore: whole where it was saved whole and this engine can restore
// it, else from its files, saying why. It refuses a session that exists
// (a restore starts a new one) and a label the client has not saved.
func (s *Server) planRestore(ctx context.Context, req *mcp.CallToolRequest, a callArgs, key sessionKey) (aRestore, error) {
	if s.sessions.has(key) {
		return aRestore{}, fmt.Errorf("session %q exists: restore starts a new session from the snapshot; pass reset: true with it to end this one first, or name another session", a.session)
	}
	owner, store := s.principal(req), s.opts.Snapshots
	e, rc, err := store.Get(owner, a.restore)
	if err != nil {
		if errors.Is(err, snapshots.ErrNotFound) {
			return aRestore{}, fmt.Errorf("there is no snapshot %q to restore (a call with snapshot: %q saves one; an operator lists them with bridge snapshots list)", a.restore, a.restore)
		}
		return aRestore{}, fmt.Errorf("reading snapshot %q: %w", a.restore, err)
	}
	rc.Close()
	label := a.restore
	in := sandbox.InputFile{Path: relay.PackName, Size: e.Size, Archive: true, Open: func() (io.ReadCloser, error) {
		got, rc, err := store.Get(owner, label)
		if err == nil && got.Created != e.Created {
			rc.Close()
			return nil, fmt.Errorf("snapshot %q was saved again meanwhile", label)
		}
		return rc, err
	}}
	why := filesOnlyNote
	if e.Kind == snapshots.KindMemory {
		plan, whyNot := s.planMemory(ctx, owner, label, e)
		if whyNot == "" {
			plan.files = &in
			return plan, nil
		}
		why = "only the session's /tmp files came back, not its variables, imports and threads: " + whyNot
	}
	return aRestore{archive: &in, out: &RestoredOutput{Label: label, Kind: snapshots.KindFiles, Bytes: e.Size, Note: why}}, nil
}

// planMemory is the restore of memory snapshot e, or why it cannot be
// restored whole here.
func (s *Server) planMemory(ctx context.Context, owner, label string, e snapshots.Entry) (aRestore, string) {
	mr, ok := s.opts.Instances.(memoryRestorer)
	if !ok {
		return aRestore{}, "this bridge cannot restore memory"
	}
	tag, err := mr.CheckpointTag(ctx)
	switch {
	case errors.Is(err, sandbox.ErrNoCheckpoint):
		return aRestore{}, fmt.Sprintf("this bridge's engine (%s) cannot restore memory; only the runsc engine (gVisor) can", s.engineName())
	case err != nil:
		return aRestore{}, err.Error()
	case tag != e.Extra[memoryTagKey]:
		return aRestore{}, fmt.Sprintf("it was saved by %s, and this bridge runs %s", e.Extra[memoryTagKey], tag)
	}
	got, dir, release, err := s.opts.Snapshots.OpenMemory(owner, label)
	if err != nil {
		return aRestore{}, err.Error()
	}
	if got.Created != e.Created {
		release()
		return aRestore{}, "it was saved again meanwhile"
	}
	return aRestore{under: &restoreFrom{r: mr, dir: dir, plain: s.opts.Instances}, release: release,
		out: &RestoredOutput{Label: label, Kind: snapshots.KindMemory, Bytes: e.Size + e.MemoryBytes, Note: memoryNote}}, ""
}

// memoryNote is what a restore of a memory snapshot says came back.
const memoryNote = "the session came back whole (gVisor): its variables, imports, threads and /tmp files; a tool call a thread had under way did not"

// takeSnapshot saves the session of the call that just ran in inst under
// a.snapshot: its /tmp, packed by the runner, within snapshots.max_bytes;
// and where the engine can (gVisor), its memory too. A session whose
// memory and files are over the bound is saved as files only.
func (s *Server) takeSnapshot(ctx context.Context, req *mcp.CallToolRequest, r *aRun, a callArgs, inst sandbox.Instance) *SnapshotOutput {
	out := &SnapshotOutput{Label: a.snapshot}
	p, ok := inst.(sandbox.Packer)
	if !ok || !inst.Kept() {
		out.Note = "not saved: the session ended with the call"
		return out
	}
	// Packing and saving the memory get the call's timeout anew (packing
	// at most sandbox.PackTimeout): a runner that does not answer ends its
	// session.
	pctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	ms, filesOnly := memorySaver(pctx, inst)
	saved, n, err := s.saveSnapshot(pctx, req, r, a, p, ms)
	if ms != nil && errors.Is(err, snapshots.ErrTooLarge) && inst.Kept() {
		filesOnly = "with its memory it was over snapshots.max_bytes: " + err.Error()
		ms = nil
		saved, n, err = s.saveSnapshot(pctx, req, r, a, p, nil)
	}
	var resumeErr *sandbox.ResumeError
	if errors.As(err, &resumeErr) {
		// Saved whole, but the session is over: restore it to go on.
		out.Saved, out.Kind, out.Bytes, out.MemoryBytes = true, saved.Kind, n, saved.MemoryBytes
		out.Note = fmt.Sprintf("memory and files saved; %v: restore %q to go on", resumeErr, a.snapshot)
		return out
	}
	if err != nil {
		out.Note = "not saved: " + err.Error()
		return out
	}
	out.Saved, out.Kind, out.Bytes, out.MemoryBytes = true, saved.Kind, n, saved.MemoryBytes
	for _, e := range saved.Evicted {
		out.Evicted = append(out.Evicted, e.Label)
	}
	if ms != nil {
		out.Note = "memory and files: variables, imports, threads and /tmp are kept (gVisor)"
	} else {
		out.Note = "files only: /tmp is kept; variables, imports and threads are not (" + filesOnly + ")"
	}
	return out
}

// saveSnapshot writes the snapshot of a call's session: its /tmp packed
// by p, and with ms its memory.
func (s *Server) saveSnapshot(ctx context.Context, req *mcp.CallToolRequest, r *aRun, a callArgs, p sandbox.Packer, ms *taggedSaver) (snapshots.Saved, int64, error) {
	meta := snapshots.Meta{Kind: snapshots.KindFiles, Engine: s.engineName(), Extra: map[string]string{"session": a.session, "run_id": r.id}}
	if ms != nil {
		meta.Kind = snapshots.KindMemory
		meta.Extra[memoryTagKey] = ms.tag
	}
	w, err := s.opts.Snapshots.Create(s.principal(req), a.snapshot, meta)
	if err != nil {
		return snapshots.Saved{}, 0, err
	}
	began := time.Now()
	n, err := p.Pack(ctx, w, s.policyOf(r).Snapshots.MaxBytes)
	packed := time.Now()
	var tooLarge *sandbox.PackTooLargeError
	switch {
	case errors.As(err, &tooLarge):
		w.Abort()
		return snapshots.Saved{}, 0, fmt.Errorf("the session's /tmp packs to %s, over the %s a snapshot may hold (snapshots.max_bytes); remove files from /tmp, or save fewer",
			units.FormatSize(tooLarge.Size), units.FormatSize(tooLarge.Max))
	case err != nil:
		w.Abort()
		return snapshots.Saved{}, 0, err
	}
	var resumeErr *sandbox.ResumeError
	if ms != nil {
		// A checkpoint written whole is kept even when the session could
		// not go on from it (takeSnapshot says so).
		if err := saveMemory(ctx, w, ms.MemorySaver); err != nil && !errors.As(err, &resumeErr) {
			w.Abort()
			return snapshots.Saved{}, 0, err
		}
	}
	kept := time.Now()
	saved, err := w.Commit()
	if err == nil && resumeErr != nil {
		err = resumeErr
	}
	s.log.Debug().Str("run_id", r.id).Str("label", a.snapshot).Dur("pack", packed.Sub(began)).Dur("memory", kept.Sub(packed)).
		Dur("commit", time.Since(kept)).Msg("snapshot written")
	return saved, n, err
}

// taggedSaver is an instance whose memory can be saved, with its tag.
type taggedSaver struct {
	sandbox.MemorySaver
	tag string
}

// memorySaver is inst as a [sandbox.MemorySaver] when its memory can be
// saved, else nil and why only its files can.
func memorySaver(ctx context.Context, inst sandbox.Instance) (*taggedSaver, string) {
	const elsewhere = "memory is kept only where the bridge can checkpoint it: the runsc engine, gVisor"
	ms, ok := inst.(sandbox.MemorySaver)
	if !ok {
		return nil, elsewhere
	}
	tag, err := ms.MemoryTag(ctx)
	switch {
	case errors.Is(err, sandbox.ErrNoCheckpoint):
		return nil, elsewhere
	case errors.Is(err, sandbox.ErrNoParks):
		return nil, "this session was saved and restored as often as it can be; a new session can be saved whole again"
	case err != nil:
		return nil, "its memory could not be saved: " + err.Error()
	}
	return &taggedSaver{MemorySaver: ms, tag: tag}, ""
}

// saveMemory checkpoints the session into w's memory folder.
func saveMemory(ctx context.Context, w *snapshots.Writer, ms sandbox.MemorySaver) error {
	dir, err := w.MemoryDir()
	if err != nil {
		return err
	}
	return ms.SaveMemory(ctx, dir)
}

// restoredOutcome audits a restore that came back, and ends the session
// of one that did not (the runner could not unpack it: the code did not
// run, and a session with half a /tmp is worth nothing); nil then.
func (s *Server) restoredOutcome(req *mcp.CallToolRequest, r *aRun, a callArgs, restored *RestoredOutput, inst sandbox.Instance) *RestoredOutput {
	if restored == nil {
		return nil
	}
	if r.res.Error != nil && r.res.Error.Type == "InputError" && strings.Contains(r.res.Error.Message, "snapshot") {
		if c, ok := inst.(*sessionCall); ok {
			_, _ = s.sessions.reset(c.key) // the call's own session
		}
		return nil
	}
	if s.opts.Policy != nil {
		s.opts.Policy.Audit().Snapshot(policy.SnapshotRecord{Action: "restored", Owner: s.principal(req), Label: restored.Label,
			Kind: restored.Kind, Bytes: restored.Bytes, RunID: r.id, Session: a.session})
	}
	return restored
}

// policyOf is the run's pinned policy, or the default.
func (s *Server) policyOf(r *aRun) *policy.Policy {
	if r.snap != nil {
		return r.snap.Policy
	}
	return policy.Default()
}

// engineName is the engine's name, when the instances say it.
func (s *Server) engineName() string {
	if n, ok := s.opts.Instances.(runtimeNamer); ok {
		return n.RuntimeName()
	}
	return ""
}

// renderSnapshots adds what a call saved and restored to its result.
func renderSnapshots(res *mcp.CallToolResult, saved *SnapshotOutput, restored *RestoredOutput) {
	if saved == nil && restored == nil {
		return
	}
	o, ok := res.StructuredContent.(Output)
	if !ok {
		return
	}
	var lines []string
	if restored != nil {
		o.Restored = restored
		lines = append(lines, fmt.Sprintf("[restored %q (%s): %s]", restored.Label, units.FormatSize(restored.Bytes), restored.Note))
	}
	if saved != nil {
		o.Snapshot = saved
		if saved.Saved {
			line := fmt.Sprintf("[snapshot %q saved (%s; %s)", saved.Label, units.FormatSize(saved.Bytes), saved.Note)
			if len(saved.Evicted) > 0 {
				line += "; removed to make room: " + strings.Join(saved.Evicted, ", ")
			}
			lines = append(lines, line+"]")
		} else {
			lines = append(lines, fmt.Sprintf("[snapshot %q %s]", saved.Label, saved.Note))
		}
	}
	res.StructuredContent = o
	text := strings.Join(lines, "\n")
	if len(res.Content) > 0 {
		if t, ok := res.Content[0].(*mcp.TextContent); ok {
			t.Text = strings.TrimRight(t.Text, "\n") + "\n" + text
			return
		}
	}
	res.Content = append(res.Content, &mcp.TextContent{Text: text})
}
