package proxy

import (
	"strconv"
	"strings"
)

// expander expands ${VAR} references, reporting problems by JSON path. Its
// messages name variables, never values.
type expander struct {
	getenv func(string) string
	fail   func(path, format string, args ...any)
}

func (x expander) expand(s, path string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		ref, rest, closed := strings.Cut(s[i+2:], "}")
		if !closed {
			x.fail(path, `"${" without a closing "}": write ${NAME} or ${NAME:-default}`)
			return ""
		}
		s = rest
		if id, ok := strings.CutPrefix(ref, "input:"); ok {
			x.fail(path, "${input:%s} is a VS Code input, which the bridge cannot prompt for: "+
				"put the value in an environment variable and write ${NAME}", printable(id))
			return ""
		}
		name, def, hasDef := strings.Cut(ref, ":-")
		name = strings.TrimPrefix(name, "env:") // VS Code's spelling
		if !isVarName(name) {
			x.fail(path, "invalid variable reference: write ${NAME} or ${NAME:-default}, NAME made of letters, digits and _")
			return ""
		}
		if strings.Contains(def, "${") {
			x.fail(path, "the default of ${%s:-...} holds another ${...}, which is not supported", name)
			return ""
		}
		v := x.getenv(name)
		if v == "" {
			if !hasDef {
				x.fail(path, "environment variable %s is not set (give a default with ${%s:-value})", name, name)
				return ""
			}
			v = def
		}
		b.WriteString(v)
	}
}

func isVarName(s string) bool {
	if s == "" || '0' <= s[0] && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// printable shortens s and quotes what is not plain, for a message.
func printable(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
