package toolhost

import (
	"slices"
	"sync"
	"time"
)

// callTimesWindow is how many of the latest tool calls [CallTimes] keeps.
const callTimesWindow = 1024

// CallTimes keeps how long the latest tool calls took, split into the
// upstream server's part and the bridge's own (the catalog lookup, the
// proxy's gate: rules, budgets, rates, tokenization; the audit record and
// the run's trace), for /debug/stats and the benchmarks. Calls a human
// was asked about are left out: their wait is not the bridge's cost.
// Bounded: a ring of the last callTimesWindow calls. Safe for concurrent
// use; the zero value is not usable, NewCallTimes is.
type CallTimes struct {
	mu       sync.Mutex
	n        int64 // calls recorded, ever
	bridge   []time.Duration
	upstream []time.Duration
}

// NewCallTimes returns an empty [CallTimes].
func NewCallTimes() *CallTimes {
	return &CallTimes{bridge: make([]time.Duration, callTimesWindow), upstream: make([]time.Duration, callTimesWindow)}
}

// record notes one call: its whole time in the bridge's handler and the
// upstream's part of it. A nil [CallTimes] records nothing.
func (c *CallTimes) record(total, upstream time.Duration) {
	if c == nil {
		return
	}
	c.mu.Lock()
	i := c.n % callTimesWindow
	c.bridge[i], c.upstream[i] = max(0, total-upstream), upstream
	c.n++
	c.mu.Unlock()
}

// CallTimesSummary is what [CallTimes] says of its window, in microseconds.
type CallTimesSummary struct {
	// Calls is how many calls were recorded since the bridge started;
	// Window how many of the latest the percentiles are of.
	Calls  int64 `json:"calls"`
	Window int   `json:"window"`
	// BridgeP50 and BridgeP99 are the bridge's own part of a call.
	BridgeP50 float64 `json:"bridge_us_p50"`
	BridgeP99 float64 `json:"bridge_us_p99"`
	// UpstreamP50 is the upstream server's part.
	UpstreamP50 float64 `json:"upstream_us_p50"`
}

// Summary returns the percentiles of the calls in the window.
func (c *CallTimes) Summary() CallTimesSummary {
	c.mu.Lock()
	w := int(min(c.n, callTimesWindow))
	s := CallTimesSummary{Calls: c.n, Window: w}
	bridge, upstream := slices.Clone(c.bridge[:w]), slices.Clone(c.upstream[:w])
	c.mu.Unlock()
	if w == 0 {
		return s
	}
	slices.Sort(bridge)
	slices.Sort(upstream)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	s.BridgeP50, s.BridgeP99, s.UpstreamP50 = us(rank(bridge, 50)), us(rank(bridge, 99)), us(rank(upstream, 50))
	return s
}

// rank is the p-th percentile of sorted, by nearest rank.
func rank(sorted []time.Duration, p int) time.Duration {
	i := (p*len(sorted) + 99) / 100
	return sorted[max(i-1, 0)]
}
