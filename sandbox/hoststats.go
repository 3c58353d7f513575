package sandbox

import (
	"sync"
	"sync/atomic"
)

// HostStats is what an [Executor] holds on the host now, and how often its
// own budgets (budget.go) refused a request or cut a run off: what
// /metrics exports of it.
type HostStats struct {
	// ContainersAlive are the containers it created and has not removed
	// yet: runs', sessions' and the pool's.
	ContainersAlive int64
	// AnswerBytesPending are framed answers waiting for their runner to
	// read them; ResultBytesReserved the result capacity tool calls in
	// flight hold; RequestsInFlight the requests being answered.
	AnswerBytesPending, ResultBytesReserved, RequestsInFlight int64
	// ProtocolErrors counts runs ended for breaking the relay protocol.
	ProtocolErrors int64
	// Cutoffs counts, by budget, the requests refused and the runs cut
	// off: runner_stalled (a runner that did not read its answers),
	// host_time (a run's lookups used its host time), answer_bytes_run and
	// answer_bytes_bridge (an answer that did not fit the run's, or all
	// runs', unread answers).
	Cutoffs map[string]int64
}

// hostCounters are an Executor's counts behind [HostStats].
type hostCounters struct {
	requests                                    atomic.Int64
	protocol, stalled, hostTime, runAns, allAns atomic.Int64

	mu   sync.Mutex
	live map[string]struct{} // ids of containers created and not removed
}

func (h *hostCounters) created(id string) {
	h.mu.Lock()
	if h.live == nil {
		h.live = map[string]struct{}{}
	}
	h.live[id] = struct{}{}
	h.mu.Unlock()
}

func (h *hostCounters) removed(id string) {
	h.mu.Lock()
	delete(h.live, id)
	h.mu.Unlock()
}

// HostStats are the Executor's, now.
func (e *Executor) HostStats() HostStats {
	h := &e.host
	h.mu.Lock()
	alive := int64(len(h.live))
	h.mu.Unlock()
	return HostStats{
		ContainersAlive:     alive,
		AnswerBytesPending:  e.pending.inUse(),
		ResultBytesReserved: e.results.inUse(),
		RequestsInFlight:    h.requests.Load(),
		ProtocolErrors:      h.protocol.Load(),
		Cutoffs: map[string]int64{
			"runner_stalled":      h.stalled.Load(),
			"host_time":           h.hostTime.Load(),
			"answer_bytes_run":    h.runAns.Load(),
			"answer_bytes_bridge": h.allAns.Load(),
		},
	}
}

// HostStats are the open engine's executor's; false before the engine is
// open.
func (e *Engine) HostStats() (HostStats, bool) {
	e.mu.Lock()
	o := e.open
	e.mu.Unlock()
	if o == nil || o.ex == nil {
		return HostStats{}, false
	}
	return o.ex.HostStats(), true
}
