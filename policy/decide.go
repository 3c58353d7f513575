package policy

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bridge-mcp/bridge/internal/units"
)

// ToolAnnotations are the MCP hints a tool declares; nil = not declared.
type ToolAnnotations struct {
	ReadOnlyHint, DestructiveHint, IdempotentHint, OpenWorldHint *bool
}

// Tool is what a decision is about.
type Tool struct {
	Server, Name string
	Annotations  ToolAnnotations
}

// Decision says whether a tool may be called, and which part of the policy
// said so.
type Decision struct {
	Allow bool
	// Ask says the human must be asked first (action ask); Allow is then
	// false, and the answer, or Tools.AskFallback, decides.
	Ask bool
	// Rule is the index in Tools.Rules of the deciding rule; RuleDefault
	// (-1) when no rule matched; RuleServers (-2) when the server matches
	// no glob of Tools.Servers.
	Rule int
	// Reason is, for a deny, what the code is told: the rule's reason, or
	// a generated one naming the part of the policy that denied; for an
	// ask, what the human is told. It is "" for an allow.
	Reason string
}

// Values of [Decision.Rule] that are not rule indexes.
const (
	RuleDefault = -1
	RuleServers = -2
)

// hintNames and hintDefaults are the four MCP tool annotations, in the
// order the MCP spec lists them (and Explain reports them), and the value
// of each for a tool that does not declare it.
var (
	hintNames    = [4]string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
	hintDefaults = [4]bool{false, true, false, true}
)

// list is a's conditions in the order of hintNames.
func (a *Annotations) list() [4]*bool {
	return [4]*bool{a.ReadOnlyHint, a.DestructiveHint, a.IdempotentHint, a.OpenWorldHint}
}

// effective is t's values of the annotations in the order of hintNames,
// each declared or else the MCP default, and which were declared.
func (t *ToolAnnotations) effective() (v, declared [4]bool) {
	for i, p := range [4]*bool{t.ReadOnlyHint, t.DestructiveHint, t.IdempotentHint, t.OpenWorldHint} {
		if p != nil {
			v[i], declared[i] = *p, true
		} else {
			v[i] = hintDefaults[i]
		}
	}
	return v, declared
}

// glob reports whether name matches pattern, in path.Match syntax but with
// "/" an ordinary character: names are not paths, and a tool "a/b" must not
// escape a rule for "*". An empty pattern is "*" (the default of every glob
// in the file); an invalid one matches nothing (Parse rejects those).
func glob(pattern, name string) bool {
	if pattern == "" || pattern == "*" {
		return true
	}
	// Fast paths for the common patterns: a plain name, and a plain
	// prefix followed by one "*".
	if i := strings.IndexAny(pattern, `*?[\`); i < 0 {
		return pattern == name
	} else if i == len(pattern)-1 && pattern[i] == '*' {
		return strings.HasPrefix(name, pattern[:i])
	}
	ok, err := match(pattern, name)
	return ok && err == nil
}

// globWhy is glob that also says why not.
func globWhy(what, pattern, name string) (bool, string) {
	if pattern == "" || pattern == "*" {
		return true, ""
	}
	ok, err := match(pattern, name)
	if err != nil {
		return false, fmt.Sprintf("%s glob %q is invalid and never matches", what, pattern)
	}
	if !ok {
		return false, fmt.Sprintf("%s glob %q does not match %q", what, pattern, name)
	}
	return true, ""
}

// ServerAllowed reports whether the code may reach server at all: whether
// it matches a glob of Tools.Servers. A nil Servers (a [Policy] not made by
// Parse, or a nil *[Policy]) is the default ["*"]; an empty but non-nil one
// allows no server.
func (p *Policy) ServerAllowed(server string) bool {
	if p == nil || p.Tools.Servers == nil {
		return true
	}
	for _, g := range p.Tools.Servers {
		if g == "" {
			continue // never "*" here: an empty server glob is a mistake, not a default
		}
		if glob(g, server) {
			return true
		}
	}
	return false
}

// matchRule reports whether r matches a tool named server and name whose
// annotations have the values ann (see ToolAnnotations.effective). If why
// is not nil, every condition is checked and each one that fails is
// appended to *why (declared says which of ann the tool declared);
// otherwise it stops at the first that fails.
func matchRule(r *Rule, server, name string, ann, declared *[4]bool, why *[]string) bool {
	if why == nil {
		if !glob(r.Server, server) || !glob(r.Tool, name) {
			return false
		}
		for i, want := range r.Annotations.list() {
			if want != nil && *want != ann[i] {
				return false
			}
		}
		return true
	}
	ok := true
	if m, s := globWhy("server", r.Server, server); !m {
		ok = false
		*why = append(*why, s)
	}
	if m, s := globWhy("tool", r.Tool, name); !m {
		ok = false
		*why = append(*why, s)
	}
	for i, want := range r.Annotations.list() {
		if want != nil && *want != ann[i] {
			ok = false
			*why = append(*why, fmt.Sprintf("annotation %s is %t (%s) but the rule wants %t", hintNames[i], ann[i], source(declared[i]), *want))
		}
	}
	return ok
}

// source says where an annotation's value came from.
func source(declared bool) string {
	if declared {
		return "declared"
	}
	return "MCP default"
}

// allows reports whether a is an allow. Only Allow is; the empty action
// counts as allow only for Tools.Default (its default), so that a rule
// without an action, which Parse rejects, denies.
func allows(a Action) bool { return a == Allow }

// defaultAction is Tools.Default, Allow when unset.
func (p *Policy) defaultAction() Action {
	if p == nil || p.Tools.Default == "" {
		return Allow
	}
	return p.Tools.Default
}

// decision is what action a says, decided by the rule or default named.
func (p *Policy) decision(a Action, rule int, reason string, t Tool) Decision {
	d := Decision{Allow: allows(a), Ask: a == Ask, Rule: rule}
	switch {
	case d.Allow:
	case reason != "":
		d.Reason = reason
	case d.Ask && rule == RuleDefault:
		d.Reason = fmt.Sprintf("the policy asks before any call no rule matches: server %q, tool %q", t.Server, t.Name)
	case d.Ask:
		d.Reason = fmt.Sprintf("policy rule %s asks before calls of server %q, tool %q", p.RuleName(d), t.Server, t.Name)
	case rule == RuleDefault:
		d.Reason = "denied by policy: no rule matched and the default is deny"
	default:
		d.Reason = fmt.Sprintf("denied by policy rule %s: server %q, tool %q", p.RuleName(d), t.Server, t.Name)
	}
	return d
}

// MayAsk reports whether some call may need the human's answer: a rule,
// or the default, says ask.
func (p *Policy) MayAsk() bool {
	if p == nil {
		return false
	}
	if p.Tools.Default == Ask {
		return true
	}
	for i := range p.Tools.Rules {
		if p.Tools.Rules[i].Action == Ask {
			return true
		}
	}
	return false
}

// Listed reports whether the code may see the tool d is about: allowed, or
// allowed once the human says so.
func (d Decision) Listed() bool { return d.Allow || d.Ask }

// Verdict is d in one word: "allow", "ask" or "deny".
func (d Decision) Verdict() string {
	switch {
	case d.Allow:
		return "allow"
	case d.Ask:
		return "ask"
	}
	return "deny"
}

// Decide says whether the code may call t. Tools.Servers is checked first
// (no glob matches: deny, RuleServers); then Tools.Rules in order, the first
// that matches deciding; then Tools.Default (unset: allow). A rule matches
// when its server and tool globs match (an empty glob is "*") and every
// annotation condition it sets equals the tool's value: declared, or else
// the MCP default (readOnlyHint false, destructiveHint true,
// idempotentHint false, openWorldHint true). Only "allow" allows; "ask"
// sets Ask (the caller asks the human); any other action denies. A nil
// *[Policy] allows everything.
func (p *Policy) Decide(t Tool) Decision {
	if !p.ServerAllowed(t.Server) {
		return Decision{Rule: RuleServers, Reason: fmt.Sprintf("server %q is not in the policy's tools.servers", t.Server)}
	}
	if p == nil {
		return Decision{Allow: true, Rule: RuleDefault}
	}
	ann, _ := t.Annotations.effective()
	for i := range p.Tools.Rules {
		r := &p.Tools.Rules[i]
		if matchRule(r, t.Server, t.Name, &ann, nil, nil) {
			return p.decision(r.Action, i, r.Reason, t)
		}
	}
	return p.decision(p.defaultAction(), RuleDefault, "", t)
}

// RuleName names the part of the policy that made d, for logs and audit:
// "tools.rules[2] (line 14)" (just "tools.rules[2]" for a rule not read
// from a file), "tools.default" or "tools.servers".
func (p *Policy) RuleName(d Decision) string {
	switch d.Rule {
	case RuleDefault:
		return "tools.default"
	case RuleServers:
		return "tools.servers"
	}
	name := "tools.rules[" + strconv.Itoa(d.Rule) + "]"
	if p != nil && d.Rule >= 0 && d.Rule < len(p.Tools.Rules) {
		if line := p.Tools.Rules[d.Rule].Line; line > 0 {
			name += " (line " + strconv.Itoa(line) + ")"
		}
	}
	return name
}

// Explain is what `bridge policy explain` prints about t: the verdict and
// the part of the policy that decided, the reason of a deny, the tool's
// annotations (declared or MCP default), the servers filter, then each
// rule tried in order with whether it matched and, if not, why not,
// stopping at the one that decided; then the default when it decided.
// Several lines, each ending in a newline. It decides exactly as Decide.
func (p *Policy) Explain(t Tool) string {
	d := p.Decide(t)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: server %q, tool %q\n", d.Verdict(), t.Server, t.Name)
	fmt.Fprintf(&b, "decided by: %s\n", p.RuleName(d))
	if !d.Allow {
		fmt.Fprintf(&b, "reason: %s\n", d.Reason)
	}
	if d.Ask {
		fmt.Fprintf(&b, "ask: the human is asked through the MCP client (elicitation) and has %s (tools.ask_timeout) to answer, else denied; at most %d questions a run (tools.ask_max_per_run); %s\n",
			units.FormatDuration(p.Tools.AskTimeout), p.Tools.AskMaxPerRun, p.askFallbackText())
	}
	b.WriteString("annotations:")
	ann, declared := t.Annotations.effective()
	for i, name := range hintNames {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s=%t (%s)", sep, name, ann[i], source(declared[i]))
	}
	b.WriteString("\n")

	// The servers filter.
	var servers []string
	if p != nil {
		servers = p.Tools.Servers
	}
	switch {
	case servers == nil:
		b.WriteString("tools.servers (not set: every server): allowed\n")
	case d.Rule == RuleServers:
		fmt.Fprintf(&b, "tools.servers %s: %q matches none of them: deny\n", quoteList(servers), t.Server)
		return b.String()
	default:
		for _, g := range servers {
			if g != "" && glob(g, t.Server) {
				fmt.Fprintf(&b, "tools.servers %s: %q matches %q: allowed\n", quoteList(servers), t.Server, g)
				break
			}
		}
	}

	// The rules, up to the one that decided.
	var rules []Rule
	if p != nil {
		rules = p.Tools.Rules
	}
	if len(rules) == 0 {
		b.WriteString("tools.rules: none\n")
	}
	for i := range rules {
		r := &rules[i]
		name := p.RuleName(Decision{Rule: i})
		var why []string
		if !matchRule(r, t.Server, t.Name, &ann, &declared, &why) {
			fmt.Fprintf(&b, "%s %s: no match: %s\n", name, describeRule(r), strings.Join(why, "; "))
			continue
		}
		fmt.Fprintf(&b, "%s %s: match: %s\n", name, describeRule(r), d.Verdict())
		if rest := len(rules) - i - 1; rest > 0 {
			fmt.Fprintf(&b, "(%d later rule%s not tried)\n", rest, plural(rest))
		}
		return b.String()
	}
	def := d.Verdict()
	if p == nil || p.Tools.Default == "" {
		def += " (not set)"
	}
	fmt.Fprintf(&b, "tools.default: no rule matched: %s\n", def)
	return b.String()
}

// askFallbackText says what an ask does when the human cannot be asked.
func (p *Policy) askFallbackText() string {
	what := "denied"
	if p.Tools.AskFallback == Allow {
		what = "allowed"
	}
	return "a client without elicitation: " + what + " (tools.ask_fallback: " + string(p.Tools.AskFallback) + ")"
}

// describeRule is a rule's conditions, written as in the file:
// `{server: "fs*", tool: "write_*", annotations: {readOnlyHint: false}, action: deny}`.
func describeRule(r *Rule) string {
	var b strings.Builder
	g := func(s string) string {
		if s == "" {
			return "*"
		}
		return s
	}
	fmt.Fprintf(&b, "{server: %q, tool: %q", g(r.Server), g(r.Tool))
	n := 0
	for i, want := range r.Annotations.list() {
		if want != nil {
			if n == 0 {
				b.WriteString(", annotations: {")
			} else {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s: %t", hintNames[i], *want)
			n++
		}
	}
	if n > 0 {
		b.WriteString("}")
	}
	action := string(r.Action)
	if action == "" {
		action = `""`
	}
	fmt.Fprintf(&b, ", action: %s}", action)
	return b.String()
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// match is path.Match (Go 1.26) with "/" an ordinary character: "*" and
// "?" match it too. The syntax, and so which patterns are invalid
// (path.ErrBadPattern), is path.Match's. Adapted from Go's path/match.go,
// Copyright 2010 The Go Authors, BSD-style license.
func match(pattern, name string) (matched bool, err error) {
Pattern:
	for len(pattern) > 0 {
		var star bool
		var chunk string
		star, chunk, pattern = scanChunk(pattern)
		if star && chunk == "" {
			return true, nil // a trailing * matches the rest
		}
		// Look for a match at the current position; as the last chunk it
		// must exhaust the name (else a star may still do better).
		t, ok, err := matchChunk(chunk, name)
		if ok && (len(t) == 0 || len(pattern) > 0) {
			name = t
			continue
		}
		if err != nil {
			return false, err
		}
		if star {
			// Look for a match skipping i+1 bytes.
			for i := 0; i < len(name); i++ {
				t, ok, err := matchChunk(chunk, name[i+1:])
				if ok {
					if len(pattern) == 0 && len(t) > 0 {
						continue
					}
					name = t
					continue Pattern
				}
				if err != nil {
					return false, err
				}
			}
		}
		// No match: report whether the rest of the pattern is valid.
		for len(pattern) > 0 {
			_, chunk, pattern = scanChunk(pattern)
			if _, _, err := matchChunk(chunk, ""); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	return len(name) == 0, nil
}

// scanChunk gets the next segment of pattern: a string without stars,
// possibly preceded by stars.
func scanChunk(pattern string) (star bool, chunk, rest string) {
	for len(pattern) > 0 && pattern[0] == '*' {
		pattern = pattern[1:]
		star = true
	}
	inrange := false
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			if i+1 < len(pattern) {
				i++
			}
		case '[':
			inrange = true
		case ']':
			inrange = false
		case '*':
			if !inrange {
				return star, pattern[:i], pattern[i:]
			}
		}
	}
	return star, pattern, ""
}

// matchChunk reports whether chunk (literals, classes and ?) matches the
// beginning of s, and what of s is left. It reads all of chunk even after
// a mismatch, to report an invalid one.
func matchChunk(chunk, s string) (rest string, ok bool, err error) {
	failed := false
	for len(chunk) > 0 {
		failed = failed || len(s) == 0
		switch chunk[0] {
		case '[':
			var r rune
			if !failed {
				var n int
				r, n = utf8.DecodeRuneInString(s)
				s = s[n:]
			}
			chunk = chunk[1:]
			negated := false
			if len(chunk) > 0 && chunk[0] == '^' {
				negated = true
				chunk = chunk[1:]
			}
			matched := false
			nrange := 0
			for {
				if len(chunk) > 0 && chunk[0] == ']' && nrange > 0 {
					chunk = chunk[1:]
					break
				}
				var lo, hi rune
				if lo, chunk, err = getEsc(chunk); err != nil {
					return "", false, err
				}
				hi = lo
				if chunk[0] == '-' {
					if hi, chunk, err = getEsc(chunk[1:]); err != nil {
						return "", false, err
					}
				}
				matched = matched || lo <= r && r <= hi
				nrange++
			}
			failed = failed || matched == negated

		case '?':
			if !failed {
				_, n := utf8.DecodeRuneInString(s)
				s = s[n:]
			}
			chunk = chunk[1:]

		case '\\':
			chunk = chunk[1:]
			if len(chunk) == 0 {
				return "", false, path.ErrBadPattern
			}
			fallthrough

		default:
			if !failed {
				failed = chunk[0] != s[0]
				s = s[1:]
			}
			chunk = chunk[1:]
		}
	}
	if failed {
		return "", false, nil
	}
	return s, true, nil
}

// getEsc gets a possibly escaped character of a class from chunk.
func getEsc(chunk string) (r rune, nchunk string, err error) {
	if len(chunk) == 0 || chunk[0] == '-' || chunk[0] == ']' {
		return 0, "", path.ErrBadPattern
	}
	if chunk[0] == '\\' {
		chunk = chunk[1:]
		if len(chunk) == 0 {
			return 0, "", path.ErrBadPattern
		}
	}
	r, n := utf8.DecodeRuneInString(chunk)
	if r == utf8.RuneError && n == 1 {
		err = path.ErrBadPattern
	}
	nchunk = chunk[n:]
	if len(nchunk) == 0 {
		err = path.ErrBadPattern
	}
	return r, nchunk, err
}
