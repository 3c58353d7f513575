package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestStoreReloadPinsAndBudgets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("version: 1\nbudgets:\n  max_calls_per_run: 2\n")
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	s, err := NewStore(p, file, zerolog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	changes := 0
	s.OnChange(func(*Snapshot) { changes++ })

	r1 := s.Begin("r1")
	var took []bool
	for range 3 {
		took = append(took, r1.TakeCall())
	}
	if !took[0] || !took[1] || took[2] || r1.Calls() != 2 {
		t.Fatalf("budget of 2: took %v, calls %d", took, r1.Calls())
	}
	// Unchanged file: nothing happens.
	if changed, err := s.Reload(); changed || err != nil {
		t.Fatalf("unchanged: %v %v", changed, err)
	}
	// Invalid: rejected, logged, the old policy stays.
	write("version: 1\nbudgets:\n  max_calls_per_rum: 5\n")
	if changed, err := s.Reload(); changed || err == nil {
		t.Fatalf("invalid: %v %v", changed, err)
	}
	if !strings.Contains(logs.String(), "rejected") || s.Current().Gen != 1 {
		t.Fatalf("after an invalid file: gen %d, log %s", s.Current().Gen, logs.String())
	}
	// Valid: in force for new runs; r1 keeps its own.
	write("version: 1\nbudgets:\n  max_calls_per_run: 5\nsandbox:\n  max_concurrent: 9\n")
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("valid: %v %v", changed, err)
	}
	if changes != 1 || s.Current().Gen != 2 || s.Current().Policy.Budgets.MaxCallsPerRun != 5 {
		t.Fatalf("after reload: %d changes, gen %d", changes, s.Current().Gen)
	}
	if s.Run("r1") != r1 || s.Run("r1").Snap.Gen != 1 {
		t.Fatal("a run in flight lost its policy")
	}
	if !strings.Contains(logs.String(), "sandbox.max_concurrent changed; it takes effect when the bridge restarts") {
		t.Errorf("no restart warning: %s", logs.String())
	}
	// A run the store has not seen (a remote bridge's) is pinned on first use.
	if r := s.Run("remote"); r.Snap.Gen != 2 {
		t.Fatalf("remote run pinned to gen %d", r.Snap.Gen)
	}
	s.End("r1")
	if s.Run("r1") == r1 {
		t.Fatal("an ended run was kept")
	}
}

func TestStoreWatchPicksUpEdits(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(p, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan struct{})
	defer close(done)
	go s.Watch(ctxDone(done), 10*time.Millisecond)
	if err := os.WriteFile(file, []byte("version: 1\ntools:\n  default: deny\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Current().Policy.Tools.Default != Deny {
		if time.Now().After(deadline) {
			t.Fatal("the edit was never picked up")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ctxDone is a context that ends when done is closed.
func ctxDone(done <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-done; cancel() }()
	return ctx
}

// A rejected file is not parsed again until it changes; ReloadNow (SIGHUP)
// parses it anyway and reopens the audit file, which log rotation moved.
func TestStoreReloadNow(t *testing.T) {
	dir := t.TempDir()
	file, audit := filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.jsonl")
	if err := os.WriteFile(file, []byte("version: 1\naudit:\n  file: "+audit+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(p, file, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.WriteFile(file, []byte("version: 1\nbudgets:\n  max_calls_per_rum: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reload(); err == nil {
		t.Fatal("an invalid file was accepted")
	}
	if changed, err := s.Reload(); changed || err != nil {
		t.Fatalf("the same rejected file again: %v %v, want it skipped", changed, err)
	}
	if _, err := s.ReloadNow(); err == nil {
		t.Fatal("ReloadNow did not parse the rejected file again")
	}
	// Rotation: the old file moves away; after ReloadNow records go to a new one.
	if err := os.Rename(audit, audit+".1"); err != nil {
		t.Fatal(err)
	}
	_, _ = s.ReloadNow()
	s.Audit().RunStart("r1", 1, p.Sandbox, time.Second)
	b, err := os.ReadFile(audit)
	if err != nil || !strings.Contains(string(b), `"run_id":"r1"`) {
		t.Fatalf("after rotation the audit file has %q (%v)", b, err)
	}
}
