package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// What the bridge spends on the host for a run's requests is bounded where
// it is spent: a runner that floods requests, stops reading its answers or
// asks for costly lookups ends up refused or cut off, never growing the
// bridge. docs/security.md lists these bounds.
const (
	// maxRequests is how many requests (tool calls and queries) of one run
	// may be in flight, counting answers computed but not yet written.
	// When all are taken the bridge stops reading the runner's frames, so
	// the runner's writes block: backpressure instead of goroutines.
	maxRequests = 64
	// maxPendingBytes bounds the framed answers of one run that wait to be
	// written; maxBridgePendingBytes bounds them over all runs of an
	// Executor. An answer that does not fit is replaced by a small `limit`
	// error: the memory it would have held is never held.
	maxPendingBytes       = 32 << 20
	maxBridgePendingBytes = 128 << 20
	// A tool call (and a resource read, relay.OpReadResource) reserves the largest result it may bring
	// ([ExecutorOptions.ResultBytes], [relay.MaxResultBytes] by default) before it goes to
	// the upstream, and gives it back once its answer is written: a result
	// is read, decoded and encoded before its size is known, so the only
	// bound on that memory is how many can be in the making at once. 64 MiB
	// a run (8 calls at once at 8 MiB) and 128 MiB for all runs (16);
	// further calls wait their turn. A lower result limit lets more run.
	maxRunResultBytes    = 64 << 20
	maxBridgeResultBytes = 128 << 20
	// writeTimeoutDefault bounds each write to the runner. A runner that
	// does not take an answer within it is cut off: its run ends with an
	// error saying so, and its container is killed.
	writeTimeoutDefault = 10 * time.Second
	// hostTimePerRun is the time the bridge spends computing one run's
	// answers itself (listing tools, searching, suggesting names for an
	// unknown one), one such request at a time per run.
	hostTimePerRun = 5 * time.Second
	// maxErrorMessage bounds the message of an error answer sent into the
	// sandbox (an upstream's error text, say); longer ones are cut.
	maxErrorMessage = 8 << 10
)

// ErrRunnerStalled is the error of a run whose runner stopped reading the
// bridge's answers: it is cut off rather than allowed to hold them.
var ErrRunnerStalled = errors.New("the code stopped reading the bridge's answers")

// ErrHostBudget is returned by HostMeter.Do once the run has used its host time.
var ErrHostBudget = errors.New("host time for this run's lookups is used up")

// HostMeter meters the time the bridge spends on one run's requests that it
// answers itself, such as searches, tool lists and the closest names to an
// unknown one. Such work runs one piece at a time per run, and stops being
// done once the run has used its budget. The zero value and a nil
// *HostMeter meter nothing.
type HostMeter struct {
	mu    sync.Mutex
	used  time.Duration
	limit time.Duration
	// spent, if set, counts the meters whose budget ran out (once each).
	spent   *atomic.Int64
	counted bool
}

// NewHostMeter returns a meter with limit of host time.
func NewHostMeter(limit time.Duration) *HostMeter { return &HostMeter{limit: limit} }

// Do runs f unless the run's budget is used up, waiting for the run's other
// metered work to finish first, and charges f's duration. It fails with an
// error wrapping ErrHostBudget, without running f, once the budget is used.
func (m *HostMeter) Do(f func()) error {
	if m == nil || m.limit <= 0 {
		f()
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.used >= m.limit {
		if m.spent != nil && !m.counted {
			m.counted = true
			m.spent.Add(1)
		}
		return fmt.Errorf("%w: the bridge spent %s on its searches, tool lists and name lookups (at most %s per run); reuse the answers you have",
			ErrHostBudget, m.used.Round(time.Millisecond), m.limit)
	}
	start := time.Now()
	f()
	m.used += time.Since(start)
	return nil
}

// Used is the host time charged so far.
func (m *HostMeter) Used() time.Duration {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.used
}

type hostMeterKey struct{}

// WithHostMeter returns ctx carrying m; the [Executor] gives each run's
// [ToolHandler] calls a context with the run's meter.
func WithHostMeter(ctx context.Context, m *HostMeter) context.Context {
	return context.WithValue(ctx, hostMeterKey{}, m)
}

// HostMeterFrom returns the meter in ctx, or nil (which meters nothing).
func HostMeterFrom(ctx context.Context) *HostMeter {
	m, _ := ctx.Value(hostMeterKey{}).(*HostMeter)
	return m
}

// Charge adds d of host work done outside Do, such as a lookup that turned
// out to be answered by the bridge itself.
func (m *HostMeter) Charge(d time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.used += d
	m.mu.Unlock()
}

// reserve is a budget of bytes, taken at once (tryAcquire) or waited for
// (acquire): a weighted semaphore. A request larger than the whole budget
// is let through alone when it waits, never when it tries.
type reserve struct {
	mu    sync.Mutex
	limit int64
	used  int64
	freed chan struct{} // closed, and replaced, when bytes are given back
}

func newReserve(limit int64) *reserve {
	return &reserve{limit: limit, freed: make(chan struct{})}
}

// acquire waits until n bytes are free and takes them, or returns ctx's error.
func (r *reserve) acquire(ctx context.Context, n int64) error {
	for {
		r.mu.Lock()
		if r.used+n <= r.limit || r.used == 0 {
			r.used += n
			r.mu.Unlock()
			return nil
		}
		freed := r.freed
		r.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryAcquire takes n bytes if they are free now, and reports whether it did.
func (r *reserve) tryAcquire(n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used+n > r.limit {
		return false
	}
	r.used += n
	return true
}

func (r *reserve) release(n int64) {
	r.mu.Lock()
	r.used -= n
	close(r.freed)
	r.freed = make(chan struct{})
	r.mu.Unlock()
}

// inUse is the bytes taken.
func (r *reserve) inUse() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}
