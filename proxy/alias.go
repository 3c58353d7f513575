package proxy

import "strings"

// pythonKeywords are the names ModuleAlias must not return: Python's hard
// keywords (keyword.kwlist) and the soft keywords match, case and type
// (keyword.softkwlist without "_", which stays usable as is).
var pythonKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true,
	"assert": true, "async": true, "await": true, "break": true, "class": true,
	"continue": true, "def": true, "del": true, "elif": true, "else": true,
	"except": true, "finally": true, "for": true, "from": true, "global": true,
	"if": true, "import": true, "in": true, "is": true, "lambda": true,
	"nonlocal": true, "not": true, "or": true, "pass": true, "raise": true,
	"return": true, "try": true, "while": true, "with": true, "yield": true,
	"match": true, "case": true, "type": true,
}

// ModuleAlias turns a server, tool or parameter name into a Python
// identifier, the same way the runner's mcp_tools package does:
//
//   - every character (rune) not in [A-Za-z0-9_] becomes "_";
//   - "_" goes in front if the result is empty or starts with a digit;
//   - "_" goes after it while it is a Python keyword (including the soft
//     keywords match, case and type) or in reserved (the caller's names, such
//     as mcp_tools' own attributes), so "class" becomes "class_" and, with
//     both "x" and "x_" reserved, "x" becomes "x__".
//
// Distinct names may share an alias ("a-b" and "a.b" both give "a_b"); the
// caller resolves such clashes.
func ModuleAlias(name string, reserved map[string]bool) string {
	var b strings.Builder
	b.Grow(len(name) + 2)
	if name == "" || (name[0] >= '0' && name[0] <= '9') {
		b.WriteByte('_')
	}
	for _, r := range name {
		if r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	alias := b.String()
	for pythonKeywords[alias] || reserved[alias] {
		alias += "_"
	}
	return alias
}
