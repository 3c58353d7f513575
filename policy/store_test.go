package policy

import (
	"context"
	"errors"
	"fmt"
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
	write("version: 1\nbudgets:\n  max_calls_per_run: 5\nsandbox:\n  max_concurrent: 9\n  oci_runtime: runsc\n  variant: datascience\n")
	if changed, err := s.Reload(); !changed || err != nil {
		t.Fatalf("valid: %v %v", changed, err)
	}
	if changes != 1 || s.Current().Gen != 2 || s.Current().Policy.Budgets.MaxCallsPerRun != 5 {
		t.Fatalf("after reload: %d changes, gen %d", changes, s.Current().Gen)
	}
	if s.Run("r1") != r1 || s.Run("r1").Snap.Gen != 1 {
		t.Fatal("a run in flight lost its policy")
	}
	for _, key := range []string{"sandbox.oci_runtime", "sandbox.max_concurrent", "sandbox.variant"} {
		if !strings.Contains(logs.String(), key+" changed; it takes effect when the bridge restarts") {
			t.Errorf("no restart warning for %s: %s", key, logs.String())
		}
	}
	// A run the store has not seen (a remote bridge's) is pinned on first use.
	if r, err := s.Remote("remote", time.Time{}); err != nil || r.Snap.Gen != 2 {
		t.Fatalf("remote run: %v, %v", r, err)
	}
	// A run begun here is what Remote finds (a bridge and its proxy in one process).
	if r, err := s.Remote("r1", time.Time{}); r != r1 || err != nil {
		t.Fatalf("Remote of a local run: %v, %v", r, err)
	}
	s.End("r1")
	if s.Run("r1") != nil {
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
	s.Audit().RunStart("r1", "", 1, p.Sandbox, time.Second)
	b, err := os.ReadFile(audit)
	if err != nil || !strings.Contains(string(b), `"run_id":"r1"`) {
		t.Fatalf("after rotation the audit file has %q (%v)", b, err)
	}
}

// clockStore is a Store for policy yaml whose clock is the returned func's.
func clockStore(t *testing.T, yaml string) (*Store, func(time.Duration) time.Time) {
	t.Helper()
	p, err := Parse([]byte(yaml), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(p, "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Date(2025, 11, 22, 5, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	return s, func(d time.Duration) time.Time { now = now.Add(d); return now }
}

// remote is Remote that must succeed.
func remote(t *testing.T, s *Store, id string, deadline time.Time) *Run {
	t.Helper()
	r, err := s.Remote(id, deadline)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return r
}

// A remote bridge may give its runs a longer timeout than this process's
// max_timeout. Code that spends its budget and then sleeps past what this
// process would allow a run must not find a fresh budget when it wakes.
func TestStoreRemoteRunKeepsItsBudgetUntilItsDeadline(t *testing.T) {
	s, advance := clockStore(t, "version: 1\nsandbox:\n  max_timeout: 1m\nbudgets:\n  max_calls_per_run: 2\n")
	t0 := advance(0)
	deadline := t0.Add(30 * time.Minute) // the bridge's --max-timeout is 30m
	r := remote(t, s, "abc123", deadline)
	if took := []bool{r.TakeCall(), r.TakeCall(), r.TakeCall()}; !took[0] || !took[1] || took[2] {
		t.Fatalf("a budget of 2 calls: took %v", took)
	}
	undated := remote(t, s, "undated", time.Time{}) // a caller that does not say its deadline
	undated.TakeCall()
	// The code sleeps 20 minutes, well past max_timeout + 1m; new runs
	// come meanwhile, and each may make the Store sweep.
	for i := range 20 {
		advance(time.Minute)
		remote(t, s, fmt.Sprintf("other%d", i), advance(0).Add(time.Minute))
	}
	if again := remote(t, s, "abc123", deadline); again != r || again.TakeCall() {
		t.Fatalf("after sleeping past the proxy's max_timeout the run has %d calls: its budget was refreshed", again.Calls())
	}
	if again := remote(t, s, "undated", time.Time{}); again != undated || again.Calls() != 1 {
		t.Fatal("a run that gave no deadline was forgotten within a day")
	}
	// Past its deadline and the grace, the run is forgotten: its memory is freed.
	advance(deadline.Sub(advance(0)) + RunGrace + time.Second)
	remote(t, s, "late", advance(0).Add(time.Minute))
	if s.Run("abc123") != nil {
		t.Fatal("a run past its deadline and the grace is still tracked")
	}
	if s.Run("undated") == nil {
		t.Fatal("a run that gave no deadline was forgotten within a day of its last call")
	}
	advance(MaxRunLife)
	remote(t, s, "later", advance(0).Add(time.Minute))
	if s.Run("undated") != nil {
		t.Fatal("a run that gave no deadline is still tracked a day after its last call")
	}
}

func TestStoreRemoteRefusesBadRunIDsAndLongRuns(t *testing.T) {
	s, advance := clockStore(t, "version: 1\n")
	for _, id := range []string{"", "R1", "run-1", "a b", "a\x00", "é", strings.Repeat("a", MaxRunIDLen+1), strings.Repeat("x", 1<<20)} {
		r, err := s.Remote(id, time.Time{})
		var rr *RunRefused
		if r != nil || !errors.As(err, &rr) || !rr.Invalid || rr.Rule != RuleRunID || !strings.Contains(err.Error(), "lower-case letters and digits") {
			t.Errorf("run id %.40q: tracked %v, %.200v", id, r != nil, err)
			continue
		}
		if len(id) > MaxRunIDLen && strings.Contains(err.Error(), id) {
			t.Errorf("the error repeats a %d-byte id", len(id))
		}
	}
	if len(s.runs) != 0 || s.remote != 0 {
		t.Fatalf("refused ids left %d runs behind", len(s.runs))
	}
	remote(t, s, strings.Repeat("a", MaxRunIDLen), time.Time{})
	remote(t, s, "0123456789ab", time.Time{})
	// A run that says it lasts longer than the Store keeps runs is refused:
	// kept for less, it could sleep past that and get a fresh budget.
	r, err := s.Remote("long", advance(0).Add(MaxRunLife+time.Minute))
	var rr *RunRefused
	if r != nil || !errors.As(err, &rr) || rr.Invalid || rr.Rule != RuleRunLife || !strings.Contains(err.Error(), "--max-timeout") {
		t.Fatalf("a run of more than %s: tracked %v, %v", MaxRunLife, r != nil, err)
	}
	if s.Run("long") != nil {
		t.Fatal("a refused run is tracked")
	}
	remote(t, s, "long", advance(0).Add(MaxRunLife))
}

// The Store tracks at most MaxRemoteRuns remote runs, and never makes room
// by forgetting one that may still be live.
func TestStoreBoundsRemoteRuns(t *testing.T) {
	s, advance := clockStore(t, "version: 1\nbudgets:\n  max_calls_per_run: 1\n")
	deadline := advance(0).Add(time.Minute)
	for i := range MaxRemoteRuns {
		remote(t, s, fmt.Sprintf("r%d", i), deadline).TakeCall()
	}
	refused := func(when string) {
		t.Helper()
		r, err := s.Remote("onemore", deadline)
		var rr *RunRefused
		if r != nil || !errors.As(err, &rr) || rr.Rule != RuleRuns || !strings.Contains(err.Error(), "too many runs in flight on this MCP proxy") {
			t.Fatalf("%s: run %d: tracked %v, %v", when, MaxRemoteRuns+1, r != nil, err)
		}
	}
	refused("full")
	// Every run is live until its deadline and the grace: none is forgotten.
	advance(RunGrace + time.Minute)
	refused("at the end of the grace")
	for i := range MaxRemoteRuns {
		if r := remote(t, s, fmt.Sprintf("r%d", i), deadline); r.TakeCall() {
			t.Fatalf("run r%d got a fresh budget while the Store was full", i)
		}
	}
	// Local runs are bounded by the bridge's slots, not by this.
	if r := s.Begin("local"); r == nil {
		t.Fatal("Begin")
	}
	// Past the grace, a full Store makes room at once.
	advance(time.Second)
	if r := remote(t, s, "onemore", advance(0).Add(time.Minute)); r.Calls() != 0 {
		t.Fatal("a new run has spent calls")
	}
	if s.remote != 1 || len(s.runs) != 2 {
		t.Fatalf("%d remote runs tracked (%d in all), want 1 (2)", s.remote, len(s.runs))
	}
}

// TestStoreRunsShareAVault: runs given one VaultSlot (a session's calls)
// hold the same values; a run given none keeps its own.
func TestStoreRunsShareAVault(t *testing.T) {
	s, err := NewStore(Default(), "", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var slot VaultSlot
	a, b, c := s.Begin("aaaaaaaaaaaa"), s.Begin("bbbbbbbbbbbb"), s.Begin("cccccccccccc")
	a.ShareVault(&slot)
	b.ShareVault(&slot)
	if a.Vault() != b.Vault() {
		t.Fatal("two runs sharing a slot got different vaults")
	}
	if c.Vault() == a.Vault() {
		t.Fatal("a run with no shared slot got the shared vault")
	}
	if a.HoldsValues() || b.HoldsValues() {
		t.Fatal("an empty vault holds values")
	}
}

// TestStoreShareVaultKeepsASessionsValues: a remote session's runs share
// the vault its key names, until the session's end plus the grace, even
// while none of its runs is live; a run begun here is not re-pointed, and
// a bad key is refused.
func TestStoreShareVaultKeepsASessionsValues(t *testing.T) {
	s, advance := clockStore(t, "version: 1\n")
	t0 := advance(0)
	ends := t0.Add(time.Hour)
	first := remote(t, s, "call1", t0.Add(time.Minute))
	if err := s.ShareVault(first, "sessionkey1", ends); err != nil {
		t.Fatal(err)
	}
	first.Vault() // made on the first call's first result
	// The session idles 20 minutes: the first run is forgotten.
	for i := range 20 {
		advance(time.Minute)
		remote(t, s, fmt.Sprintf("other%d", i), advance(0).Add(time.Minute))
	}
	if s.Run("call1") != nil {
		t.Fatal("the first run is still tracked")
	}
	second := remote(t, s, "call2", advance(0).Add(time.Minute))
	if err := s.ShareVault(second, "sessionkey1", ends); err != nil {
		t.Fatal(err)
	}
	if second.Vault() != first.Vault() {
		t.Fatal("a later call of the session got another vault")
	}
	other := remote(t, s, "call3", advance(0).Add(time.Minute))
	if err := s.ShareVault(other, "sessionkey2", ends); err != nil {
		t.Fatal(err)
	}
	if other.Vault() == first.Vault() {
		t.Fatal("another session got this one's vault")
	}
	local := s.Begin("local1")
	if err := s.ShareVault(local, "sessionkey1", ends); err != nil || local.Vault() == first.Vault() {
		t.Fatalf("a run begun here was re-pointed to a remote session's vault (err %v)", err)
	}
	if err := s.ShareVault(other, "Bad Key", ends); err == nil {
		t.Fatal("a bad key was accepted")
	}
	// Past the session's end and the grace, the vault is forgotten.
	advance(ends.Sub(advance(0)) + RunGrace + time.Second)
	late := remote(t, s, "call4", advance(0).Add(time.Minute))
	if err := s.ShareVault(late, "sessionkey1", advance(0).Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if late.Vault() == first.Vault() {
		t.Fatal("a vault is kept past its session's end")
	}
}
