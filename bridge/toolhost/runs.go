package toolhost

import (
	"sync"
	"time"

	"github.com/bridge-mcp/bridge/proxy"
)

// Run is a run's side of its tool calls: who asks the human about a call
// the policy asks about, and where each call is traced.
type Run interface {
	proxy.Asker
	// Record adds one call to the run's trace.
	Record(TraceEntry)
}

// sessionRun is a [Run] of a session: Vault names the session's tokenized
// values, which a remote MCP proxy keeps for its runs until ends
// ([proxy.Call] Vault); "" outside a session.
type sessionRun interface {
	Vault() (key string, ends time.Time)
}

// TraceEntry is one tool call of a run, as structuredContent.tool_calls
// reports it: never the arguments or the result, only their sizes.
type TraceEntry struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Decision is "allowed", "denied", "asked" (the human was asked, or the
	// policy's fallback applied: Answer says which) or "refused" (stopped
	// before the policy's rules: unknown tool, a budget).
	Decision      string  `json:"decision"`
	Answer        string  `json:"answer,omitempty"`
	DurationMS    float64 `json:"duration_ms"`
	ArgumentBytes int     `json:"argument_bytes"`
	ResultBytes   int     `json:"result_bytes"`
	// URI is, for a resource read (Tool "resources/read"), the resource's
	// URI as the code gave it, cut to 256 bytes; a listing's Tool is
	// "resources/list".
	URI string `json:"uri,omitempty"`
	// Error is the error type of a call that failed (denied, limit,
	// timeout, upstream, ...); a tool's own error result is not one.
	Error string `json:"error,omitempty"`
}

// Runs are the runs whose calls a Handler serves, by run id: the MCP
// server registers each run before its code runs. A call of a run it does
// not know (`bridge run`, a run already over) is neither asked about nor
// traced: an ask gets the policy's tools.ask_fallback. Safe for concurrent
// use; bounded by the runs in flight.
type Runs struct {
	mu sync.Mutex
	m  map[string]Run
}

// NewRuns returns an empty [Runs].
func NewRuns() *Runs { return &Runs{m: map[string]Run{}} }

// Register makes run the [Run] of runID until unregister is called.
func (r *Runs) Register(runID string, run Run) (unregister func()) {
	r.mu.Lock()
	r.m[runID] = run
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if r.m[runID] == run {
			delete(r.m, runID)
		}
		r.mu.Unlock()
	}
}

// get is runID's [Run], nil if none is registered (or r is nil).
func (r *Runs) get(runID string) Run {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[runID]
}
