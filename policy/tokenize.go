package policy

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/tokenize"
)

var (
	tokenizeKeys = []string{"kinds", "patterns", "results", "restore", "max_values"}
	patternKeys  = []string{"name", "regex"}
	matchKeys    = []string{"server", "tool"}
)

// TokenKinds are the built-in kinds of personal data tokenization finds,
// in the order they are tried (internal/tokenize says what each matches).
var TokenKinds = []string{"email", "phone", "iban", "card"}

// patternName is what an operator pattern may be named: its placeholders
// are <NAME_1>, NAME being the name in upper case.
var patternName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Bounds of the tokenize keys.
const (
	maxPatternBytes = 1 << 10
	maxPatterns     = 32
	maxTokenValues  = 1_000_000
)

// Tokenize keeps personal data out of the code's sight: values of Kinds
// and Patterns in the results of the tools Results matches reach the
// sandbox as per-run placeholders (<EMAIL_1>); a placeholder in the
// arguments of a tool Restore matches is put back to its value. Off while
// Results is empty.
type Tokenize struct {
	// Kinds are the built-in kinds looked for (TokenKinds); default all.
	Kinds []string
	// Patterns are the operator's own kinds.
	Patterns []TokenPattern
	// Results are the tools whose results are tokenized.
	Results []ToolMatch
	// Restore are the tools that get real values for placeholders.
	Restore []ToolMatch
	// MaxValues bounds the values one run may hold; a result that would
	// pass it is refused rather than passed on with real values. 10000.
	MaxValues int
}

// TokenPattern is an operator kind: values matching Regex (RE2 syntax)
// become <NAME_N>, NAME being Name in upper case.
type TokenPattern struct {
	Name, Regex  string
	Line, Column int
}

// ToolMatch matches tools by server and tool name globs ("*" by default).
type ToolMatch struct {
	Server, Tool string
	Line, Column int
}

func defaultTokenize() Tokenize {
	return Tokenize{Kinds: append([]string(nil), TokenKinds...), MaxValues: 10000}
}

// On reports whether any tool's results are tokenized.
func (t *Tokenize) On() bool { return len(t.Results) > 0 }

// Tokenizes reports whether the results of server's tool are tokenized.
func (t *Tokenize) Tokenizes(server, tool string) bool { return matchAny(t.Results, server, tool) }

// Restores reports whether server's tool gets real values for placeholders.
func (t *Tokenize) Restores(server, tool string) bool { return matchAny(t.Restore, server, tool) }

func matchAny(ms []ToolMatch, server, tool string) bool {
	for _, m := range ms {
		if glob(m.Server, server) && glob(m.Tool, tool) {
			return true
		}
	}
	return false
}

// tokenize reads the tokenize section.
func (p *parser) tokenize(k, v *yaml.Node, t *Tokenize) {
	p.keys(k, v, "tokenize", tokenizeKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "kinds":
			if v.Kind != yaml.SequenceNode {
				p.wrong(k, v, name, fmt.Sprintf("a list of kinds, some of %s", quoteList(TokenKinds)))
				return
			}
			kinds := []string{}
			ok := true
			for i, item := range v.Content {
				if p.skip(item) {
					ok = false
					continue
				}
				kind, good := p.enum(item, item, fmt.Sprintf("%s[%d]", name, i), TokenKinds)
				if good && contains(kinds, kind) {
					p.errorf(item, "%s[%d]: %s is listed twice", name, i, kind)
					good = false
				}
				ok = ok && good
				kinds = append(kinds, kind)
			}
			if ok {
				t.Kinds = kinds
			}
		case "patterns":
			p.items(k, v, name, "a list of patterns ({name, regex})", func(item *yaml.Node, iname string) {
				if len(t.Patterns) == maxPatterns {
					p.errorf(item, "%s: at most %d patterns", iname, maxPatterns)
					return
				}
				if pt, ok := p.tokenPattern(item, iname, t.Patterns); ok {
					t.Patterns = append(t.Patterns, pt)
				}
			})
		case "results", "restore":
			var list []ToolMatch
			p.items(k, v, name, "a list of tools ({server, tool})", func(item *yaml.Node, iname string) {
				if m, ok := p.toolMatch(item, iname); ok {
					list = append(list, m)
				}
			})
			if key == "results" {
				t.Results = list
			} else {
				t.Restore = list
			}
		case "max_values":
			t.MaxValues = int(p.integer(k, v, name, int64(t.MaxValues), 1, maxTokenValues))
		}
	})
	// Tokenization is off while results is empty: restore tools or
	// patterns would otherwise be silently ignored.
	var set []string
	if len(t.Restore) > 0 {
		set = append(set, "restore")
	}
	if len(t.Patterns) > 0 {
		set = append(set, "patterns")
	}
	if len(set) > 0 && len(t.Results) == 0 {
		p.errorf(k, "tokenize: %s set, but tokenize.results is empty, so tokenization would be off: "+
			"list in results the tools whose results are tokenized (e.g. - {server: crm, tool: \"*\"}), or remove the section", strings.Join(set, " and "))
	}
}

func (p *parser) tokenPattern(n *yaml.Node, name string, have []TokenPattern) (TokenPattern, bool) {
	pt := TokenPattern{Line: n.Line, Column: n.Column}
	ok := true
	seen, mapping := p.entry(n, name, "a pattern (a mapping with name and regex)", patternKeys, func(key, kname string, k, v *yaml.Node) {
		s, good := p.str(k, v, kname)
		if !good {
			ok = false
			return
		}
		switch key {
		case "name":
			if !patternName.MatchString(s) {
				p.errorf(v, "%s: %q is not a pattern name: 1 to 32 lower-case letters, digits or '_', starting with a letter", kname, s)
				ok = false
				return
			}
			if contains(TokenKinds, s) {
				p.errorf(v, "%s: %q is a built-in kind: list it in tokenize.kinds, or name the pattern otherwise", kname, s)
				ok = false
				return
			}
			for _, h := range have {
				if h.Name == s {
					p.errorf(v, "%s: a pattern named %q is defined already", kname, s)
					ok = false
					return
				}
			}
			pt.Name = s
		case "regex":
			if len(s) > maxPatternBytes {
				p.errorf(v, "%s: the regex is %d bytes; at most %d", kname, len(s), maxPatternBytes)
				ok = false
				return
			}
			re, err := regexp.Compile(s)
			if err != nil {
				p.errorf(v, "%s: not a regular expression (RE2 syntax): %v", kname, err)
				ok = false
				return
			}
			// What the proxy compiles: one judge of what a pattern may be.
			if _, err := tokenize.Pattern("x", s); re.MatchString("") || err != nil {
				p.errorf(v, "%s: %q can match the empty string (alone or at a word boundary, ^ or $); it must match a value", kname, s)
				ok = false
				return
			}
			pt.Regex = s
		}
	})
	if !mapping {
		return pt, false
	}
	for _, key := range patternKeys {
		if seen[key] == nil {
			p.errorf(n, "%s: missing %s: a pattern has a name and a regex", name, key)
			ok = false
		}
	}
	return pt, ok
}

func (p *parser) toolMatch(n *yaml.Node, name string) (ToolMatch, bool) {
	m := ToolMatch{Server: "*", Tool: "*", Line: n.Line, Column: n.Column}
	_, ok := p.entry(n, name, "a mapping with server and tool globs", matchKeys, func(key, kname string, k, v *yaml.Node) {
		g, _ := p.glob(k, v, kname)
		if key == "server" {
			m.Server = g
		} else {
			m.Tool = g
		}
	})
	return m, ok
}

// TokenKindsOf compiles t's kinds: the built-in ones it names, then its
// patterns. Parse accepted them, so an error here is a [Policy] not made by
// Parse.
func TokenKindsOf(t *Tokenize) ([]tokenize.Kind, error) {
	var kinds []tokenize.Kind
	for _, name := range t.Kinds {
		k, ok := tokenize.Builtin(name)
		if !ok {
			return nil, fmt.Errorf("no kind %q", name)
		}
		kinds = append(kinds, k)
	}
	for _, pt := range t.Patterns {
		k, err := tokenize.Pattern(pt.Name, pt.Regex)
		if err != nil {
			return nil, err
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}
