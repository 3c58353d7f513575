package policy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/tokenize"
	"github.com/bridge-mcp/bridge/internal/units"
)

// Snapshot is one version of the policy in force, with the state that
// belongs to it (the rate limiter's buckets). Immutable but for the
// buckets; a reload makes a new one.
type Snapshot struct {
	Policy  *Policy
	Limiter *Limiter
	// Gen counts the policies a [Store] has had in force, from 1.
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
	adjust   func(*Policy) (*Policy, error) // see Adjust

	runsMu sync.Mutex
	runs   map[string]*Run         // local (Begin) and remote (Remote) runs
	remote int                     // how many of runs are remote
	vaults map[string]*sharedVault // remote sessions' vaults, by key (ShareVault)
	// lastVaultSweep is when a full ShareVault last looked for expired
	// vaults; guarded by runsMu.
	lastVaultSweep time.Time
	lastSweep      time.Time
	now            func() time.Time // the clock: time.Now, but in tests

	audit *Auditor
	unrun tally // the decisions of calls with no run (Record)
	// failures counts reloads that failed (ReloadFailures).
	failures atomic.Int64
}

// NewStore returns a [Store] with p in force. path, if not empty, is the file
// p was read from (by Load), which Reload and Watch read again.
func NewStore(p *Policy, path string, log zerolog.Logger) (*Store, error) {
	s := &Store{path: path, log: log, runs: map[string]*Run{}, vaults: map[string]*sharedVault{}, sum: p.sum, now: time.Now}
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

// ReloadFailures counts the reloads that failed (a file unreadable or
// rejected) since the Store was made: the policy in force stayed each time.
func (s *Store) ReloadFailures() int64 { return s.failures.Load() }

// Audit is where decisions and runs are recorded.
func (s *Store) Audit() *Auditor { return s.audit }

// Adjust makes every reloaded policy pass through f before it goes in
// force: f returns the policy to use (the command line's settings applied
// to it, say), or an error, and the file is then rejected like an invalid
// one.
func (s *Store) Adjust(f func(*Policy) (*Policy, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adjust = f
}

// Close writes the summaries of the decisions counted but not written yet
// (see Record), of every run, and closes the audit file, if any.
func (s *Store) Close() error {
	s.runsMu.Lock()
	runs := make([]*Run, 0, len(s.runs))
	for _, r := range s.runs {
		runs = append(runs, r)
	}
	s.runsMu.Unlock()
	for _, r := range runs {
		s.audit.summarize(r, true)
	}
	s.audit.summaries("", s.unrun.take(true))
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
		s.failures.Add(1)
		s.log.Error().Err(err).Str("policy", s.path).Msg("policy: cannot read the file; the policy in force stays")
		return false, err
	}
	sum := sha256.Sum256(b)
	if sum == s.sum || (sum == s.rejected && !force) {
		s.mu.Unlock()
		return false, nil
	}
	reject := func(err error, what string) (bool, error) {
		s.failures.Add(1)
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
	if s.adjust != nil {
		if p, err = s.adjust(p); err != nil {
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
	// The subscribers first (the proxy's tool list, the pool, the tool's
	// schema), then the line that says the new policy is in force.
	for _, f := range subs {
		f(snap)
	}
	s.log.Info().Str("policy", s.path).Int("generation", snap.Gen).Msg("policy: reloaded")
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
	if a.Sandbox.OCIRuntime != b.Sandbox.OCIRuntime {
		out = append(out, "sandbox.oci_runtime")
	}
	if a.Sandbox.Image != b.Sandbox.Image {
		out = append(out, "sandbox.image")
	}
	if a.Sandbox.Variant != b.Sandbox.Variant {
		out = append(out, "sandbox.variant")
	}
	if a.Sandbox.MaxConcurrent != b.Sandbox.MaxConcurrent {
		out = append(out, "sandbox.max_concurrent")
	}
	if a.Sandbox.Queue != b.Sandbox.Queue {
		out = append(out, "sandbox.queue")
	}
	if a.Tools.LockFile != b.Tools.LockFile {
		out = append(out, "tools.lock_file")
	}
	if a.Sandbox.MaxRequestBytes != b.Sandbox.MaxRequestBytes {
		out = append(out, "sandbox.max_request_bytes")
	}
	if a.Sandbox.RequireEnforcedLimits != b.Sandbox.RequireEnforcedLimits {
		out = append(out, "sandbox.require_enforced_limits")
	}
	if a.Artifacts.Dir != b.Artifacts.Dir {
		out = append(out, "artifacts.dir")
	}
	if a.Artifacts.Expiry != b.Artifacts.Expiry {
		out = append(out, "artifacts.expiry")
	}
	if a.Artifacts.MaxBytesKept != b.Artifacts.MaxBytesKept {
		out = append(out, "artifacts.max_bytes_kept")
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

// Bounds of the runs a [Store] tracks for other processes (Remote): the
// bridges that use this process as their MCP proxy over HTTP.
const (
	// MaxRemoteRuns is how many runs of other processes a [Store] tracks at
	// once. A new run past it is refused (RunRefused) rather than a live one
	// forgotten: forgetting a run would hand it a fresh call budget.
	MaxRemoteRuns = 10_000
	// MaxRunLife is the longest a [Store] keeps a remote run: a run that says
	// it has more time left than this is refused, and a run that does not
	// say is kept this long after its last call.
	MaxRunLife = 24 * time.Hour
	// RunGrace is how long a remote run is kept past the deadline its bridge
	// gave: time for the bridge to kill the container, and for the time
	// left it sent to reach this process.
	RunGrace = time.Minute
	// MaxRunIDLen is the longest run id a [Store] accepts from another
	// process; ids are lower-case letters and digits (the bridge makes 12
	// hex digits).
	MaxRunIDLen = 32
)

// Rule names of the refusals of Remote, as audit records name them.
const (
	RuleRunID   = "proxy.run_id"       // the run id is not one the bridge makes
	RuleRuns    = "proxy.max_runs"     // MaxRemoteRuns runs are in flight
	RuleRunLife = "proxy.max_run_life" // the run says it lasts longer than MaxRunLife
)

// How often a [Store] looks for remote runs to forget: when a new one comes,
// at most every sweepEvery, or every sweepIfFull when it is full.
const (
	sweepEvery  = 10 * time.Second
	sweepIfFull = time.Second
)

// RunRefused is why a [Store] will not track a run (Remote). Nothing was
// allocated for the run.
type RunRefused struct {
	// Rule names the bound: RuleRunID, RuleRuns or RuleRunLife.
	Rule string
	// Invalid is set when the run id itself is wrong, not a limit reached.
	Invalid bool
	msg     string
}

func (e *RunRefused) Error() string { return e.msg }

// Run is one run's view of the policy: the snapshot it started with and
// its tool-call budget.
type Run struct {
	ID    string
	Snap  *Snapshot
	calls atomic.Int64
	local bool  // begun by this process (Begin): ended by End, never swept
	until int64 // remote runs: unix nanos after which the Store forgets the run; guarded by Store.runsMu
	tally tally // its audit records (Store.Record)

	vault  VaultSlot
	shared atomic.Pointer[VaultSlot] // ShareVault's, used instead of vault
}

// MaxVaultBytes bounds the bytes of the values one run's vault holds.
const MaxVaultBytes = 16 << 20

// A VaultSlot holds a vault made on first use. Each [Run] has its own; the
// runs of one session share the session's ([Run.ShareVault]). The zero
// value is an empty slot.
type VaultSlot struct {
	v atomic.Pointer[tokenize.Vault]
}

// ShareVault makes the run use slot's vault rather than its own: a
// session's calls share one, so that a placeholder kept in a variable from
// an earlier call still stands for its own value (and a later call's new
// value never takes its name). Call it before the run's first tool call.
func (r *Run) ShareVault(slot *VaultSlot) { r.shared.Store(slot) }

func (r *Run) slot() *VaultSlot {
	if s := r.shared.Load(); s != nil {
		return s
	}
	return &r.vault
}

// Vault is the run's personal values and their placeholders
// (tokenize.max_values of them at most), made on first use: it lives as
// long as the run (or the session whose vault it shares), and only in this
// process's memory.
func (r *Run) Vault() *tokenize.Vault {
	slot := r.slot()
	if v := slot.v.Load(); v != nil {
		return v
	}
	v := tokenize.NewVault(r.Snap.Policy.Tokenize.MaxValues, MaxVaultBytes)
	if slot.v.CompareAndSwap(nil, v) {
		return v
	}
	return slot.v.Load()
}

// HoldsValues reports whether the run holds personal values.
func (r *Run) HoldsValues() bool {
	if r == nil {
		return false
	}
	v := r.slot().v.Load()
	return v != nil && v.Len() > 0
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
// call it; End releases the run. Local runs are not counted against
// MaxRemoteRuns: the bridge's run slots (sandbox.max_concurrent) bound them.
func (s *Store) Begin(runID string) *Run {
	r := &Run{ID: runID, Snap: s.Current(), local: true}
	s.runsMu.Lock()
	old := s.runs[runID]
	if old != nil && !old.local {
		s.remote--
	}
	s.runs[runID] = r
	s.runsMu.Unlock()
	if old != nil {
		s.audit.summarize(old, true)
	}
	return r
}

// End forgets the run, after writing the summaries of its decisions that
// were counted but not written, if [Auditor.RunEnd] has not.
func (s *Store) End(runID string) {
	s.runsMu.Lock()
	r := s.runs[runID]
	if r != nil && !r.local {
		s.remote--
	}
	delete(s.runs, runID)
	s.runsMu.Unlock()
	if r != nil {
		s.audit.summarize(r, true)
	}
}

// Run is the run this [Store] tracks as runID, or nil.
func (s *Store) Run(runID string) *Run {
	s.runsMu.Lock()
	defer s.runsMu.Unlock()
	return s.runs[runID]
}

// Remote returns the run runID of another process (a bridge that uses this
// one as its MCP proxy: the run began and ends there), pinning it to the
// policy in force now if this [Store] does not track it yet. A run begun here
// (Begin) is returned as it is.
//
// deadline is when the run ends, by this process's clock (zero: its bridge
// did not say). The [Store] keeps a remote run, and so its spent call budget,
// until RunGrace after the latest deadline it was given, or MaxRunLife after
// its last call when it was given none: never while the run may still
// make calls, whatever this process's own sandbox.max_timeout. So that this
// holds with bounded memory, a new run is refused when MaxRemoteRuns runs
// that may still be live are tracked, and a run whose deadline is further
// than MaxRunLife away is refused.
//
// The error, a *RunRefused, says why; nothing is allocated then.
func (s *Store) Remote(runID string, deadline time.Time) (*Run, error) {
	r, gone, err := s.remote1(runID, deadline)
	for _, g := range gone {
		s.audit.summarize(g, true)
	}
	return r, err
}

// remote1 is Remote but for the summaries of the runs it forgot (gone),
// which are written without runsMu held.
func (s *Store) remote1(runID string, deadline time.Time) (r *Run, gone []*Run, err error) {
	if !ValidRunID(runID) {
		got := fmt.Sprintf("%d bytes", len(runID))
		if len(runID) <= MaxRunIDLen {
			got = fmt.Sprintf("%q", runID)
		}
		return nil, nil, &RunRefused{Rule: RuleRunID, Invalid: true, msg: fmt.Sprintf(
			"invalid run id (%s): a run id is 1 to %d lower-case letters and digits; the bridge sends the id of the run it made", got, MaxRunIDLen)}
	}
	now := s.now()
	s.runsMu.Lock()
	defer s.runsMu.Unlock()
	r = s.runs[runID]
	if r != nil && r.local {
		return r, nil, nil
	}
	// Every call may sweep (at most every sweepEvery), not only a new run's:
	// the summaries of the runs forgotten are written soon after their end.
	gone = s.sweep(now, false)
	if r != nil && now.UnixNano() > r.until {
		// A call after the run's end: forget the run (if the sweep has not).
		if s.runs[runID] == r {
			delete(s.runs, runID)
			s.remote--
			gone = append(gone, r)
		}
		r = nil
	}
	until := now.Add(MaxRunLife).UnixNano()
	if !deadline.IsZero() {
		if left := deadline.Sub(now); left > MaxRunLife {
			return nil, gone, &RunRefused{Rule: RuleRunLife, msg: fmt.Sprintf(
				"this run may last another %s, longer than the %s this MCP proxy keeps a run's call budget: "+
					"give the bridge a --max-timeout (sandbox.max_timeout) of at most %s",
				left.Round(time.Second), units.FormatDuration(MaxRunLife), units.FormatDuration(MaxRunLife))}
		}
		until = deadline.Add(RunGrace).UnixNano()
	}
	if r == nil {
		if s.remote >= MaxRemoteRuns {
			gone = append(gone, s.sweep(now, true)...)
		}
		if s.remote >= MaxRemoteRuns {
			return nil, gone, &RunRefused{Rule: RuleRuns, msg: fmt.Sprintf(
				"too many runs in flight on this MCP proxy: it keeps the call budgets of at most %d runs that may still be live, "+
					"and forgets none before its end; try again when some have ended, or give some bridges a proxy of their own", MaxRemoteRuns)}
		}
		r = &Run{ID: runID, Snap: s.Current()}
		s.runs[runID] = r
		s.remote++
	}
	// Never earlier than it was: a later call cannot shorten the run's life.
	r.until = max(r.until, until)
	return r, gone, nil
}

// ValidRunID says whether id is a run id as the bridge makes them: 1 to
// MaxRunIDLen lower-case letters and digits.
func ValidRunID(id string) bool {
	if len(id) == 0 || len(id) > MaxRunIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// sweep forgets the remote runs past their time, and returns them (their
// audit summaries are still to write). Called with runsMu held; does the
// work at most every sweepEvery, or sweepIfFull when full is set (a full
// [Store] looks harder, but a refused caller in a loop must not make it walk
// every run on every call).
func (s *Store) sweep(now time.Time, full bool) (gone []*Run) {
	every := sweepEvery
	if full {
		every = sweepIfFull
	}
	if now.Sub(s.lastSweep) < every {
		return nil
	}
	s.lastSweep = now
	for id, r := range s.runs {
		if !r.local && now.UnixNano() > r.until {
			delete(s.runs, id)
			s.remote--
			gone = append(gone, r)
		}
	}
	for key, v := range s.vaults {
		if now.UnixNano() > v.until {
			delete(s.vaults, key)
		}
	}
	return gone
}

// sharedVault is a remote session's vault (ShareVault): kept until its
// session can make no more calls.
type sharedVault struct {
	slot  VaultSlot
	until int64 // unix nanos; guarded by Store.runsMu
}

// ShareVault makes the remote run r use the vault of the session key names
// (made on first use), which a bridge using this process as its MCP proxy
// sends with each call of a session's run: so that a session's calls share
// their values here as they do in a bridge's own proxy. ends is when the
// session ends at the latest, by this process's clock; the vault is kept
// until then (RunGrace after, at most MaxRunLife from now), whatever the
// runs. A run begun here (Begin) keeps its own arrangement. At most
// MaxRemoteRuns vaults are kept; the error, a *RunRefused, says why one is
// refused.
func (s *Store) ShareVault(r *Run, key string, ends time.Time) error {
	if r == nil || r.local {
		return nil
	}
	if !ValidRunID(key) {
		return &RunRefused{Rule: RuleRunID, Invalid: true, msg: fmt.Sprintf(
			"invalid session vault key (%d bytes): 1 to %d lower-case letters and digits", len(key), MaxRunIDLen)}
	}
	now := s.now()
	until := now.Add(MaxRunLife)
	if !ends.IsZero() && ends.Add(RunGrace).Before(until) {
		until = ends.Add(RunGrace)
	}
	s.runsMu.Lock()
	defer s.runsMu.Unlock()
	v := s.vaults[key]
	if v == nil || now.UnixNano() > v.until {
		if len(s.vaults) >= MaxRemoteRuns && now.Sub(s.lastVaultSweep) >= sweepIfFull {
			s.lastVaultSweep = now
			for k, old := range s.vaults {
				if now.UnixNano() > old.until {
					delete(s.vaults, k)
				}
			}
		}
		if len(s.vaults) >= MaxRemoteRuns {
			return &RunRefused{Rule: RuleRuns, msg: fmt.Sprintf(
				"too many sessions on this MCP proxy: it keeps the values of at most %d sessions that may still be live; "+
					"try again when some have ended, or give some bridges a proxy of their own", MaxRemoteRuns)}
		}
		v = &sharedVault{}
		s.vaults[key] = v
	}
	v.until = max(v.until, until.UnixNano())
	r.ShareVault(&v.slot)
	return nil
}
