package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Removal retries. A container whose removal failed (the engine restarting,
// say) is not forgotten: it is removed again in the background, with
// backoff, until the engine says it is gone or the [Executor] is closed. A
// bridge that ends first leaves it to the next start's Reap, which removes
// the containers of bridges that are no longer running.
const (
	removeRetryFirst = time.Second
	removeRetryMax   = 30 * time.Second
)

// removals is an [Executor]'s set of containers still to be removed.
type removals struct {
	rt  Containers
	log zerolog.Logger

	mu      sync.Mutex
	ids     map[string]bool
	running bool          // the retry loop is running
	wake    chan struct{} // a new id, or Close
	closed  bool
	done    chan struct{} // closed when the loop ends
	// first and most are removeRetryFirst and removeRetryMax; tests shorten them.
	first, most time.Duration
	// removed, if set, is told of each container removed at last.
	removed func(id string)
}

func newRemovals(rt Containers, log zerolog.Logger) *removals {
	return &removals{rt: rt, log: log, ids: map[string]bool{}, wake: make(chan struct{}, 1),
		first: removeRetryFirst, most: removeRetryMax}
}

// add queues id for removal in the background; false once the removals
// are closed (nothing is queued then).
func (r *removals) add(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.ids[id] = true
	if !r.running {
		r.running = true
		r.done = make(chan struct{})
		go r.loop(r.done)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return true
}

// pending returns the ids still to be removed.
func (r *removals) pending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.ids))
	for id := range r.ids {
		ids = append(ids, id)
	}
	return ids
}

func (r *removals) loop(done chan struct{}) {
	defer close(done)
	delay := r.first
	for {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.wake:
			t.Stop()
		}
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if r.attempt(context.Background(), 30*time.Second) == 0 {
			r.mu.Lock()
			if len(r.ids) == 0 {
				r.running = false
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
		}
		if closed {
			return
		}
		delay = min(delay*2, r.most)
	}
}

// attempt tries every pending removal once, each within timeout, and
// returns how many are left.
func (r *removals) attempt(ctx context.Context, timeout time.Duration) int {
	for _, id := range r.pending() {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		err := r.rt.Remove(rctx, id)
		cancel()
		r.mu.Lock()
		if err == nil {
			delete(r.ids, id)
			if r.removed != nil {
				r.removed(id)
			}
			r.log.Info().Str("container", id).Msg("removed a container in the background")
		}
		r.mu.Unlock()
		if err != nil {
			r.log.Warn().Err(err).Str("container", id).Msg("removing container failed again; will retry")
		}
	}
	return len(r.pending())
}

// close makes one last attempt at each pending removal within ctx, stops
// the retries and returns the ids still left.
func (r *removals) close(ctx context.Context) []string {
	r.mu.Lock()
	r.closed = true
	done := r.done
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	if d, ok := ctx.Deadline(); ok {
		r.attempt(ctx, time.Until(d))
	} else {
		r.attempt(ctx, 30*time.Second)
	}
	return r.pending()
}
