package policy

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// Auditor writes one JSON line per tool-call decision and per run start and
// end, to a file or to the bridge's log. It never writes argument values,
// results or secrets: names, sizes, durations and the rule that decided.
type Auditor struct {
	log  zerolog.Logger
	file *os.File // nil when writing to the bridge's log
}

// OpenAuditor opens where a records (Audit.File: appended to, created
// 0600; "" or "stderr": log).
func OpenAuditor(a Audit, log zerolog.Logger) (*Auditor, error) {
	if a.File == "" || a.File == "stderr" {
		return &Auditor{log: log.With().Str("audit", "bridge").Logger()}, nil
	}
	f, err := os.OpenFile(a.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit file: %w", err)
	}
	return &Auditor{log: zerolog.New(io.Writer(f)).With().Timestamp().Str("audit", "bridge").Logger(), file: f}, nil
}

// Close closes the audit file, if there is one.
func (a *Auditor) Close() error {
	if a == nil || a.file == nil {
		return nil
	}
	return a.file.Close()
}

// Call is the record of one tool-call decision.
type Call struct {
	RunID, Server, Tool string
	Allowed             bool
	Rule                string // the part of the policy that decided (RuleName), or the limit that stopped it
	Error               string // the error type, when the call failed ("" when it succeeded or was denied)
	Duration            time.Duration
	ArgumentBytes       int
	ResultBytes         int
}

// Call records a tool-call decision.
func (a *Auditor) Call(c Call) {
	decision := "allow"
	if !c.Allowed {
		decision = "deny"
	}
	ev := a.log.Log().Str("event", "tool_call").Str("run_id", c.RunID).Str("server", c.Server).Str("tool", c.Tool).
		Str("decision", decision).Str("rule", c.Rule).
		Float64("duration_ms", float64(c.Duration.Microseconds())/1000).
		Int("argument_bytes", c.ArgumentBytes).Int("result_bytes", c.ResultBytes)
	if c.Error != "" {
		ev = ev.Str("error", c.Error)
	}
	ev.Send()
}

// RunStart records a run's start with the limits applied to it.
func (a *Auditor) RunStart(runID string, gen int, s Sandbox, timeout time.Duration) {
	a.log.Log().Str("event", "run_start").Str("run_id", runID).Int("policy_generation", gen).
		Dur("timeout", timeout).Int64("memory", s.Memory).Float64("cpus", s.CPUs).Int64("pids", s.Pids).
		Int64("tmpfs_size", s.TmpfsSize).Int64("output_limit", s.OutputLimit).Send()
}

// RunEnd records how a run ended.
func (a *Auditor) RunEnd(runID, status string, exitCode int, d time.Duration, calls int64) {
	a.log.Log().Str("event", "run_end").Str("run_id", runID).Str("status", status).Int("exit_code", exitCode).
		Float64("duration_ms", float64(d.Microseconds())/1000).Int64("tool_calls", calls).Send()
}
