package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

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
const filesOnlyNote = "the session's /tmp files came back; its variables, imports and threads did not (only its files were kept: memory is kept only where the bridge can checkpoint it, gVisor)"

// snapshotsOn reports whether calls may save and restore sessions.
func (s *Server) snapshotsOn() bool {
	if s.opts.Snapshots == nil || s.opts.Policy == nil {
		return false
	}
	p := s.opts.Policy.Current().Policy
	return p.Sessions.Enabled && p.Snapshots.Enabled
}

// principal is who calls: the owner of its snapshots.
func (s *Server) principal(req *mcp.CallToolRequest) string {
	if s.opts.Principal != nil {
		if p := s.opts.Principal(req); p != "" {
			return p
		}
	}
	return "local"
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

// restoreInput is the archive input that starts a restored session from
// label, and what to say of it; it refuses a session that exists (a
// restore starts a new one) and a label the client has not saved.
func (s *Server) restoreInput(req *mcp.CallToolRequest, a callArgs, key sessionKey) (sandbox.InputFile, *RestoredOutput, error) {
	if s.sessions.has(key) {
		return sandbox.InputFile{}, nil, fmt.Errorf("session %q exists: restore starts a new session from the snapshot; pass reset: true with it to end this one first, or name another session", a.session)
	}
	owner, store := s.principal(req), s.opts.Snapshots
	e, rc, err := store.Get(owner, a.restore)
	if err != nil {
		if errors.Is(err, snapshots.ErrNotFound) {
			return sandbox.InputFile{}, nil, fmt.Errorf("there is no snapshot %q to restore (a call with snapshot: %q saves one; an operator lists them with bridge snapshots list)", a.restore, a.restore)
		}
		return sandbox.InputFile{}, nil, fmt.Errorf("reading snapshot %q: %w", a.restore, err)
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
	return in, &RestoredOutput{Label: label, Kind: e.Kind, Bytes: e.Size, Note: filesOnlyNote}, nil
}

// takeSnapshot saves the session of the call that just ran in inst under
// a.snapshot: its /tmp, packed by the runner, within snapshots.max_bytes.
func (s *Server) takeSnapshot(ctx context.Context, req *mcp.CallToolRequest, r *aRun, a callArgs, inst sandbox.Instance) *SnapshotOutput {
	out := &SnapshotOutput{Label: a.snapshot}
	p, ok := inst.(sandbox.Packer)
	if !ok || !inst.Kept() {
		out.Note = "not saved: the session ended with the call"
		return out
	}
	pol := s.policyOf(r)
	owner := s.principal(req)
	w, err := s.opts.Snapshots.Create(owner, a.snapshot, snapshots.Meta{Kind: snapshots.KindFiles, Engine: s.engineName(),
		Extra: map[string]string{"session": a.session, "run_id": r.id}})
	if err != nil {
		out.Note = "not saved: " + err.Error()
		return out
	}
	// Packing gets the call's timeout anew (and at most
	// sandbox.PackTimeout): a runner that does not answer ends its session.
	pctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	n, err := p.Pack(pctx, w, pol.Snapshots.MaxBytes)
	var tooLarge *sandbox.PackTooLargeError
	switch {
	case errors.As(err, &tooLarge):
		w.Abort()
		out.Note = fmt.Sprintf("not saved: the session's /tmp packs to %s, over the %s a snapshot may hold (snapshots.max_bytes); remove files from /tmp, or save fewer", units.FormatSize(tooLarge.Size), units.FormatSize(tooLarge.Max))
		return out
	case err != nil:
		w.Abort()
		out.Note = "not saved: " + err.Error()
		return out
	}
	saved, err := w.Commit()
	if err != nil {
		out.Note = "not saved: " + err.Error()
		return out
	}
	out.Saved, out.Kind, out.Bytes = true, saved.Kind, n
	for _, e := range saved.Evicted {
		out.Evicted = append(out.Evicted, e.Label)
	}
	out.Note = "files only: /tmp is kept; variables, imports and threads are not (memory is kept only where the bridge can checkpoint it, gVisor)"
	return out
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
			s.sessions.reset(c.key)
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
