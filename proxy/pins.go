package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Rug-pull protection: the proxy pins each tool's definition the first
// time it lists it (its title, description, input and output schemas and
// annotations, as a SHA-256 of their JSON), and remembers what changed
// when a later listing differs: the tool the operator reviewed, and the
// code chose by its description, is then no longer the tool called. The
// policy's tools.on_change says what such a call gets (gate.go), and a
// denied changed tool is not listed either (sync), so its new description
// never reaches the code.

// pin is one tool's pinned definition.
type pin struct {
	digest  [32]byte
	fields  map[string][]byte // the definition's parts, by name, as JSON
	changed string            // what differs now, e.g. "description, input schema"; "" when nothing
}

// definition is a tool's parts that pinning covers, as JSON by name (the
// map's keys sort, so the digest is stable).
func definition(t *mcp.Tool) map[string][]byte {
	js := func(v any) []byte {
		b, _ := json.Marshal(v)
		return b
	}
	return map[string][]byte{
		"title":         js(t.Title),
		"description":   js(t.Description),
		"input schema":  js(t.InputSchema),
		"output schema": js(t.OutputSchema),
		"annotations":   js(t.Annotations),
	}
}

func digestOf(fields map[string][]byte) [32]byte {
	b, _ := json.Marshal(fields)
	return sha256.Sum256(b)
}

// pinOrCheck pins t (proxy name name) the first time it is seen, and
// otherwise says what of it changed since: "" when nothing. Under regMu.
func (p *Proxy) pinOrCheck(name string, t *mcp.Tool) string {
	fields := definition(t)
	d := digestOf(fields)
	old, ok := p.pins[name]
	if !ok {
		p.pins[name] = &pin{digest: d, fields: fields}
		return ""
	}
	if old.digest == d {
		old.changed = ""
		return ""
	}
	var changed []string
	for _, k := range []string{"title", "description", "input schema", "output schema", "annotations"} {
		if !bytes.Equal(old.fields[k], fields[k]) {
			changed = append(changed, k)
		}
	}
	why := strings.Join(changed, ", ")
	if old.changed != why {
		p.log.Warn().Str("tool", name).Str("changed", why).
			Str("was", clipJSON(old.fields["description"])).Str("now", clipJSON(fields["description"])).
			Msg("proxy: a tool's definition changed since it was first listed (rug pull?); tools.on_change decides its calls")
	}
	old.changed = why
	return why
}

// changedTool says what of the tool (proxy name name) changed since it was
// pinned, "" when nothing (or when it was never listed).
func (p *Proxy) changedTool(name string) string {
	p.regMu.Lock()
	defer p.regMu.Unlock()
	if pn, ok := p.pins[name]; ok {
		return pn.changed
	}
	return ""
}

// clipJSON is a JSON value for a log line, cut to 300 bytes.
func clipJSON(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}
