package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"
)

// Auditor writes one JSON line per tool-call decision and per run start and
// end, to a file or to the bridge's log; past the bounds of [Store.Record],
// decisions are counted and summarized instead. It never writes argument
// values, results or secrets: names, sizes, durations and the rule that
// decided.
//
// Where it writes can change under it (Open, on a reload or SIGHUP): a
// record being written finishes in the old place, the next one goes to the
// new, and none is lost.
type Auditor struct {
	base zerolog.Logger // the bridge's log

	mu   sync.RWMutex // held for reading while a record is written
	cfg  Audit
	log  zerolog.Logger
	file *os.File // nil when writing to the bridge's log
}

// OpenAuditor returns an [Auditor] writing where a says (Audit.File:
// appended to, created 0600; "" or "stderr": log).
func OpenAuditor(a Audit, log zerolog.Logger) (*Auditor, error) {
	au := &Auditor{base: log}
	if err := au.Open(a); err != nil {
		return nil, err
	}
	return au, nil
}

// Open makes the [Auditor] write where a says from now on, opening the file
// again even if it is the same path (after log rotation, say). On error
// nothing changes.
func (a *Auditor) Open(cfg Audit) error {
	l := a.base.With().Str("audit", "bridge").Logger()
	var f *os.File
	if cfg.File != "" && cfg.File != "stderr" {
		var err error
		f, err = os.OpenFile(cfg.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			if cerr := cfg.Check(); cerr != nil {
				return cerr
			}
			return fmt.Errorf("audit.file: %w", err)
		}
		l = zerolog.New(io.Writer(f)).With().Timestamp().Str("audit", "bridge").Logger()
	}
	a.mu.Lock()
	old := a.file
	a.cfg, a.log, a.file = cfg, l, f
	a.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

// Config is where the [Auditor] writes.
func (a *Auditor) Config() Audit {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.cfg
}

// Close closes the audit file, if there is one.
func (a *Auditor) Close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.file == nil {
		return nil
	}
	err := a.file.Close()
	a.file, a.log = nil, a.base.With().Str("audit", "bridge").Logger()
	return err
}

// event starts a record; done must be called after Send. Records in the
// bridge's log are at info level (so `bridge run`, which logs warnings
// only, keeps the code's output clean); in an audit file they are all kept.
func (a *Auditor) event() (*zerolog.Event, func()) {
	a.mu.RLock()
	if a.file == nil {
		return a.log.Info(), a.mu.RUnlock
	}
	return a.log.Log(), a.mu.RUnlock
}

// Call is the record of one tool-call decision.
type Call struct {
	RunID, Server, Tool string
	Allowed             bool
	Rule                string // the part of the policy that decided (RuleName), or the limit that stopped it
	// Asked is, for a call the policy asks about, how the human answered:
	// accepted, declined, cancelled, timeout, remembered, or fallback
	// (tools.ask_fallback decided: the human could not be asked).
	Asked         string
	Error         string // the error type, when the call failed ("" when it succeeded or was denied)
	Duration      time.Duration
	ArgumentBytes int
	ResultBytes   int
	// URI is, for a resource read (Tool ResourcesRead), the resource's
	// URI; never its contents.
	URI string
}

// Call records a tool-call decision, or a resource listing or read (Tool
// ResourcesList or ResourcesRead): events resource_list and resource_read,
// with the URI read and no tool.
func (a *Auditor) Call(c Call) {
	decision := "allow"
	if !c.Allowed {
		decision = "deny"
	}
	ev, done := a.event()
	defer done()
	switch c.Tool {
	case ResourcesRead:
		ev = ev.Str("event", "resource_read").Str("run_id", c.RunID).Str("server", c.Server).Str("uri", c.URI)
	case ResourcesList:
		ev = ev.Str("event", "resource_list").Str("run_id", c.RunID).Str("server", c.Server)
	default:
		ev = ev.Str("event", "tool_call").Str("run_id", c.RunID).Str("server", c.Server).Str("tool", c.Tool)
	}
	ev = ev.Str("decision", decision).Str("rule", c.Rule).
		Float64("duration_ms", float64(c.Duration.Microseconds())/1000).
		Int("argument_bytes", c.ArgumentBytes).Int("result_bytes", c.ResultBytes)
	if c.Asked != "" {
		ev = ev.Str("asked", c.Asked)
	}
	if c.Error != "" {
		ev = ev.Str("error", c.Error)
	}
	ev.Send()
}

// SkillSave records a run's attempt to save a skill: outcome is "saved",
// "replaced" or "refused", and why says why it was refused; client is the
// MCP client the run was for ("" when unknown).
func (a *Auditor) SkillSave(runID, client, name string, bytes int, outcome, why string) {
	ev, done := a.event()
	defer done()
	ev = ev.Str("event", "skill_save").Str("run_id", runID)
	if client != "" {
		ev = ev.Str("client", client)
	}
	ev = ev.Str("skill", name).Int("source_bytes", bytes).Str("outcome", outcome)
	if why != "" {
		ev = ev.Str("reason", why)
	}
	ev.Send()
}

// Input records one file a call passed in: its path under /tmp/inputs,
// its size, and where it came from ("text", "base64" or the URI); never
// its content.
func (a *Auditor) Input(runID, path string, size int64, source string) {
	ev, done := a.event()
	defer done()
	ev.Str("event", "input").Str("run_id", runID).Str("path", path).Int64("bytes", size).Str("source", source).Send()
}

// SnapshotRecord is the record of a session's snapshot saved, restored,
// evicted, expired, removed or refused: whose, its label, kind and size;
// never its content.
type SnapshotRecord struct {
	// Action is saved, restored, evicted (removed to make room for a
	// newer one of the client), expired, removed or refused.
	Action string
	Owner  string // the client (principal) it belongs to
	Label  string
	Kind   string // files or memory
	Bytes  int64
	// MemoryBytes is a memory snapshot's checkpoint, besides Bytes.
	MemoryBytes int64
	// RunID and Session are the call's that saved or restored it, when
	// one did.
	RunID, Session string
	Reason         string // why, when the action has one
}

// Snapshot records a change of a session's snapshot.
func (a *Auditor) Snapshot(r SnapshotRecord) {
	ev, done := a.event()
	defer done()
	ev = ev.Str("event", "snapshot").Str("action", r.Action).Str("client", r.Owner).Str("label", r.Label)
	if r.Kind != "" {
		ev = ev.Str("kind", r.Kind)
	}
	ev = ev.Int64("bytes", r.Bytes)
	if r.MemoryBytes != 0 {
		ev = ev.Int64("memory_bytes", r.MemoryBytes)
	}
	if r.RunID != "" {
		ev = ev.Str("run_id", r.RunID)
	}
	if r.Session != "" {
		ev = ev.Str("session", r.Session)
	}
	if r.Reason != "" {
		ev = ev.Str("reason", r.Reason)
	}
	ev.Send()
}

// RunStart records a run's start with the limits applied to it.
func (a *Auditor) RunStart(runID, session string, gen int, s Sandbox, timeout time.Duration) {
	ev, done := a.event()
	defer done()
	ev = ev.Str("event", "run_start").Str("run_id", runID)
	if session != "" {
		ev = ev.Str("session", session)
	}
	ev.Int("policy_generation", gen).
		Str("oci_runtime", s.OCIRuntime).Dur("timeout", timeout).Int64("memory", s.Memory).Float64("cpus", s.CPUs).Int64("pids", s.Pids).
		Int64("tmpfs_size", s.TmpfsSize).Int64("output_limit", s.OutputLimit).Send()
}

// RunEnd records how run r ended: first the summaries of its decisions that
// were counted rather than written (see [Store.Record]), then the run_end
// record, which says how many there were (tool_calls_summarized).
func (a *Auditor) RunEnd(r *Run, status string, exitCode int, d time.Duration) {
	a.summarize(r, true)
	r.tally.mu.Lock()
	summarized := r.tally.summarized
	r.tally.mu.Unlock()
	ev, done := a.event()
	defer done()
	ev.Str("event", "run_end").Str("run_id", r.ID).Str("status", status).Int("exit_code", exitCode).
		Float64("duration_ms", float64(d.Microseconds())/1000).Int64("tool_calls", r.Calls()).
		Int64("tool_calls_summarized", summarized).Send()
}

// summaries writes one tool_call_summary record per kind: how many of its
// decisions were counted, not written one by one.
func (a *Auditor) summaries(runID string, kinds []tallyKind) {
	for _, k := range kinds {
		decision := "deny"
		if k.allowed {
			decision = "allow"
		}
		server, tool, rule := k.server, k.tool, k.rule
		if k.other {
			server, tool, decision, rule = "*", "*", "*", "*"
		}
		ev, done := a.event()
		ev = ev.Str("event", "tool_call_summary").Str("run_id", runID).Str("server", server).Str("tool", tool).
			Str("decision", decision).Str("rule", rule)
		if k.error != "" && !k.other {
			ev = ev.Str("error", k.error)
		}
		ev.Int64("repeated", k.repeated).Send()
		done()
	}
}

// Check says whether the bridge, as this user, could open the audit file,
// without creating it: the folder must exist and be writable, and a file
// already there must be a writable regular file. The error says what to do.
func (a Audit) Check() error {
	if a.File == "" || a.File == "stderr" {
		return nil
	}
	fi, err := os.Stat(a.File)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("audit.file: %s is a folder; name a file in it, e.g. %s", a.File, filepath.Join(a.File, "audit.jsonl"))
	case err == nil:
		f, err := os.OpenFile(a.File, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("audit.file: %s cannot be opened for appending as uid %d (%v): make it writable for the user that runs the bridge, or set audit.file to a file that is", a.File, os.Getuid(), errors.Unwrap(err))
		}
		return f.Close()
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("audit.file: %w", err)
	}
	dir := filepath.Dir(a.File)
	di, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("audit.file: the folder %s does not exist: create it (mkdir -p %s) writable for the user that runs the bridge, or set audit.file to a path in a folder that exists", dir, dir)
	case err != nil:
		return fmt.Errorf("audit.file: %w", err)
	case !di.IsDir():
		return fmt.Errorf("audit.file: %s is not a folder", dir)
	}
	if err := syscall.Access(dir, 2|1); err != nil { // W_OK|X_OK
		return fmt.Errorf("audit.file: the folder %s is not writable as uid %d: create the file there writable for that user (or give it the folder), or set audit.file to a path that is", dir, os.Getuid())
	}
	return nil
}

// Audit says where decision and run records go.
type Audit struct {
	// File is a path to append JSON lines to; "" or "stderr" means the
	// bridge's stderr log.
	File string
}

var auditKeys = []string{"file"}

func (p *parser) audit(k, v *yaml.Node, a *Audit) {
	p.keys(k, v, "audit", auditKeys, func(key, name string, k, v *yaml.Node) {
		if s, ok := p.str(k, v, name); ok {
			a.File = s
		}
	})
}
