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

	"github.com/bridge-mcp/bridge/policy"
)

// Rug-pull protection: the proxy pins each tool's definition the first
// time it sees it (its title, description, input and output schemas and
// annotations, as a SHA-256 of their JSON), whether the policy lists it or
// not, and remembers what changed when a later listing differs: the tool
// the operator reviewed, and the code chose by its description, is then no
// longer the tool called. A tool denied when first seen is pinned too: a
// server must not turn it into an allowed one by changing its annotations
// (readOnlyHint) with a new description. What a server says about itself
// and the code is shown (its serverInfo title and its instructions) is
// pinned alike at its first connect and compared at each reconnect. The
// policy's tools.on_change says what a call of a changed tool, or of any
// tool of a changed server, gets (gate.go); under deny a changed tool is
// not listed either (sync), nor the tools of a changed server, whose new
// text and start-up errors are withheld (Statuses): no definition or
// self-description the operator did not see reaches the code. Not pinned,
// and shown as they are: the results of the calls the policy lets through
// (a tool's output is the server's to write), and the start-up error of a
// server not changed (it may quote its stderr; the code and the human need
// it).

// pin is one tool's pinned definition, or one server's text.
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

// toolParts are the parts of a tool's definition, in the order a change
// names them; serverParts those of a server's text.
var (
	toolParts   = []string{"title", "description", "input schema", "output schema", "annotations"}
	serverParts = []string{"title", "instructions"}
)

// serverText is what a server says about itself that reaches the code
// (ServerStatus: its serverInfo title, and its instructions, whose first
// paragraph is its description), as JSON by part. Its serverInfo name and
// version are never shown to the code, and a new version alone is no
// change.
func serverText(info *mcp.InitializeResult) map[string][]byte {
	js := func(v string) []byte {
		b, _ := json.Marshal(v)
		return b
	}
	title := ""
	if info.ServerInfo != nil {
		title = info.ServerInfo.Title
	}
	return map[string][]byte{"title": js(title), "instructions": js(info.Instructions)}
}

// differs names the parts of now that differ from was, in parts' order
// ("description, annotations").
func differs(was, now map[string][]byte, parts []string) string {
	var changed []string
	for _, k := range parts {
		if !sameJSON(was[k], now[k]) {
			changed = append(changed, k)
		}
	}
	return strings.Join(changed, ", ")
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
// otherwise says what of it changed since: "" when nothing. Every tool an
// upstream lists is checked, whatever the policy says of it. Under regMu.
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
	why := differs(old.fields, fields, toolParts)
	if old.changed != why {
		p.log.Warn().Str("tool", name).Str("changed", why).
			Str("was", clipJSON(old.fields["description"])).Str("now", clipJSON(fields["description"])).
			Str("annotations_were", clipJSON(old.fields["annotations"])).Str("annotations_now", clipJSON(fields["annotations"])).
			Msg("proxy: a tool's definition changed since it was first listed (rug pull?); tools.on_change decides its calls")
	}
	old.changed = why
	return why
}

// pinServer pins what server said about itself (serverText) at its first
// connect, and compares each later connect's with it: a server that
// restarts with new instructions is no longer the server reviewed. It is
// called before the new session is handed out (connectAsync), so the gate
// of the call that started it, and every one after, knows.
func (p *Proxy) pinServer(server string, info *mcp.InitializeResult) {
	if info == nil {
		return
	}
	fields := serverText(info)
	d := digestOf(fields)
	p.regMu.Lock()
	defer p.regMu.Unlock()
	old, ok := p.serverPins[server]
	switch {
	case !ok:
		p.serverPins[server] = &pin{digest: d, fields: fields}
		return
	case old.digest == d:
		if old.changed != "" {
			p.version.Add(1) // back as pinned
		}
		old.changed = ""
		return
	}
	why := differs(old.fields, fields, serverParts)
	if old.changed != why {
		p.log.Warn().Str("server", server).Str("changed", why).
			Str("was", clipJSON(old.fields["instructions"])).Str("now", clipJSON(fields["instructions"])).
			Msg("proxy: what a server says about itself changed since the bridge first connected to it; tools.on_change decides its calls and whether the code sees it")
		// What the code is shown of the servers changed: a client in this
		// process fetches it again (Client.current).
		p.version.Add(1)
	}
	old.changed = why
}

// checked is what the gate decides a call of server's tool on, read at
// once under regMu: what the policy knows of the tool (its annotations, from
// the definition sync last checked against its pin; none if no list has
// it), what of that definition changed since it was pinned, what of
// server's own text changed: "" when nothing (or never pinned), and the
// generation of the session whose list that was (upstream.synced). The
// upstream's own newest list is not read: between its arrival and sync, a
// server that relisted a denied tool as read-only would have it decided
// as read-only while its pin still said unchanged.
func (p *Proxy) checked(server, tool string) (pt policy.Tool, toolChanged, srvChanged string, gen uint64) {
	name := ToolName(server, tool)
	p.regMu.Lock()
	defer p.regMu.Unlock()
	if u := p.byName[server]; u != nil {
		gen = u.synced.Load()
	}
	pt = policy.Tool{Server: server, Name: tool}
	if def, ok := p.defs[name]; ok && p.known[name] == [2]string{server, tool} {
		pt = ToolPolicy(server, def)
	}
	if pn, ok := p.pins[name]; ok {
		toolChanged = pn.changed
	}
	return pt, toolChanged, p.changedServer(server), gen
}

// changedServer says what of server's text changed since it was pinned
// (its first connect), "" when nothing. Under regMu.
func (p *Proxy) changedServer(server string) string {
	if pn, ok := p.serverPins[server]; ok {
		return pn.changed
	}
	return ""
}

// pinnedTitle is the title server gave itself when it was pinned. Under
// regMu.
func (p *Proxy) pinnedTitle(server string) string {
	var title string
	if pn, ok := p.serverPins[server]; ok {
		_ = json.Unmarshal(pn.fields["title"], &title)
	}
	return title
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
				was, now := map[string][]byte{}, map[string][]byte{}
				for _, k := range toolParts {
					was[k], now[k] = old.Definition[k], lt.Definition[k]
				}
				out = append(out, fmt.Sprintf("changed %s/%s: %s", server, tool, differs(was, now, toolParts)))
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
