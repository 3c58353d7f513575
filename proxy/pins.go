package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
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

// notInLock is the change of a tool a lock file does not list.
const notInLock = "not in the lock file"

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

// digestOf is the SHA-256 of the definition's parts, each as compact
// JSON (a lock file's indentation changes nothing).
func digestOf(fields map[string][]byte) [32]byte {
	compact := make(map[string][]byte, len(fields))
	for k, v := range fields {
		var b bytes.Buffer
		if json.Compact(&b, v) == nil {
			v = b.Bytes()
		}
		compact[k] = v
	}
	b, _ := json.Marshal(compact)
	return sha256.Sum256(b)
}

// pinOrCheck pins t (proxy name name) the first time it is seen, and
// otherwise says what of it changed since: "" when nothing. Under regMu.
func (p *Proxy) pinOrCheck(name string, t *mcp.Tool) string {
	fields := definition(t)
	d := digestOf(fields)
	old, ok := p.pins[name]
	if !ok && p.opts.Lock != nil {
		// Not reviewed: a lock lists every tool the operator accepted.
		p.pins[name] = &pin{digest: d, fields: fields, changed: notInLock}
		p.log.Warn().Str("tool", name).Msg("proxy: a tool the lock file does not list; tools.on_change decides its calls")
		return notInLock
	}
	if !ok {
		p.pins[name] = &pin{digest: d, fields: fields}
		return ""
	}
	if old.changed == notInLock {
		return notInLock
	}
	if old.digest == d {
		old.changed = ""
		return ""
	}
	var changed []string
	for _, k := range []string{"title", "description", "input schema", "output schema", "annotations"} {
		if !sameJSON(old.fields[k], fields[k]) {
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

// Lock is the tools' definitions as a lock file holds them (`bridge tools
// lock` writes it, `bridge tools diff` compares, tools.lock_file pins
// them): by server, then tool.
type Lock struct {
	Version int                              `json:"version"`
	Tools   map[string]map[string]LockedTool `json:"tools"`
}

// LockedTool is one tool in a [Lock]: the SHA-256 of its definition, and
// the definition's parts (title, description, input schema, output schema,
// annotations) as JSON.
type LockedTool struct {
	SHA256     string                     `json:"sha256"`
	Definition map[string]json.RawMessage `json:"definition"`
}

// LockVersion is the version of the lock files this bridge reads.
const LockVersion = 1

// ParseLock reads a lock file's contents, checking each tool's digest.
func ParseLock(data []byte) (*Lock, error) {
	var l Lock
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("not a tools lock file: %w", err)
	}
	if l.Version != LockVersion {
		return nil, fmt.Errorf("a tools lock file of version %d; this bridge reads version %d: write it again with `bridge tools lock`", l.Version, LockVersion)
	}
	for server, tools := range l.Tools {
		for tool, lt := range tools {
			fields := map[string][]byte{}
			for k, v := range lt.Definition {
				fields[k] = v
			}
			d := digestOf(fields)
			if hex.EncodeToString(d[:]) != lt.SHA256 {
				return nil, fmt.Errorf("the lock file's %s/%s does not match its sha256: it was edited by hand; write it again with `bridge tools lock`", server, tool)
			}
		}
	}
	return &l, nil
}

// pins are the lock's tools as the proxy pins them, by proxy tool name.
func (l *Lock) pins() map[string]*pin {
	out := map[string]*pin{}
	for server, tools := range l.Tools {
		for tool, lt := range tools {
			fields := map[string][]byte{}
			for k, v := range lt.Definition {
				fields[k] = v
			}
			out[ToolName(server, tool)] = &pin{digest: digestOf(fields), fields: fields}
		}
	}
	return out
}

// LockTools returns the definitions of every tool the upstreams list now,
// as a lock file holds them, and an error for each server that could not
// be listed (left out of the lock).
func (p *Proxy) LockTools(ctx context.Context) (*Lock, []error) {
	p.refreshAll(ctx)
	l := &Lock{Version: LockVersion, Tools: map[string]map[string]LockedTool{}}
	var failed []error
	for _, u := range p.ups {
		if connected, _, err := u.status(); !connected || u.cachedTools() == nil {
			if err == nil {
				err = errors.New("not connected")
			}
			failed = append(failed, fmt.Errorf("server %q: %w", u.cfg.Name, err))
			continue
		}
		tools := map[string]LockedTool{}
		for _, t := range u.cachedTools() {
			fields := definition(t)
			d := digestOf(fields)
			def := map[string]json.RawMessage{}
			for k, v := range fields {
				def[k] = v
			}
			tools[t.Name] = LockedTool{SHA256: hex.EncodeToString(d[:]), Definition: def}
		}
		l.Tools[u.cfg.Name] = tools
	}
	return l, failed
}

// LockDiff says how lock and now differ: one line a tool, sorted
// ("changed S/T: description", "new S/T: not in the lock file", "gone S/T").
func LockDiff(lock, now *Lock) []string {
	var out []string
	for server, tools := range now.Tools {
		for tool, lt := range tools {
			old, ok := lock.Tools[server][tool]
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("new %s/%s: not in the lock file", server, tool))
			case old.SHA256 != lt.SHA256:
				var changed []string
				for _, k := range []string{"title", "description", "input schema", "output schema", "annotations"} {
					if !sameJSON(old.Definition[k], lt.Definition[k]) {
						changed = append(changed, k)
					}
				}
				out = append(out, fmt.Sprintf("changed %s/%s: %s", server, tool, strings.Join(changed, ", ")))
			}
		}
	}
	for server, tools := range lock.Tools {
		for tool := range tools {
			if _, ok := now.Tools[server][tool]; !ok {
				if _, listed := now.Tools[server]; listed {
					out = append(out, fmt.Sprintf("gone %s/%s", server, tool))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// sameJSON reports whether a and b are the same JSON but for spacing.
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
