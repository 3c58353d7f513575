package bridge

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/snapshots"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// packingInstances start session instances that pack a fixed /tmp and
// record the archive each first Exec was given.
type packingInstances struct {
	mu       sync.Mutex
	archives []string // the archive input of each instance's first Exec, "" without one
}

func (p *packingInstances) Acquire(context.Context, sandbox.Limits, string) (sandbox.Instance, error) {
	return &packingInstance{p: p}, nil
}

type packingInstance struct {
	p     *packingInstances
	execs int
}

func (i *packingInstance) Exec(_ context.Context, x sandbox.ExecRequest) (sandbox.Result, error) {
	i.execs++
	if i.execs == 1 {
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
		i.p.mu.Lock()
		i.p.archives = append(i.p.archives, got)
		i.p.mu.Unlock()
	}
	return sandbox.Result{RunID: x.RunID, Status: sandbox.StatusOK}, nil
}
func (i *packingInstance) Pack(_ context.Context, w io.Writer, _ int64) (int64, error) {
	n, err := io.WriteString(w, "TAR OF /tmp")
	return int64(n), err
}
func (i *packingInstance) Kept() bool                  { return true }
func (i *packingInstance) Closed() bool                { return false }
func (i *packingInstance) Close(context.Context) error { return nil }

// TestSnapshotsOwnedByPrincipal: a label saved by one principal is
// restored by it, and is as unknown to another as one never saved.
func TestSnapshotsOwnedByPrincipal(t *testing.T) {
	pol := policy.Default()
	pol.Sessions.Enabled = true
	store, err := policy.NewStore(pol, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snaps, err := snapshots.Open(snapshots.Options{Dir: filepath.Join(t.TempDir(), "snaps"), SweepEvery: -1, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer snaps.Close()
	inst := &packingInstances{}
	var mu sync.Mutex
	who := map[*mcp.ServerSession]string{}
	s := newServer(t, Options{Policy: store, Snapshots: snaps, Instances: inst, Principal: func(req mcp.Request) string {
		mu.Lock()
		defer mu.Unlock()
		ss := req.GetSession().(*mcp.ServerSession)
		if who[ss] == "" {
			who[ss] = []string{"alice", "bob"}[len(who)%2]
		}
		return who[ss]
	}})
	alice, bob := connect(t, s, nil), connect(t, s, nil)
	res, out := call(t, alice, map[string]any{"session": "s1", "code": "x", "snapshot": "mine"})
	if res.IsError || out.Snapshot == nil || !out.Snapshot.Saved || out.Snapshot.Bytes != int64(len("TAR OF /tmp")) {
		t.Fatalf("alice's snapshot: %+v %q", out.Snapshot, text(res))
	}
	res, out = call(t, bob, map[string]any{"session": "s2", "code": "x", "restore": "mine"})
	if !res.IsError || out.Status != "invalid" || !strings.Contains(text(res), `there is no snapshot "mine"`) {
		t.Fatalf("bob restoring alice's label: %q", text(res))
	}
	res, out = call(t, alice, map[string]any{"session": "s3", "code": "x", "restore": "mine"})
	if res.IsError || out.Restored == nil || out.Restored.Label != "mine" {
		t.Fatalf("alice restoring her label: %+v %q", out.Restored, text(res))
	}
	if got := inst.archives[len(inst.archives)-1]; got != "TAR OF /tmp" {
		t.Fatalf("the restored session was given %q", got)
	}
	if n := len(inst.archives); n != 2 {
		t.Fatalf("%d sessions started, want alice's two (bob's refused before any)", n)
	}
	// Restoring into a session that exists is refused: a restore starts one.
	res, _ = call(t, alice, map[string]any{"session": "s3", "code": "x", "restore": "mine"})
	if !res.IsError || !strings.Contains(text(res), `session "s3" exists`) {
		t.Fatalf("a restore into a live session: %q", text(res))
	}
}
