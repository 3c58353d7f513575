package policy

import (
	"fmt"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"
)

// Tools says which upstream tools the code may see and call.
type Tools struct {
	// Servers are globs of the upstream server names the code may reach at
	// all; a server that matches none is not started and not listed.
	// Default ["*"].
	Servers []string
	// Rules are tried in order; the first that matches decides.
	Rules []Rule
	// Default is the action when no rule matches; default Allow.
	Default Action
	// AskFallback decides a call that a rule says to ask about when the
	// human cannot be asked: the client did not declare MCP elicitation,
	// or the run has no client (bridge run). Deny (the default) or Allow.
	AskFallback Action
	// AskTimeout is how long an ask waits for the human's answer; no
	// answer by then denies the call. Default 2m; the run's own timeout
	// keeps counting meanwhile.
	AskTimeout time.Duration
	// AskRemember is the longest the human may have an answer remembered:
	// RememberOff (every call asks), RememberRun (the default: the rest of
	// the run, or of its session) or RememberConnection (the rest of the
	// client's connection, across runs).
	AskRemember string
	// AskMaxPerRun is the most questions one run puts to the human
	// (default 10); the run's later calls that need an answer are denied
	// without a question. Whatever the number, a question dismissed, left
	// unanswered or that the client failed to ask ends the asking for the
	// rest of the run, and a "no" holds for its tool: code looping on a
	// tool cannot wear the human down.
	AskMaxPerRun int
	// OnChange is what a call gets when its tool's definition (title,
	// description, schemas, annotations) changed since the bridge first
	// saw it (a "rug pull": the tool the operator reviewed is not the one
	// called): Deny (the default; the tool is not listed either),
	// Ask (the human sees what changed) or Allow (allowed,
	// and the change logged and audited).
	OnChange Action
	// LockFile, if set, is the tools lock file (`bridge tools lock`) whose
	// definitions the bridge pins instead of the ones it first lists; a
	// tool it does not list counts as changed. Absolute, ~ expanded. Read
	// at start only.
	LockFile string
}

// Values of Tools.AskRemember.
const (
	RememberOff        = "off"
	RememberRun        = "run"
	RememberConnection = "connection"
)

// Action is what a rule does with a tool call.
type Action string

// Actions.
const (
	Allow Action = "allow"
	Deny  Action = "deny"
	// Ask asks the human, through the MCP client, before each call (see
	// Tools.AskFallback, AskTimeout and AskRemember).
	Ask Action = "ask"
)

// Rule matches tools by server and tool name globs and by annotations.
type Rule struct {
	Server string // glob (path.Match syntax, case-sensitive); default "*"
	Tool   string // glob; default "*"
	// Annotations must all hold for the rule to match. Keys are the MCP
	// tool annotation names; a tool that does not set one has the MCP
	// default (readOnlyHint false, destructiveHint true, idempotentHint
	// false, openWorldHint true).
	Annotations Annotations
	Action      Action
	// Reason, if set, is shown to the code when the rule denies a call,
	// and to the human when it asks.
	Reason string

	// Line and Column locate the rule in its file (1-based; 0 for rules
	// not read from a file).
	Line, Column int
}

// Annotations are conditions on MCP tool annotations; nil means "any".
type Annotations struct {
	ReadOnlyHint    *bool
	DestructiveHint *bool
	IdempotentHint  *bool
	OpenWorldHint   *bool
}

var toolsKeys = []string{"servers", "default", "rules", "ask_fallback", "ask_timeout", "ask_remember", "ask_max_per_run", "on_change", "lock_file"}
var ruleKeys = []string{"server", "tool", "annotations", "action", "reason"}
var annotationKeys = []string{"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}

// Bounds of tools.ask_timeout and tools.ask_max_per_run.
const (
	minAskTimeout = time.Second
	maxAskTimeout = time.Hour
	maxAskPerRun  = 1000
)

func (p *parser) tools(k, v *yaml.Node, t *Tools) {
	p.keys(k, v, "tools", toolsKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "servers":
			if v.Kind != yaml.SequenceNode {
				p.wrong(k, v, name, `a list of server name globs, e.g. ["*"] or ["github", "fs-*"]`)
				return
			}
			servers := []string{}
			ok := true
			for i, item := range v.Content {
				if p.skip(item) {
					ok = false
					continue
				}
				g, good := p.glob(item, item, fmt.Sprintf("%s[%d]", name, i))
				ok = ok && good
				servers = append(servers, g)
			}
			if ok {
				t.Servers = servers
			}
		case "default":
			if a, ok := p.enum(k, v, name, []string{"allow", "deny", "ask"}); ok {
				t.Default = Action(a)
			}
		case "ask_fallback":
			if a, ok := p.enum(k, v, name, []string{"deny", "allow"}); ok {
				t.AskFallback = Action(a)
			}
		case "ask_timeout":
			t.AskTimeout = p.durationIn(k, v, name, t.AskTimeout, minAskTimeout, maxAskTimeout)
		case "ask_remember":
			if r, ok := p.enum(k, v, name, []string{RememberOff, RememberRun, RememberConnection}); ok {
				t.AskRemember = r
			}
		case "ask_max_per_run":
			t.AskMaxPerRun = int(p.integer(k, v, name, int64(t.AskMaxPerRun), 1, maxAskPerRun))
		case "on_change":
			if a, ok := p.enum(k, v, name, []string{"deny", "ask", "allow"}); ok {
				t.OnChange = Action(a)
			}
		case "lock_file":
			if str, ok := p.str(k, v, name); ok {
				f, err := expandHome(str)
				switch {
				case err != nil:
					p.errorf(v, "%s: %v", name, err)
				case f == "":
					t.LockFile = ""
				case !filepath.IsAbs(f):
					p.errorf(v, "%s: %q is a relative path: give an absolute path, or one starting with ~/", name, str)
				default:
					t.LockFile = filepath.Clean(f)
				}
			}
		case "rules":
			p.items(k, v, name, "a list of rules", func(item *yaml.Node, name string) {
				if r, ok := p.rule(item, name); ok {
					t.Rules = append(t.Rules, r)
				}
			})
		}
	})
}

func (p *parser) rule(n *yaml.Node, name string) (Rule, bool) {
	r := Rule{Server: "*", Tool: "*", Line: n.Line, Column: n.Column}
	seen, ok := p.entry(n, name, "a rule (a mapping with action and optionally server, tool, annotations, reason)", ruleKeys, func(key, kname string, k, v *yaml.Node) {
		switch key {
		case "server":
			r.Server, _ = p.glob(k, v, kname)
		case "tool":
			r.Tool, _ = p.glob(k, v, kname)
		case "annotations":
			p.annotations(k, v, kname, &r.Annotations)
		case "action":
			if a, ok := p.enum(k, v, kname, []string{"allow", "deny", "ask"}); ok {
				r.Action = Action(a)
			}
		case "reason":
			r.Reason, _ = p.str(k, v, kname)
		}
	})
	if !ok {
		return r, false
	}
	if seen["action"] == nil {
		p.errorf(n, "%s: missing action: every rule says allow, deny or ask", name)
	}
	return r, true
}

func (p *parser) annotations(k, v *yaml.Node, name string, a *Annotations) {
	p.keys(k, v, name, annotationKeys, func(key, kname string, k, v *yaml.Node) {
		b := p.boolean(k, v, kname, false)
		switch key {
		case "readOnlyHint":
			a.ReadOnlyHint = &b
		case "destructiveHint":
			a.DestructiveHint = &b
		case "idempotentHint":
			a.IdempotentHint = &b
		case "openWorldHint":
			a.OpenWorldHint = &b
		}
	})
}
