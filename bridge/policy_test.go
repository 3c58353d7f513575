package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// TestPolicyLimitsPerRun: each run gets the limits of the policy in force
// when it starts, pinned under its run id, and a reload changes the next
// run's limits and the tool's largest timeout.
func TestPolicyLimitsPerRun(t *testing.T) {
	dir := t.TempDir()
	file, audit := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.jsonl")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(file, []byte("version: 1\naudit:\n  file: "+audit+"\n"+body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sandbox:\n  timeout: 20s\n  memory: 256Mi\n")
	pol, err := policy.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	store, err := policy.NewStore(pol, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var got []sandbox.Request
	var pinned []int
	s := newServer(t, Options{Policy: store, Instances: withRunner(func(_ context.Context, req sandbox.Request) (sandbox.Result, error) {
		got = append(got, req)
		pinned = append(pinned, store.Run(req.RunID).Snap.Gen)
		return sandbox.Result{RunID: req.RunID, Status: sandbox.StatusOK}, nil
	})})
	cs := connect(t, s, nil)
	call(t, cs, map[string]any{"code": "pass"})
	write("sandbox:\n  timeout: 40s\n  max_timeout: 10m\n  memory: 1Gi\n")
	if changed, err := store.Reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	call(t, cs, map[string]any{"code": "pass"})
	_, out := call(t, cs, map[string]any{"code": "pass", "timeout_seconds": 600})
	if out.Status != "ok" {
		t.Fatalf("timeout_seconds 600 under max_timeout 10m: %+v", out)
	}
	if len(got) != 3 || got[0].Limits.Timeout != 20*time.Second || got[0].Limits.Memory != 256<<20 ||
		got[1].Limits.Timeout != 40*time.Second || got[1].Limits.Memory != 1<<30 || got[2].Limits.Timeout != 600*time.Second {
		t.Fatalf("limits per run: %+v", got)
	}
	if got[0].RunID == "" || got[0].RunID == got[1].RunID || pinned[0] != 1 || pinned[1] != 2 {
		t.Fatalf("run ids %q %q pinned to generations %v", got[0].RunID, got[1].RunID, pinned)
	}
	// max_code_bytes is read at each call, and named when it refuses.
	write("sandbox:\n  max_code_bytes: 4Ki\n")
	if changed, err := store.Reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if res, out := call(t, cs, map[string]any{"code": strings.Repeat("#", 4097)}); out.Status != "invalid" ||
		!strings.Contains(text(res), "code is 4097 bytes, over the limit of 4Ki (sandbox.max_code_bytes)") || len(got) != 3 {
		t.Fatalf("4097 bytes of code under max_code_bytes 4Ki: %+v %q (%d runs)", out, text(res), len(got))
	}
	write("sandbox:\n  timeout: 40s\n  max_timeout: 10m\n  memory: 1Gi\n")
	if changed, err := store.Reload(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	// The tool's schema follows max_timeout.
	lt, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if schema := string(mustJSON(t, lt.Tools[0].InputSchema)); !strings.Contains(schema, `"maximum":600`) {
		t.Fatalf("schema after max_timeout 10m: %s", schema)
	}
	// Each run is audited at start and end.
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"event":"run_start"`); n != 3 {
		t.Fatalf("%d run_start lines:\n%s", n, b)
	}
	if n := strings.Count(string(b), `"event":"run_end"`); n != 3 {
		t.Fatalf("%d run_end lines:\n%s", n, b)
	}
}

// acquireFails is Instances whose containers never start.
type acquireFails struct{ err error }

func (a acquireFails) Acquire(context.Context, sandbox.Limits, string) (sandbox.Instance, error) {
	return nil, a.err
}

// TestRunWithoutAContainer: a run whose container does not start answers
// what happened (cancelled, or unavailable) and is audited all the same.
func TestRunWithoutAContainer(t *testing.T) {
	for _, tc := range []struct {
		err                 error
		status, msg, logged string
	}{
		{fmt.Errorf("starting: %w", sandbox.ErrStartCancelled), "cancelled", "cancelled before the code started", "cancelled"},
		{context.Canceled, "cancelled", "cancelled before the code started", "cancelled"},
		{errors.New("image bridge-runner not found"), "unavailable", "the sandbox could not run the code: image bridge-runner not found", "unavailable"},
	} {
		t.Run(tc.status+": "+tc.err.Error(), func(t *testing.T) {
			dir := t.TempDir()
			file, audit := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.jsonl")
			if err := os.WriteFile(file, []byte("version: 1\naudit:\n  file: "+audit+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			pol, err := policy.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			store, err := policy.NewStore(pol, file, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			cs := connect(t, newServer(t, Options{Policy: store, Instances: acquireFails{tc.err}}), nil)
			_, out := call(t, cs, map[string]any{"code": "pass"})
			if out.Status != tc.status || out.Message != tc.msg {
				t.Fatalf("status %q, message %q; want %q, %q", out.Status, out.Message, tc.status, tc.msg)
			}
			b, err := os.ReadFile(audit)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"event":"run_start"`) || !strings.Contains(string(b), `"event":"run_end"`) || !strings.Contains(string(b), `"status":"`+tc.logged+`"`) {
				t.Fatalf("audit:\n%s", b)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLimitsFromMounts: the policy's mounts reach each run's limits, as
// the policy resolved them, and a reload changes the next run's.
func TestLimitsFromMounts(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "sales")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(data)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse([]byte("version: 1\nmounts:\n  - host: "+data+"\n  - host: "+data+"\n    path: /data/in/again\n"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitsFrom(pol)
	want := []sandbox.DataMount{{Host: real, Path: "/data/sales"}, {Host: real, Path: "/data/in/again"}}
	if !reflect.DeepEqual(l.Mounts, want) {
		t.Errorf("Mounts = %+v, want %+v", l.Mounts, want)
	}
	if err := l.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if l := LimitsFrom(policy.Default()); l.Mounts != nil {
		t.Errorf("no mounts: %+v", l.Mounts)
	}
}
