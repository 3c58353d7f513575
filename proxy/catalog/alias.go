package catalog

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
	// A __dunder__ is Python's own (a module's __class__, __dict__...): it
	// loses its first "_" (__class__ -> _class__).
	if len(alias) > 4 && strings.HasPrefix(alias, "__") && strings.HasSuffix(alias, "__") && !reserved[alias] {
		alias = alias[1:]
	}
	for pythonKeywords[alias] || reserved[alias] {
		alias += "_"
	}
	return alias
}

// ModuleAliases gives each of names a distinct alias: a name that is its
// own alias keeps it; the others, in order, add "_" until no other name
// took it (the mcp_tools package's aliases(), in Python, does the same).
func ModuleAliases(names []string, reserved map[string]bool) map[string]string {
	out := make(map[string]string, len(names))
	taken := map[string]bool{}
	for _, n := range names {
		if _, done := out[n]; !done && ModuleAlias(n, reserved) == n {
			out[n], taken[n] = n, true
		}
	}
	for _, n := range names {
		if _, done := out[n]; done {
			continue
		}
		a := ModuleAlias(n, reserved)
		for taken[a] {
			a = ModuleAlias(a+"_", reserved)
		}
		out[n], taken[a] = a, true
	}
	return out
}
