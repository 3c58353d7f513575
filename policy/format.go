package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/bridge-mcp/bridge/internal/units"
)

// Format writes p as a policy file with every key written out, defaults
// included, in the order docs/policy.md lists them: sizes in the largest
// binary unit that is exact (512Mi), durations as Go writes them without
// zero units (60s, 5m, 1h30m), rates in the shortest exact form (10/s,
// 90/m). Parse(Format(p)) equals p but for Source and the rules' and
// rates' Line and Column. It is what `bridge policy check` prints.
func Format(p *Policy) string {
	var b strings.Builder
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	if p.Source != "" {
		w(0, "# The policy in %s with every default written out.", strconv.Quote(p.Source))
	} else {
		w(0, "# The built-in default policy.")
	}
	w(0, "version: %d", Version)

	s := &p.Sandbox
	w(0, "sandbox:")
	w(1, "engine: %s", word(s.Engine))
	w(1, "oci_runtime: %s", word(s.OCIRuntime))
	w(1, "image: %s", strconv.Quote(s.Image))
	w(1, "variant: %s", word(s.Variant))
	w(1, "timeout: %s", units.FormatDuration(s.Timeout))
	w(1, "max_timeout: %s", units.FormatDuration(s.MaxTimeout))
	w(1, "memory: %s", units.FormatSize(s.Memory))
	w(1, "cpus: %s", formatFloat(s.CPUs))
	w(1, "pids: %d", s.Pids)
	w(1, "tmpfs_size: %s", units.FormatSize(s.TmpfsSize))
	w(1, "output_limit: %s", units.FormatSize(s.OutputLimit))
	w(1, "max_concurrent: %d", s.MaxConcurrent)
	w(1, "queue: %d", s.Queue)
	w(1, "max_code_bytes: %s", units.FormatSize(s.MaxCodeBytes))
	w(1, "max_request_bytes: %s", units.FormatSize(s.MaxRequestBytes))
	w(1, "require_enforced_limits: %t", s.RequireEnforcedLimits)

	w(0, "pool:")
	w(1, "size: %d", p.Pool.Size)
	w(1, "max: %d", p.Pool.Max)
	w(1, "shrink_after: %s", units.FormatDuration(p.Pool.ShrinkAfter))
	w(1, "max_age: %s", units.FormatDuration(p.Pool.MaxAge))

	w(0, "sessions:")
	w(1, "enabled: %t", p.Sessions.Enabled)
	w(1, "max: %d", p.Sessions.Max)
	w(1, "max_per_principal: %d", p.Sessions.MaxPerPrincipal)
	w(1, "idle_timeout: %s", units.FormatDuration(p.Sessions.IdleTimeout))
	w(1, "max_lifetime: %s", units.FormatDuration(p.Sessions.MaxLifetime))
	w(1, "max_calls: %d", p.Sessions.MaxCalls)

	w(0, "snapshots:")
	w(1, "enabled: %t", p.Snapshots.Enabled)
	w(1, "dir: %s", strconv.Quote(p.Snapshots.Dir))
	w(1, "max_count: %d", p.Snapshots.MaxCount)
	w(1, "max_bytes: %s", units.FormatSize(p.Snapshots.MaxBytes))
	w(1, "ttl: %s", units.FormatDuration(p.Snapshots.TTL))

	w(0, "tasks:")
	w(1, "enabled: %t", p.Tasks.Enabled)
	w(1, "after: %s", units.FormatDuration(p.Tasks.After))
	w(1, "max: %d", p.Tasks.Max)
	w(1, "max_per_principal: %d", p.Tasks.MaxPerPrincipal)
	w(1, "result_ttl: %s", units.FormatDuration(p.Tasks.ResultTTL))
	w(1, "max_result_bytes: %s", units.FormatSize(p.Tasks.MaxResultBytes))

	w(0, "skills:")
	w(1, "dir: %s", strconv.Quote(p.Skills.Dir))
	w(1, "save: %t", p.Skills.Save)
	w(1, "overwrite: %t", p.Skills.Overwrite)
	w(1, "read_only: %t", p.Skills.ReadOnly)
	w(1, "max_count: %d", p.Skills.MaxCount)
	w(1, "max_bytes: %s", units.FormatSize(p.Skills.MaxBytes))

	if len(p.Mounts) == 0 {
		w(0, "mounts: []")
	} else {
		w(0, "mounts:")
		for _, m := range p.Mounts {
			w(1, "- host: %s", strconv.Quote(m.Host))
			w(2, "path: %s", strconv.Quote(m.Path))
		}
	}

	a := &p.Artifacts
	w(0, "artifacts:")
	w(1, "max_files: %d", a.MaxFiles)
	w(1, "max_bytes_inline: %s", units.FormatSize(a.MaxBytesInline))
	w(1, "max_bytes_total: %s", units.FormatSize(a.MaxBytesTotal))
	w(1, "dir: %s", strconv.Quote(a.Dir))
	w(1, "by_reference: %s", word(a.ByReference))
	w(1, "max_bytes_stored: %s", units.FormatSize(a.MaxBytesStored))
	w(1, "max_bytes_kept: %s", units.FormatSize(a.MaxBytesKept))
	w(1, "max_bytes_read: %s", units.FormatSize(a.MaxBytesRead))
	w(1, "expiry: %s", units.FormatDuration(a.Expiry))

	w(0, "inputs:")
	w(1, "max_files: %d", p.Inputs.MaxFiles)
	w(1, "max_file_bytes: %s", units.FormatSize(p.Inputs.MaxFileBytes))
	w(1, "max_bytes: %s", units.FormatSize(p.Inputs.MaxBytes))

	t := &p.Tools
	w(0, "tools:")
	w(1, "servers: %s", formatList(t.Servers))
	w(1, "default: %s", word(string(t.Default)))
	if len(t.Rules) == 0 {
		w(1, "rules: []")
	} else {
		w(1, "rules:")
		for i := range t.Rules {
			r := &t.Rules[i]
			w(2, "- server: %s", strconv.Quote(r.Server))
			w(3, "tool: %s", strconv.Quote(r.Tool))
			w(3, "annotations: %s", formatAnnotations(&r.Annotations))
			w(3, "action: %s", word(string(r.Action)))
			w(3, "reason: %s", strconv.Quote(r.Reason))
		}
	}
	w(1, "ask_fallback: %s", word(string(t.AskFallback)))
	w(1, "ask_timeout: %s", units.FormatDuration(t.AskTimeout))
	w(1, "ask_remember: %s", word(t.AskRemember))
	w(1, "ask_max_per_run: %d", t.AskMaxPerRun)
	w(1, "on_change: %s", t.OnChange)
	w(1, "lock_file: %s", strconv.Quote(t.LockFile))

	rs := &p.Resources
	w(0, "resources:")
	w(1, "default: %s", word(string(rs.Default)))
	if len(rs.Rules) == 0 {
		w(1, "rules: []")
	} else {
		w(1, "rules:")
		for i := range rs.Rules {
			r := &rs.Rules[i]
			w(2, "- server: %s", strconv.Quote(r.Server))
			w(3, "uri: %s", strconv.Quote(r.URI))
			w(3, "action: %s", word(string(r.Action)))
			w(3, "reason: %s", strconv.Quote(r.Reason))
		}
	}
	w(1, "max_bytes: %s", units.FormatSize(rs.MaxBytes))

	bu := &p.Budgets
	w(0, "budgets:")
	w(1, "max_calls_per_run: %d", bu.MaxCallsPerRun)
	w(1, "max_argument_bytes: %s", units.FormatSize(bu.MaxArgumentBytes))
	w(1, "max_result_bytes: %s", units.FormatSize(bu.MaxResultBytes))
	w(1, "call_timeout: %s", units.FormatDuration(bu.CallTimeout))
	if len(bu.Rates) == 0 {
		w(1, "rates: []")
	} else {
		w(1, "rates:")
		for i := range bu.Rates {
			r := &bu.Rates[i]
			w(2, "- server: %s", strconv.Quote(r.Server))
			w(3, "tool: %s", strconv.Quote(r.Tool))
			w(3, "per: %s", word(r.Per))
			w(3, "rate: %s", FormatRate(r.PerSecond))
			w(3, "burst: %d", r.Burst)
		}
	}

	tk := &p.Tokenize
	w(0, "tokenize:")
	w(1, "kinds: %s", formatList(tk.Kinds))
	if len(tk.Patterns) == 0 {
		w(1, "patterns: []")
	} else {
		w(1, "patterns:")
		for _, pt := range tk.Patterns {
			w(2, "- name: %s", word(pt.Name))
			w(3, "regex: %s", strconv.Quote(pt.Regex))
		}
	}
	for _, l := range []struct {
		key  string
		list []ToolMatch
	}{{"results", tk.Results}, {"restore", tk.Restore}} {
		if len(l.list) == 0 {
			w(1, "%s: []", l.key)
			continue
		}
		w(1, "%s:", l.key)
		for _, m := range l.list {
			w(2, "- {server: %s, tool: %s}", strconv.Quote(m.Server), strconv.Quote(m.Tool))
		}
	}
	w(1, "max_values: %d", tk.MaxValues)

	w(0, "audit:")
	w(1, "file: %s", strconv.Quote(p.Audit.File))

	w(0, "http:")
	w(1, "max_sessions: %d", p.HTTP.MaxSessions)
	w(1, "max_sessions_per_client: %d", p.HTTP.MaxSessionsPerClient)
	w(1, "session_idle_timeout: %s", units.FormatDuration(p.HTTP.SessionIdleTimeout))
	w(1, "session_min_idle: %s", units.FormatDuration(p.HTTP.SessionMinIdle))
	return b.String()
}

var wordRE = regexp.MustCompile(`^[a-z]+$`)

// word writes an enum value bare, or quoted if it is not a plain word.
func word(s string) string {
	if wordRE.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}

// formatList writes strings as a YAML flow list: ["*", "fs-*"].
func formatList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func formatAnnotations(a *Annotations) string {
	var parts []string
	for i, v := range []*bool{a.ReadOnlyHint, a.DestructiveHint, a.IdempotentHint, a.OpenWorldHint} {
		if v != nil {
			parts = append(parts, fmt.Sprintf("%s: %t", annotationKeys[i], *v))
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// FormatRate writes a rate of perSecond calls a second as N/s, N/m or N/h
// such that it reads back exactly: with a whole N if one of them has one
// (10/s, 1/m, 30/m for 0.5/s), else whichever is shortest (2.5/h).
func FormatRate(perSecond float64) string {
	best, whole := formatFloat(perSecond)+"/s", false
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"/s", 1}, {"/m", 60}, {"/h", 3600}} {
		n := perSecond * u.mult
		for prec := 1; prec <= 17; prec++ {
			f, err := strconv.ParseFloat(strconv.FormatFloat(n, 'g', prec, 64), 64)
			if err != nil || f/u.mult != perSecond {
				continue
			}
			s := formatFloat(f) + u.suffix
			isWhole := f == math.Trunc(f)
			if (isWhole && !whole) || (isWhole == whole && len(s) < len(best)) {
				best, whole = s, isWhole
			}
			break
		}
	}
	return best
}

// formatFloat writes f in plain decimal, as short as reads back exactly.
func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}
