package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Snapshot is one version of the policy in force, with the state that
// belongs to it (the rate limiter's buckets). Immutable but for the
// buckets; a reload makes a new one.
type Snapshot struct {
	Policy  *Policy
	Limiter *Limiter
	// Gen counts the policies a Store has had in force, from 1.
	Gen int
}

// Store holds the policy in force, reloads it from its file when the file
// changes (polled) or when asked (SIGHUP), and pins each run to the policy
// it started with. A file that fails to parse is logged and ignored: the
// policy in force stays. Safe for concurrent use.
type Store struct {
	path string
	log  zerolog.Logger

	cur  atomic.Pointer[Snapshot]
	mu   sync.Mutex // serialises reloads and guards what follows
	sum  [32]byte   // of the file's bytes in force (or last rejected)
	subs []func(*Snapshot)

	runsMu    sync.Mutex
	runs      map[string]*Run
	lastSweep time.Time

	audit *Auditor
}

// NewStore returns a Store with p in force. path, if not empty, is the file
// p was read from, which Reload and Watch read again.
func NewStore(p *Policy, path string, log zerolog.Logger) (*Store, error) {
	s := &Store{path: path, log: log, runs: map[string]*Run{}}
	if path != "" {
		if b, err := os.ReadFile(path); err == nil {
			s.sum = sha256.Sum256(b)
		}
	}
	a, err := OpenAuditor(p.Audit, log)
	if err != nil {
		return nil, err
	}
	s.audit = a
	s.cur.Store(&Snapshot{Policy: p, Limiter: NewLimiter(p.Budgets.Rates, nil), Gen: 1})
	return s, nil
}

// Current is the policy in force.
func (s *Store) Current() *Snapshot { return s.cur.Load() }

// Audit is where decisions and runs are recorded.
func (s *Store) Audit() *Auditor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.audit
}

// Close closes the audit file, if any.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.audit.Close()
}

// OnChange registers f to be called, after each reload that put a new
// policy in force, with the new snapshot.
func (s *Store) OnChange(f func(*Snapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subs = append(s.subs, f)
}

// Reload reads the file again. It returns whether a new policy is now in
// force; an unreadable or invalid file is an error (logged too) and
// changes nothing. An unchanged file is not parsed again.
func (s *Store) Reload() (bool, error) {
	if s.path == "" {
		return false, nil
	}
	s.mu.Lock()
	b, err := os.ReadFile(s.path)
	if err != nil {
		s.mu.Unlock()
		s.log.Error().Err(err).Str("policy", s.path).Msg("policy: cannot read the file; the policy in force stays")
		return false, err
	}
	sum := sha256.Sum256(b)
	if bytes.Equal(sum[:], s.sum[:]) {
		s.mu.Unlock()
		return false, nil
	}
	s.sum = sum
	p, err := Parse(b, s.path)
	if err != nil {
		s.mu.Unlock()
		s.log.Error().Str("policy", s.path).Msg("policy: the new file is invalid and was rejected; the policy in force stays:\n" + err.Error())
		return false, err
	}
	old := s.cur.Load()
	if p.Audit != old.Policy.Audit {
		a, err := OpenAuditor(p.Audit, s.log)
		if err != nil {
			s.mu.Unlock()
			s.log.Error().Err(err).Str("policy", s.path).Msg("policy: the new audit file cannot be opened; the policy in force stays")
			return false, err
		}
		_ = s.audit.Close()
		s.audit = a
	}
	snap := &Snapshot{Policy: p, Limiter: NewLimiter(p.Budgets.Rates, nil), Gen: old.Gen + 1}
	s.cur.Store(snap)
	subs := append([]func(*Snapshot){}, s.subs...)
	s.mu.Unlock()
	for _, w := range restartOnly(old.Policy, p) {
		s.log.Warn().Str("policy", s.path).Msg("policy: " + w + " changed; it takes effect when the bridge restarts")
	}
	s.log.Info().Str("policy", s.path).Int("generation", snap.Gen).Msg("policy: reloaded")
	for _, f := range subs {
		f(snap)
	}
	return true, nil
}

// restartOnly lists the settings that differ between a and b but are read
// only when the bridge starts.
func restartOnly(a, b *Policy) []string {
	var out []string
	if a.Sandbox.Engine != b.Sandbox.Engine {
		out = append(out, "sandbox.engine")
	}
	if a.Sandbox.Image != b.Sandbox.Image {
		out = append(out, "sandbox.image")
	}
	if a.Sandbox.MaxConcurrent != b.Sandbox.MaxConcurrent {
		out = append(out, "sandbox.max_concurrent")
	}
	if a.Sandbox.Queue != b.Sandbox.Queue {
		out = append(out, "sandbox.queue")
	}
	if a.Sandbox.RequireEnforcedLimits != b.Sandbox.RequireEnforcedLimits {
		out = append(out, "sandbox.require_enforced_limits")
	}
	return out
}

// Watch reloads the file whenever its contents change, checking every
// interval, until ctx ends.
func (s *Store) Watch(ctx context.Context, interval time.Duration) {
	if s.path == "" {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = s.Reload()
		}
	}
}

// Run is one run's view of the policy: the snapshot it started with and
// its tool-call budget.
type Run struct {
	ID    string
	Snap  *Snapshot
	calls atomic.Int64
	seen  atomic.Int64 // unix nanos of the last use
}

// Calls is how many tool calls the run has made (or tried).
func (r *Run) Calls() int64 { return r.calls.Load() }

// TakeCall counts one more tool call; it reports false, counting nothing,
// when the run has made budgets.max_calls_per_run calls already.
func (r *Run) TakeCall() bool {
	max := int64(r.Snap.Policy.Budgets.MaxCallsPerRun)
	for {
		n := r.calls.Load()
		if max > 0 && n >= max {
			return false
		}
		if r.calls.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Begin pins the run to the policy in force now. Runs the bridge starts
// call it; End releases the run.
func (s *Store) Begin(runID string) *Run {
	r := &Run{ID: runID, Snap: s.Current()}
	r.seen.Store(time.Now().UnixNano())
	s.runsMu.Lock()
	defer s.runsMu.Unlock()
	s.sweep()
	s.runs[runID] = r
	return r
}

// End forgets the run.
func (s *Store) End(runID string) {
	s.runsMu.Lock()
	defer s.runsMu.Unlock()
	delete(s.runs, runID)
}

// Run returns the run's pinned view. A run this Store has not seen (the
// calls of a bridge that uses this proxy remotely) is pinned now, and
// forgotten once it has been idle for longer than the longest timeout a
// run may have.
func (s *Store) Run(runID string) *Run {
	s.runsMu.Lock()
	defer s.runsMu.Unlock()
	r := s.runs[runID]
	if r == nil {
		s.sweep()
		r = &Run{ID: runID, Snap: s.Current()}
		s.runs[runID] = r
	}
	r.seen.Store(time.Now().UnixNano())
	return r
}

// sweep forgets runs idle for longer than a run may last. Called with
// runsMu held; does the work at most every 10 s.
func (s *Store) sweep() {
	now := time.Now()
	if now.Sub(s.lastSweep) < 10*time.Second {
		return
	}
	s.lastSweep = now
	for id, r := range s.runs {
		idle := now.Sub(time.Unix(0, r.seen.Load()))
		if idle > r.Snap.Policy.Sandbox.MaxTimeout+time.Minute {
			delete(s.runs, id)
		}
	}
}

// String describes the store for logs.
func (s *Store) String() string {
	if s.path == "" {
		return "the built-in default policy"
	}
	return fmt.Sprintf("policy %s", s.path)
}
