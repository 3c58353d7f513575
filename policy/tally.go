package policy

import (
	"sync"
	"time"
)

// Bounds of the audit records of tool calls. Code that loops on a refused
// call (over its budget, denied, rate limited, too big) must not be able to
// fill the disk with records: past these bounds decisions are counted, not
// written, and the counts are written as tool_call_summary records. No
// decision goes unrecorded: each is either a tool_call record or counted
// in a summary's "repeated".
const (
	// AuditRepeats is how many refusals of one kind (the run, server, tool
	// and the rule or limit that refused) are written one by one; the rest
	// are counted and summarized when the run ends.
	AuditRepeats = 20
	// AuditRunRecords is how many tool_call records one run writes in all.
	// Past it every decision of the run is counted, allowed ones too (which
	// budgets.max_calls_per_run bounds first, unless it is 0 or larger).
	AuditRunRecords = 10_000
	// AuditKinds is how many kinds of decision a run counts apart; those
	// of further kinds are counted together, as server, tool, decision and
	// rule "*". It bounds the memory of one run's counts.
	AuditKinds = 16
	// AuditWindow is how often the refusals of calls that have no run (no
	// run id, or a run the [Store] refused to track) are summarized: they
	// are counted process-wide, AuditRepeats of each kind written one by
	// one per window.
	AuditWindow = time.Minute
)

// tally counts the tool-call decisions of one run (or of calls with no
// run, per AuditWindow) and says which are written one by one.
type tally struct {
	mu         sync.Mutex
	written    int         // tool_call records written
	kinds      []tallyKind // at most AuditKinds
	other      tallyKind   // decisions of kinds beyond AuditKinds
	summarized int64       // decisions counted in summaries so far
	done       bool        // summarized for good: later decisions (calls still in flight) are written as they come
	since      time.Time   // calls with no run: when the window began
}

// tallyKind is one kind of decision, with how many of it were written and
// how many counted since the last summary.
type tallyKind struct {
	allowed                   bool
	server, tool, rule, error string
	other                     bool // the decisions of kinds beyond AuditKinds
	written                   int
	repeated                  int64
}

// admit says whether c is written one by one; if not, it is counted.
func (t *tally) admit(c Call) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.admitLocked(c)
}

func (t *tally) admitLocked(c Call) bool {
	if t.done {
		return true
	}
	if c.Allowed && t.written < AuditRunRecords {
		t.written++
		return true
	}
	k := t.kind(c)
	if !c.Allowed && k.written < AuditRepeats && t.written < AuditRunRecords {
		k.written++
		t.written++
		return true
	}
	k.repeated++
	return false
}

// kind is c's kind, added if there is room.
func (t *tally) kind(c Call) *tallyKind {
	for i := range t.kinds {
		k := &t.kinds[i]
		if k.allowed == c.Allowed && k.server == c.Server && k.tool == c.Tool && k.rule == c.Rule && k.error == c.Error {
			return k
		}
	}
	if len(t.kinds) == AuditKinds {
		t.other.other = true
		return &t.other
	}
	t.kinds = append(t.kinds, tallyKind{allowed: c.Allowed, server: c.Server, tool: c.Tool, rule: c.Rule, error: c.Error})
	return &t.kinds[len(t.kinds)-1]
}

// take returns the kinds counted since the last take, and zeroes their
// counts. final makes it the last: what comes after is written.
func (t *tally) take(final bool) []tallyKind {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = t.done || final
	return t.takeLocked()
}

func (t *tally) takeLocked() []tallyKind {
	var out []tallyKind
	take := func(k *tallyKind) {
		if k.repeated > 0 {
			out = append(out, *k)
			t.summarized += k.repeated
			k.repeated = 0
		}
	}
	for i := range t.kinds {
		take(&t.kinds[i])
	}
	take(&t.other)
	return out
}

// admitWindow is admit for the calls with no run: a window of AuditWindow
// that has passed is summarized (due) and a new one begins, with nothing
// written or counted.
func (t *tally) admitWindow(c Call, now time.Time) (write bool, due []tallyKind) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.since) >= AuditWindow || now.Before(t.since) {
		due = t.takeLocked()
		t.written, t.kinds, t.other, t.since = 0, nil, tallyKind{}, now
	}
	return t.admitLocked(c), due
}

// Record audits a tool-call decision of run r (nil: a call with no run id,
// or whose run the [Store] refused) within the bounds above: allowed calls
// are written one by one up to AuditRunRecords per run; refusals up to
// AuditRepeats of each kind, within that. What is not written is counted,
// and summarized when the run ends (RunEnd, End, or the [Store] forgetting a
// remote run, or closing). Refusals of calls with no run are summarized
// every AuditWindow instead; their allowed calls are all written.
func (s *Store) Record(r *Run, c Call) {
	switch {
	case r != nil:
		if r.tally.admit(c) {
			s.audit.Call(c)
		}
	case c.Allowed:
		s.audit.Call(c)
	default:
		write, due := s.unrun.admitWindow(c, s.now())
		s.audit.summaries("", due)
		if write {
			s.audit.Call(c)
		}
	}
}

// summarize writes what r's tally counted and has not summarized yet;
// final when the run has ended.
func (a *Auditor) summarize(r *Run, final bool) {
	a.summaries(r.ID, r.tally.take(final))
}

// SkillSave audits a skill save of run runID within the same bounds as
// its tool calls: saves are written one by one; refusals up to
// AuditRepeats of each kind (kind: the error type), the rest counted and
// summarized (tool_call_summary, server "skills", tool "save_skill") when
// the run ends. outcome is "saved", "replaced" or "refused"; client is the
// MCP client the run was for.
func (s *Store) SkillSave(runID, client, name string, bytes int, outcome, kind, why string) {
	c := Call{RunID: runID, Server: "skills", Tool: "save_skill", Allowed: outcome != "refused", Rule: kind}
	write := true
	if r := s.Run(runID); r != nil {
		write = r.tally.admit(c)
	} else if !c.Allowed {
		var due []tallyKind
		write, due = s.unrun.admitWindow(c, s.now())
		s.audit.summaries("", due)
	}
	if write {
		s.audit.SkillSave(runID, client, name, bytes, outcome, why)
	}
}
