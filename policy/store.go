package policy

import (
	"context"
	"crypto/sha256"
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

	cur      atomic.Pointer[Snapshot]
	mu       sync.Mutex // serialises reloads and guards what follows
	sum      [32]byte   // of the file's bytes in force
	rejected [32]byte   // of the file's bytes last rejected: not parsed again until they change, or ReloadNow
	subs     []func(*Snapshot)
	validate func(*Policy) error

	runsMu    sync.Mutex
	runs      map[string]*Run
	lastSweep time.Time

	audit *Auditor
}

// NewStore returns a Store with p in force. path, if not empty, is the file
// p was read from (by Load), which Reload and Watch read again.
func NewStore(p *Policy, path string, log zerolog.Logger) (*Store, error) {
	s := &Store{path: path, log: log, runs: map[string]*Run{}, sum: p.sum}
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
func (s *Store) Audit() *Auditor { return s.audit }

// Validate makes every reload also pass f before the new policy goes in
// force: a policy f refuses is rejected like an invalid file.
func (s *Store) Validate(f func(*Policy) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.validate = f
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
// changes nothing. A file with the same bytes as the policy in force, or
// as the file last rejected, is not parsed again.
func (s *Store) Reload() (bool, error) { return s.reload(false) }

// ReloadNow is Reload that also parses a file it rejected before, and
// reopens the audit file (after log rotation): what SIGHUP does.
func (s *Store) ReloadNow() (bool, error) { return s.reload(true) }

func (s *Store) reload(force bool) (bool, error) {
	if s.path == "" {
		return false, nil
	}
	s.mu.Lock()
	if force {
		if err := s.audit.Open(s.audit.Config()); err != nil {
			s.log.Error().Err(err).Msg("policy: cannot reopen the audit file; records go where they went")
		}
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		s.mu.Unlock()
		s.log.Error().Err(err).Str("policy", s.path).Msg("policy: cannot read the file; the policy in force stays")
		return false, err
	}
	sum := sha256.Sum256(b)
	if sum == s.sum || (sum == s.rejected && !force) {
		s.mu.Unlock()
		return false, nil
	}
	reject := func(err error, what string) (bool, error) {
		s.rejected = sum
		s.mu.Unlock()
		s.log.Error().Str("policy", s.path).Msg("policy: " + what + "; the policy in force stays:\n" + err.Error())
		return false, err
	}
	p, err := Parse(b, s.path)
	if err != nil {
		return reject(err, "the new file is invalid and was rejected")
	}
	p.sum = sum
	if s.validate != nil {
		if err := s.validate(p); err != nil {
			return reject(err, "the new file was rejected")
		}
	}
	old := s.cur.Load()
	if p.Audit != old.Policy.Audit {
		if err := s.audit.Open(p.Audit); err != nil {
			return reject(err, "the new audit file cannot be opened, so the new file was rejected")
		}
	}
	// Rates that did not change keep their buckets: a reload (a comment
	// edited) must not hand out a fresh burst.
	lim := old.Limiter
	if !sameRates(old.Policy.Budgets.Rates, p.Budgets.Rates) {
		lim = NewLimiter(p.Budgets.Rates, nil)
	}
	snap := &Snapshot{Policy: p, Limiter: lim, Gen: old.Gen + 1}
	s.sum = sum
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

// sameRates compares rates but for where they are written in the file.
func sameRates(a, b []Rate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Line, x.Column, y.Line, y.Column = 0, 0, 0, 0
		if x != y {
			return false
		}
	}
	return true
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
	local bool         // begun by this process (Begin): ended by End, never swept
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
	r := &Run{ID: runID, Snap: s.Current(), local: true}
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
		if r.local {
			continue
		}
		idle := now.Sub(time.Unix(0, r.seen.Load()))
		if idle > r.Snap.Policy.Sandbox.MaxTimeout+time.Minute {
			delete(s.runs, id)
		}
	}
}
