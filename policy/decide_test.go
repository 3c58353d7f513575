package policy

import (
	"fmt"
	"path"
	"strings"
	"testing"
	"time"
)

func bp(v bool) *bool { return &v }

func tool(server, name string) Tool { return Tool{Server: server, Name: name} }

func TestDecide(t *testing.T) {
	fsRules := &Policy{Tools: Tools{
		Servers: []string{"*"},
		Default: Allow,
		Rules: []Rule{
			{Server: "filesystem", Tool: "read_*", Action: Allow, Line: 5},
			{Server: "filesystem", Tool: "*", Action: Deny, Line: 9},
			{Server: "git?", Tool: "[a-c]*", Action: Deny, Reason: "no a-c tools on git servers", Line: 12},
			{Server: "db-[^x]", Tool: "drop_?able", Action: Deny, Line: 15},
			// path.Match negates with ^ only: [!x] is the class of ! and x.
			{Server: "shell-[!x]", Tool: "*", Action: Deny, Reason: "[!x] is ! or x", Line: 18},
		},
	}}
	denyDefault := &Policy{Tools: Tools{
		Servers: []string{"*"},
		Default: Deny,
		Rules:   []Rule{{Server: "*", Tool: "ok", Action: Allow}},
	}}
	serversOnly := &Policy{Tools: Tools{
		Servers: []string{"github", "fs-*"},
		Rules:   []Rule{{Tool: "*", Action: Allow}},
	}}
	// Annotation rules: read-only tools are allowed; destructive ones are
	// denied; open-world idempotent ones allowed; everything else denied.
	annot := &Policy{Tools: Tools{
		Servers: []string{"*"},
		Default: Deny,
		Rules: []Rule{
			{Server: "*", Tool: "*", Annotations: Annotations{ReadOnlyHint: bp(true)}, Action: Allow, Line: 3},
			{Server: "*", Tool: "*", Annotations: Annotations{DestructiveHint: bp(true)}, Action: Deny, Reason: "destructive", Line: 4},
			{Server: "*", Tool: "*", Annotations: Annotations{IdempotentHint: bp(true), OpenWorldHint: bp(true)}, Action: Allow, Line: 5},
		},
	}}
	closedWorld := &Policy{Tools: Tools{
		Rules: []Rule{{Annotations: Annotations{OpenWorldHint: bp(false)}, Action: Allow}},
		// Default unset: allow; but the rule below decides first.
	}}
	closedWorld.Tools.Rules = append(closedWorld.Tools.Rules, Rule{Action: Deny})

	ann := func(ro, de, id, ow *bool) ToolAnnotations {
		return ToolAnnotations{ReadOnlyHint: ro, DestructiveHint: de, IdempotentHint: id, OpenWorldHint: ow}
	}

	tests := []struct {
		name   string
		p      *Policy
		t      Tool
		allow  bool
		rule   int
		reason string
	}{
		{"glob read_* allows", fsRules, tool("filesystem", "read_file"), true, 0, ""},
		{"read_* needs the prefix", fsRules, tool("filesystem", "xread_file"), false, 1,
			`denied by policy rule tools.rules[1] (line 9): server "filesystem", tool "xread_file"`},
		{"first match wins over later deny", fsRules, tool("filesystem", "read_"), true, 0, ""},
		{"* denies the rest", fsRules, tool("filesystem", "write_file"), false, 1,
			`denied by policy rule tools.rules[1] (line 9): server "filesystem", tool "write_file"`},
		{"server glob is whole-name", fsRules, tool("filesystem2", "write_file"), true, RuleDefault, ""},
		{"? matches one char", fsRules, tool("git2", "commit"), false, 2, "no a-c tools on git servers"},
		{"? needs exactly one", fsRules, tool("git", "commit"), true, RuleDefault, ""},
		{"? not two", fsRules, tool("git22", "commit"), true, RuleDefault, ""},
		{"class outside range", fsRules, tool("git2", "diff"), true, RuleDefault, ""},
		{"negated class matches", fsRules, tool("db-a", "drop_table"), false, 3,
			`denied by policy rule tools.rules[3] (line 15): server "db-a", tool "drop_table"`},
		{"negated class excludes", fsRules, tool("db-x", "drop_table"), true, RuleDefault, ""},
		{"[!x] is not a negation", fsRules, tool("shell-x", "ls"), false, 4, "[!x] is ! or x"},
		{"[!x] is not a negation (2)", fsRules, tool("shell-a", "ls"), true, RuleDefault, ""},
		{"globs are case-sensitive", fsRules, tool("FileSystem", "write_file"), true, RuleDefault, ""},
		{"? matches /", fsRules, tool("git/", "add"), false, 2, "no a-c tools on git servers"},
		{"* matches /", fsRules, tool("filesystem", "x/y"), false, 1,
			`denied by policy rule tools.rules[1] (line 9): server "filesystem", tool "x/y"`},

		{"default deny", denyDefault, tool("a", "b"), false, RuleDefault, "denied by policy: no rule matched and the default is deny"},
		{"rule before default deny", denyDefault, tool("a", "ok"), true, 0, ""},

		{"servers filter allows", serversOnly, tool("github", "x"), true, 0, ""},
		{"servers filter glob", serversOnly, tool("fs-home", "x"), true, 0, ""},
		{"servers filter denies", serversOnly, tool("gitlab", "x"), false, RuleServers, `server "gitlab" is not in the policy's tools.servers`},

		{"declared read-only", annot, Tool{"s", "t", ann(bp(true), nil, nil, nil)}, true, 0, ""},
		{"default readOnly false, destructive true", annot, tool("s", "t"), false, 1, "destructive"},
		{"declared not destructive, idempotent, default open world", annot, Tool{"s", "t", ann(nil, bp(false), bp(true), nil)}, true, 2, ""},
		{"declared closed world fails rule 2", annot, Tool{"s", "t", ann(nil, bp(false), bp(true), bp(false))}, false, RuleDefault,
			"denied by policy: no rule matched and the default is deny"},
		{"declared false read-only", annot, Tool{"s", "t", ann(bp(false), bp(false), nil, nil)}, false, RuleDefault,
			"denied by policy: no rule matched and the default is deny"},
		{"openWorld default true does not match false", closedWorld, tool("s", "t"), false, 1,
			`denied by policy rule tools.rules[1]: server "s", tool "t"`},
		{"openWorld declared false", closedWorld, Tool{"s", "t", ann(nil, nil, nil, bp(false))}, true, 0, ""},

		{"empty policy allows", &Policy{}, tool("any", "thing"), true, RuleDefault, ""},
		{"nil policy allows", nil, tool("any", "thing"), true, RuleDefault, ""},
		{"empty non-nil servers allow none", &Policy{Tools: Tools{Servers: []string{}}}, tool("a", "b"), false, RuleServers,
			`server "a" is not in the policy's tools.servers`},
		{"empty globs are *", &Policy{Tools: Tools{Rules: []Rule{{Action: Deny, Reason: "all"}}}}, tool("a", "b"), false, 0, "all"},
		{"invalid glob never matches", &Policy{Tools: Tools{Rules: []Rule{{Tool: "[", Action: Deny}}}}, tool("a", "["), true, RuleDefault, ""},
		{"invalid servers glob never matches", &Policy{Tools: Tools{Servers: []string{"[", ""}}}, tool("[", "b"), false, RuleServers,
			`server "[" is not in the policy's tools.servers`},
		{"rule without action denies", &Policy{Tools: Tools{Rules: []Rule{{}}}}, tool("a", "b"), false, 0,
			`denied by policy rule tools.rules[0]: server "a", tool "b"`},
		{"unknown default denies", &Policy{Tools: Tools{Default: "maybe"}}, tool("a", "b"), false, RuleDefault,
			"denied by policy: no rule matched and the default is deny"},
		{"allow rule reason is not a deny reason", &Policy{Tools: Tools{Rules: []Rule{{Action: Allow, Reason: "x"}}}}, tool("a", "b"), true, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.p.Decide(tc.t)
			want := Decision{Allow: tc.allow, Rule: tc.rule, Reason: tc.reason}
			if d != want {
				t.Errorf("Decide(%+v) = %+v, want %+v", tc.t, d, want)
			}
			// Explain must agree with Decide.
			e := tc.p.Explain(tc.t)
			verdict := "deny: "
			if tc.allow {
				verdict = "allow: "
			}
			if !strings.HasPrefix(e, verdict) || !strings.Contains(e, "decided by: "+tc.p.RuleName(d)+"\n") {
				t.Errorf("Explain disagrees with %+v:\n%s", d, e)
			}
		})
	}
}

func TestServerAllowed(t *testing.T) {
	p := &Policy{Tools: Tools{Servers: []string{"git*", "[ab]x"}}}
	for s, want := range map[string]bool{"github": true, "git": true, "ax": true, "bx": true, "cx": false, "": false, "agit": false} {
		if got := p.ServerAllowed(s); got != want {
			t.Errorf("ServerAllowed(%q) = %v, want %v", s, got, want)
		}
	}
	if !(*Policy)(nil).ServerAllowed("x") || !(&Policy{}).ServerAllowed("x") {
		t.Error("a nil policy or nil Servers must allow every server")
	}
}

func TestRuleName(t *testing.T) {
	p := &Policy{Tools: Tools{Rules: []Rule{{Line: 14}, {}}}}
	for _, tc := range []struct {
		p    *Policy
		rule int
		want string
	}{
		{p, 0, "tools.rules[0] (line 14)"},
		{p, 1, "tools.rules[1]"},
		{p, 7, "tools.rules[7]"},
		{p, RuleDefault, "tools.default"},
		{p, RuleServers, "tools.servers"},
		{nil, 2, "tools.rules[2]"},
		{nil, RuleDefault, "tools.default"},
	} {
		if got := tc.p.RuleName(Decision{Rule: tc.rule}); got != tc.want {
			t.Errorf("RuleName(%d) = %q, want %q", tc.rule, got, tc.want)
		}
	}
}

// TestMatchRuleAgrees checks that the short-circuit and the explaining
// paths of matchRule agree on every combination of globs, conditions and
// values.
func TestMatchRuleAgrees(t *testing.T) {
	vals := []*bool{nil, bp(false), bp(true)}
	globs := []string{"*", "a*", "ab", "b", "[", "", "a?", "a\\b", "[a-b]*"}
	n := 0
	for _, sg := range globs {
		for _, tg := range globs {
			for _, c := range vals {
				for _, v := range vals {
					for h := 0; h < 4; h++ {
						r := Rule{Server: sg, Tool: tg}
						ta := ToolAnnotations{}
						switch h {
						case 0:
							r.Annotations.ReadOnlyHint, ta.ReadOnlyHint = c, v
						case 1:
							r.Annotations.DestructiveHint, ta.DestructiveHint = c, v
						case 2:
							r.Annotations.IdempotentHint, ta.IdempotentHint = c, v
						case 3:
							r.Annotations.OpenWorldHint, ta.OpenWorldHint = c, v
						}
						ann, declared := ta.effective()
						var why []string
						fast := matchRule(&r, "ab", "b", &ann, nil, nil)
						slow := matchRule(&r, "ab", "b", &ann, &declared, &why)
						if fast != slow || slow != (len(why) == 0) {
							t.Fatalf("rule %+v tool %+v: fast %v, explained %v %q", r, ta, fast, slow, why)
						}
						n++
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no cases")
	}
}

// TestGlob checks glob against path.Match, whose syntax it has: they agree
// on every name without "/", and on which patterns are invalid; with "/"
// glob treats it as any other character.
func TestGlob(t *testing.T) {
	names := []string{"", "a", "ab", "abc", "b", "read_file", "read_", "read", "é", "aé", "a-b", "a]", "*", "a*b",
		"a/b", "ab/", "/", "x/read_y", "read_/x"}
	patterns := []string{"a", "ab", "a*", "ab*", "read_*", "*", "", "a?", "?", "??", "[ab]*", "[^a]*", "[!a]", "a\\*", "\\a*",
		"*b", "a*b", "*a*", "**", "a**b", "[a-c]?", "[é]", "a[é-ê]", "a\\", "ab\\*", "[", "a[", "[]", "[a-]", "[-a]", "a]", "*[", "a*[",
		"[\\]]", "[a\\-z]", "a/*", "*/*", "a?b", "[^/]*", "*_*"}
	for _, p := range patterns {
		_, badSyntax := path.Match(p, "")
		for _, n := range names {
			want, err := path.Match(p, n)
			if strings.Contains(n, "/") {
				// "/" is ordinary: the same as path.Match on the name with
				// "/" and the pattern's "/" made another character.
				want, err = path.Match(strings.ReplaceAll(p, "/", "\x00"), strings.ReplaceAll(n, "/", "\x00"))
			}
			if p == "" {
				want, err = true, nil
			}
			if got := glob(p, n); got != (want && err == nil) {
				t.Errorf("glob(%q, %q) = %v, want %v (%v)", p, n, got, want, err)
			}
			if m, merr := match(p, n); p != "" && (merr != nil) != (err != nil) {
				t.Errorf("match(%q, %q) = %v, %v; path.Match says %v, %v", p, n, m, merr, want, err)
			}
		}
		if _, err := match(p, ""); p != "" && (err != nil) != (badSyntax != nil) {
			t.Errorf("match(%q) error %v, path.Match's %v", p, err, badSyntax)
		}
	}
	// The point of it: "*" and the like match names with "/".
	for _, c := range [][2]string{{"*", "a/b"}, {"a*", "a/b"}, {"a?b", "a/b"}, {"*b", "x/b"}, {"[^a]", "/"}, {"a*b*", "a/b/c"}} {
		if !glob(c[0], c[1]) {
			t.Errorf("glob(%q, %q) = false", c[0], c[1])
		}
	}
}

func TestExplain(t *testing.T) {
	p := &Policy{Tools: Tools{
		Servers: []string{"filesystem", "git*"},
		Default: Deny,
		Rules: []Rule{
			{Server: "filesystem", Tool: "read_*", Action: Allow, Line: 5},
			{Server: "git*", Tool: "*", Annotations: Annotations{ReadOnlyHint: bp(true)}, Action: Allow, Line: 8},
			{Server: "*", Tool: "*", Annotations: Annotations{DestructiveHint: bp(false), IdempotentHint: bp(true)}, Action: Allow, Line: 11},
			{Server: "filesystem", Tool: "write_file", Action: Deny, Reason: "the filesystem is read-only here", Line: 14},
			{Server: "*", Tool: "[", Action: Allow, Line: 17},
		},
	}}
	tests := []struct {
		name string
		p    *Policy
		t    Tool
		want string
	}{
		{"rule denies with reason", p, Tool{Server: "filesystem", Name: "write_file"}, `
deny: server "filesystem", tool "write_file"
decided by: tools.rules[3] (line 14)
reason: the filesystem is read-only here
annotations: readOnlyHint=false (MCP default), destructiveHint=true (MCP default), idempotentHint=false (MCP default), openWorldHint=true (MCP default)
tools.servers ["filesystem", "git*"]: "filesystem" matches "filesystem": allowed
tools.rules[0] (line 5) {server: "filesystem", tool: "read_*", action: allow}: no match: tool glob "read_*" does not match "write_file"
tools.rules[1] (line 8) {server: "git*", tool: "*", annotations: {readOnlyHint: true}, action: allow}: no match: server glob "git*" does not match "filesystem"; annotation readOnlyHint is false (MCP default) but the rule wants true
tools.rules[2] (line 11) {server: "*", tool: "*", annotations: {destructiveHint: false, idempotentHint: true}, action: allow}: no match: annotation destructiveHint is true (MCP default) but the rule wants false; annotation idempotentHint is false (MCP default) but the rule wants true
tools.rules[3] (line 14) {server: "filesystem", tool: "write_file", action: deny}: match: deny
(1 later rule not tried)
`},
		{"annotations decide", p, Tool{Server: "github", Name: "search", Annotations: ToolAnnotations{ReadOnlyHint: bp(true), OpenWorldHint: bp(true)}}, `
allow: server "github", tool "search"
decided by: tools.rules[1] (line 8)
annotations: readOnlyHint=true (declared), destructiveHint=true (MCP default), idempotentHint=false (MCP default), openWorldHint=true (declared)
tools.servers ["filesystem", "git*"]: "github" matches "git*": allowed
tools.rules[0] (line 5) {server: "filesystem", tool: "read_*", action: allow}: no match: server glob "filesystem" does not match "github"; tool glob "read_*" does not match "search"
tools.rules[1] (line 8) {server: "git*", tool: "*", annotations: {readOnlyHint: true}, action: allow}: match: allow
(3 later rules not tried)
`},
		{"default decides", p, Tool{Server: "git", Name: "push", Annotations: ToolAnnotations{DestructiveHint: bp(false)}}, `
deny: server "git", tool "push"
decided by: tools.default
reason: denied by policy: no rule matched and the default is deny
annotations: readOnlyHint=false (MCP default), destructiveHint=false (declared), idempotentHint=false (MCP default), openWorldHint=true (MCP default)
tools.servers ["filesystem", "git*"]: "git" matches "git*": allowed
tools.rules[0] (line 5) {server: "filesystem", tool: "read_*", action: allow}: no match: server glob "filesystem" does not match "git"; tool glob "read_*" does not match "push"
tools.rules[1] (line 8) {server: "git*", tool: "*", annotations: {readOnlyHint: true}, action: allow}: no match: annotation readOnlyHint is false (MCP default) but the rule wants true
tools.rules[2] (line 11) {server: "*", tool: "*", annotations: {destructiveHint: false, idempotentHint: true}, action: allow}: no match: annotation idempotentHint is false (MCP default) but the rule wants true
tools.rules[3] (line 14) {server: "filesystem", tool: "write_file", action: deny}: no match: server glob "filesystem" does not match "git"; tool glob "write_file" does not match "push"
tools.rules[4] (line 17) {server: "*", tool: "[", action: allow}: no match: tool glob "[" is invalid and never matches
tools.default: no rule matched: deny
`},
		{"servers filter decides", p, Tool{Server: "slack", Name: "post"}, `
deny: server "slack", tool "post"
decided by: tools.servers
reason: server "slack" is not in the policy's tools.servers
annotations: readOnlyHint=false (MCP default), destructiveHint=true (MCP default), idempotentHint=false (MCP default), openWorldHint=true (MCP default)
tools.servers ["filesystem", "git*"]: "slack" matches none of them: deny
`},
		{"default policy", &Policy{}, Tool{Server: "s", Name: "t"}, `
allow: server "s", tool "t"
decided by: tools.default
annotations: readOnlyHint=false (MCP default), destructiveHint=true (MCP default), idempotentHint=false (MCP default), openWorldHint=true (MCP default)
tools.servers (not set: every server): allowed
tools.rules: none
tools.default: no rule matched: allow (not set)
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.Explain(tc.t)
			if want := strings.TrimPrefix(tc.want, "\n"); got != want {
				t.Errorf("Explain:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	// 50 rules none of which match, so every call tries them all and the
	// default decides: the worst case.
	p := &Policy{Tools: Tools{Servers: []string{"*"}, Default: Allow}}
	for i := 0; i < 50; i++ {
		r := Rule{Server: fmt.Sprintf("server-%d*", i), Tool: fmt.Sprintf("tool_%d_*", i), Action: Deny, Line: i + 3}
		if i%5 == 0 {
			r.Server = "*"
			r.Annotations.ReadOnlyHint = bp(true)
		}
		p.Tools.Rules = append(p.Tools.Rules, r)
	}
	t := Tool{Server: "filesystem", Name: "read_file", Annotations: ToolAnnotations{DestructiveHint: bp(false)}}
	b.ReportAllocs()
	for b.Loop() {
		if d := p.Decide(t); !d.Allow || d.Rule != RuleDefault {
			b.Fatal(d)
		}
	}
}

// FuzzGlob checks glob against path.Match on names without "/", and that
// both find the same patterns invalid.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"a*", "abc"}, {"[^a-c]?", "dx"}, {"*_*", "read_file"}, {"[", "a"}, {"a\\", "a"}, {"\\*x", "*x"}, {"[é-ë]*", "ê"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, p, n string) {
		if p == "" || strings.Contains(n, "/") {
			return
		}
		want, err := path.Match(p, n)
		got, gerr := match(p, n)
		if (err != nil) != (gerr != nil) || (err == nil && got != want) {
			t.Fatalf("match(%q, %q) = %v, %v; path.Match: %v, %v", p, n, got, gerr, want, err)
		}
		if g := glob(p, n); g != (want && err == nil) {
			t.Fatalf("glob(%q, %q) = %v; path.Match: %v, %v", p, n, g, want, err)
		}
	})
}

func TestDecideAsk(t *testing.T) {
	p := &Policy{Tools: Tools{
		Servers: []string{"*"},
		Default: Ask,
		Rules: []Rule{
			{Server: "pay", Tool: "refund*", Action: Ask, Reason: "refunds move money", Line: 4},
			{Server: "pay", Tool: "charge", Action: Ask, Line: 7},
			{Server: "pay", Action: Allow, Line: 9},
		},
		AskFallback: Deny, AskTimeout: 30 * time.Second, AskRemember: RememberRun, AskMaxPerRun: 4,
	}}
	for _, c := range []struct {
		t       Tool
		verdict string
		listed  bool
		rule    int
		reason  string
	}{
		{tool("pay", "refund_order"), "ask", true, 0, "refunds move money"},
		{tool("pay", "charge"), "ask", true, 1, `policy rule tools.rules[1] (line 7) asks before calls of server "pay", tool "charge"`},
		{tool("pay", "balance"), "allow", true, 2, ""},
		{tool("crm", "read"), "ask", true, RuleDefault, `the policy asks before any call no rule matches: server "crm", tool "read"`},
	} {
		d := p.Decide(c.t)
		if d.Verdict() != c.verdict || d.Listed() != c.listed || d.Rule != c.rule || d.Reason != c.reason {
			t.Errorf("%v: got %s listed=%t rule %d reason %q; want %s %t %d %q", c.t, d.Verdict(), d.Listed(), d.Rule, d.Reason, c.verdict, c.listed, c.rule, c.reason)
		}
		if d.Ask && d.Allow {
			t.Errorf("%v: Ask and Allow both set", c.t)
		}
	}
	deny := &Policy{Tools: Tools{Servers: []string{"x"}, Rules: []Rule{{Action: Ask}}}}
	if d := deny.Decide(tool("y", "t")); d.Listed() || d.Verdict() != "deny" {
		t.Errorf("a server outside tools.servers: got %s, listed %t", d.Verdict(), d.Listed())
	}

	out := p.Explain(tool("pay", "refund_order"))
	for _, want := range []string{
		`ask: server "pay", tool "refund_order"`,
		"decided by: tools.rules[0] (line 4)",
		"reason: refunds move money",
		"has 30s (tools.ask_timeout) to answer, else denied; at most 4 questions a run (tools.ask_max_per_run); a client without elicitation: denied (tools.ask_fallback: deny)",
		`tools.rules[0] (line 4) {server: "pay", tool: "refund*", action: ask}: match: ask`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Explain lacks %q:\n%s", want, out)
		}
	}
	p.Tools.AskFallback = Allow
	if out := p.Explain(tool("crm", "x")); !strings.Contains(out, "tools.default: no rule matched: ask\n") || !strings.Contains(out, "client without elicitation: allowed (tools.ask_fallback: allow)") {
		t.Errorf("Explain of the default ask:\n%s", out)
	}
}

func TestTokenizeMatches(t *testing.T) {
	p := mustParse(t, "version: 1\ntokenize:\n  results:\n    - {server: crm}\n    - {server: \"db-*\", tool: \"get_*\"}\n  restore:\n    - {server: mailer, tool: send}\n")
	tk := &p.Tokenize
	if !tk.On() || len(tk.Kinds) != 4 || tk.MaxValues != 10000 {
		t.Fatalf("tokenize: %+v", tk)
	}
	for _, c := range []struct {
		server, tool        string
		tokenizes, restores bool
	}{
		{"crm", "anything", true, false},
		{"db-eu", "get_user", true, false},
		{"db-eu", "put_user", false, false},
		{"mailer", "send", false, true},
		{"mailer", "send_all", false, false},
	} {
		if tk.Tokenizes(c.server, c.tool) != c.tokenizes || tk.Restores(c.server, c.tool) != c.restores {
			t.Errorf("%s/%s: tokenizes %t restores %t; want %t %t", c.server, c.tool,
				tk.Tokenizes(c.server, c.tool), tk.Restores(c.server, c.tool), c.tokenizes, c.restores)
		}
	}
	if off := Default().Tokenize; off.On() {
		t.Error("the default policy tokenizes")
	}
}
