package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/tailscale/hujson"

	"github.com/bridge-mcp/bridge/internal/suggest"
)

// Transport types of an upstream server, as [ServerConfig.Type] holds them.
const (
	TypeStdio = "stdio" // a local process spoken to over stdin/stdout
	TypeHTTP  = "http"  // streamable HTTP
	TypeSSE   = "sse"   // the legacy HTTP+SSE transport
)

// MaxNameLen is the longest server name accepted, in bytes.
const MaxNameLen = 64

// redacted stands in for a secret in String, GoString and MarshalJSON.
const redacted = "<redacted>"

// ServerConfig is one upstream MCP server, after ${VAR} expansion and
// validation.
//
// Env and Headers values are secrets: they stay on the host. String,
// GoString and MarshalJSON show their keys only, so a [ServerConfig] may be
// logged (with %v or zerolog's Interface/Stringer) without them.
type ServerConfig struct {
	// Name is the key of the entry, as given in the file.
	Name string
	// Type is TypeStdio, TypeHTTP or TypeSSE.
	Type string

	// Command, Args, Env and Cwd start a stdio server. A relative Cwd is
	// relative to the bridge's working directory.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string

	// URL and Headers reach an http or sse server.
	URL     string
	Headers map[string]string

	// Disabled marks an entry with "disabled": true. LoadFiles leaves such
	// entries out of its [Config].
	Disabled bool
	// Source is the file the entry came from, as the path was given.
	Source string
}

// String describes the server with the values of Env and Headers, and the
// secrets of URL (see RedactURL), replaced by "<redacted>".
func (s ServerConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", strconv.Quote(s.Name), s.Type)
	if s.Command != "" {
		fmt.Fprintf(&b, " command=%q", s.Command)
	}
	if len(s.Args) > 0 {
		fmt.Fprintf(&b, " args=%q", s.Args)
	}
	if s.Cwd != "" {
		fmt.Fprintf(&b, " cwd=%q", s.Cwd)
	}
	if len(s.Env) > 0 {
		fmt.Fprintf(&b, " env=[%s]", redactedKeys(s.Env))
	}
	if s.URL != "" {
		fmt.Fprintf(&b, " url=%q", RedactURL(s.URL))
	}
	if len(s.Headers) > 0 {
		fmt.Fprintf(&b, " headers=[%s]", redactedKeys(s.Headers))
	}
	if s.Disabled {
		b.WriteString(" disabled")
	}
	if s.Source != "" {
		fmt.Fprintf(&b, " source=%q", s.Source)
	}
	return b.String()
}

// GoString is String, so that %#v does not print the secrets either.
func (s ServerConfig) GoString() string { return "proxy.ServerConfig{" + s.String() + "}" }

// MarshalJSON writes the redacted view of String as a JSON object, for JSON
// loggers. It is not a way to save a config: the secrets are not in it.
func (s ServerConfig) MarshalJSON() ([]byte, error) {
	type view struct {
		Name     string            `json:"name"`
		Type     string            `json:"type"`
		Command  string            `json:"command,omitempty"`
		Args     []string          `json:"args,omitempty"`
		Env      map[string]string `json:"env,omitempty"`
		Cwd      string            `json:"cwd,omitempty"`
		URL      string            `json:"url,omitempty"`
		Headers  map[string]string `json:"headers,omitempty"`
		Disabled bool              `json:"disabled,omitempty"`
		Source   string            `json:"source,omitempty"`
	}
	v := view{Name: s.Name, Type: s.Type, Command: s.Command, Args: s.Args, Cwd: s.Cwd,
		Env: redactMap(s.Env), Headers: redactMap(s.Headers), Disabled: s.Disabled, Source: s.Source}
	if s.URL != "" {
		v.URL = RedactURL(s.URL)
	}
	return json.Marshal(v)
}

func redactMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = redacted
	}
	return out
}

func redactedKeys(m map[string]string) string {
	keys := sortedKeys(m)
	for i, k := range keys {
		keys[i] = strconv.Quote(k) + "=" + redacted
	}
	return strings.Join(keys, " ")
}

// Config is the set of upstream servers the bridge may use.
type Config struct {
	// Servers are the enabled servers, sorted by name.
	Servers []ServerConfig
}

// Warning is a problem in a config file that does not stop loading: an
// unknown key in a server entry, a field that does not apply to the
// entry's type, an entry that would start the bridge itself. It never
// holds a value from a file.
type Warning struct {
	File    string
	Server  string // empty when the warning is about the whole file
	Message string
}

// String is "file: server "name": message".
func (w Warning) String() string {
	if w.Server == "" {
		return w.File + ": " + w.Message
	}
	return fmt.Sprintf("%s: server %q: %s", w.File, w.Server, w.Message)
}

// ConfigError is a problem that makes a config file, or one server entry in
// it, unusable. Its message names the file and the JSON path (or the server
// and the field), never a value from Env or Headers.
type ConfigError struct {
	File   string
	Server string // empty when the error is about the whole file
	// Path is the JSON path of the faulty value, like mcpServers.fs.args[1];
	// empty when the error is about the whole file.
	Path    string
	Message string
	// Err is the underlying error (from the file system or the JSON
	// decoder), if any: errors.Is(err, fs.ErrNotExist) works through it.
	Err error
}

// Error is "file: path: message".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	switch {
	case e.Path != "":
		b.WriteString(": " + e.Path)
	case e.Server != "":
		fmt.Fprintf(&b, ": server %q", e.Server)
	}
	b.WriteString(": " + e.Message)
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// LoadOptions configure LoadFiles.
type LoadOptions struct {
	// Getenv looks up the variables of ${VAR} references; os.Getenv when nil.
	// A variable that is set to the empty string counts as unset.
	Getenv func(string) string
	// SelfPath is the bridge's own executable (os.Executable). An entry
	// whose command resolves to it, with "serve" among its args, is skipped.
	SelfPath string
	// SelfURL is the URL the bridge serves HTTP at, if it does. An http or
	// sse entry pointing at the same host and port (any path: the bridge
	// serves both /mcp and /sse there) is skipped. localhost and loopback
	// addresses count as one host, and an unspecified address (0.0.0.0,
	// [::]) in SelfURL matches them too.
	SelfURL string
	// SkipMissing is for the default locations, files of other tools that
	// the user did not name: those that do not exist are skipped, and one
	// without a servers key defines no servers. Otherwise a missing file is
	// an error, and so is one with neither "mcpServers" nor "servers" at the
	// top level (most likely a misspelt key, which the error names).
	SkipMissing bool
	// Logger gets debug notes (disabled entries, overridden ones). The zero
	// Logger writes nothing.
	Logger zerolog.Logger
}

// DefaultPaths returns the config files read when no --servers-config is
// given, in order of increasing precedence (a later file's entry replaces
// an earlier one's of the same name):
//
//  1. Claude Desktop on Linux: $XDG_CONFIG_HOME/Claude/claude_desktop_config.json
//     ($XDG_CONFIG_HOME defaults to ~/.config);
//  2. Claude Desktop on macOS: ~/Library/Application Support/Claude/claude_desktop_config.json;
//  3. Cursor: ~/.cursor/mcp.json;
//  4. Claude Code's user config: ~/.claude.json (its top-level mcpServers;
//     its per-project entries are not read);
//  5. the project's .mcp.json, in the current directory (a relative path).
//
// Missing files are meant to be skipped (LoadOptions.SkipMissing); an
// unreadable or invalid one is an error. getenv is os.Getenv when nil; when
// home is empty, only the paths that do not need it are returned.
func DefaultPaths(getenv func(string) string, home string) []string {
	if getenv == nil {
		getenv = os.Getenv
	}
	var paths []string
	xdg := getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(xdg) { // the XDG spec says to ignore a relative one
		xdg = ""
		if home != "" {
			xdg = filepath.Join(home, ".config")
		}
	}
	if xdg != "" {
		paths = append(paths, filepath.Join(xdg, "Claude", "claude_desktop_config.json"))
	}
	if home != "" {
		paths = append(paths,
			filepath.Join(home, "Library", "Application Support", "Claude", "claude_desktop_config.json"),
			filepath.Join(home, ".cursor", "mcp.json"),
			filepath.Join(home, ".claude.json"),
		)
	}
	return append(paths, ".mcp.json")
}

// LoadFiles reads the config files at paths, in order, and returns the
// enabled servers they define.
//
// A file is a JSON object (comments and trailing commas, which VS Code
// allows, are accepted) whose "mcpServers" key (Claude Desktop, Claude
// Code, Cursor) or "servers" key (VS Code) maps server names to entries:
//
//	{"command": "npx", "args": [...], "env": {...}, "cwd": "..."}   stdio
//	{"type": "http", "url": "https://...", "headers": {...}}         http or sse
//
// "type" is "stdio", "http" (also "streamable-http", "streamableHttp") or
// "sse"; without it, an entry with a url is http and one with a command is
// stdio. Other top-level keys are ignored: these files hold other settings.
// Unless LoadOptions.SkipMissing is set, a file with neither key is an
// error; one whose key holds no servers is not.
//
// ${VAR} and ${VAR:-default} (and VS Code's ${env:VAR}) are expanded in
// command, args, env values, cwd, url and header values; a "$" not followed
// by "{" is kept as it is, and there is no escape for "${". An unset
// variable without a default, and VS Code's ${input:id}, which the bridge
// cannot prompt for, are errors.
//
// A later file's entry replaces an earlier one's of the same name, whole;
// that includes entries that are disabled, skipped or invalid, so a project
// file can turn off a user-wide server by naming it with "disabled": true.
// Entries marked disabled are left out (logged at debug level). Entries
// that would start the bridge itself (see LoadOptions.SelfPath and
// SelfURL, and any command named "bridge" with "serve" in its args) are
// left out with a Warning, and so are unknown keys in an entry.
//
// Every problem found is returned, joined, as *ConfigError values. [Config]
// then still holds the servers that loaded cleanly, so that a caller may
// choose to go on without the faulty ones.
func LoadFiles(paths []string, opts LoadOptions) (Config, []Warning, error) {
	l := loader{opts: opts}
	if l.opts.Getenv == nil {
		l.opts.Getenv = os.Getenv
	}
	if opts.SelfPath != "" {
		l.self = resolveCommand(opts.SelfPath, "")
	}
	if opts.SelfURL != "" {
		u, err := url.Parse(opts.SelfURL)
		if err != nil || u.Host == "" {
			return Config{}, nil, fmt.Errorf("LoadOptions.SelfURL is not an absolute URL")
		}
		l.selfURL = u
	}

	final := map[string]entry{}
	for _, path := range paths {
		entries, ok := l.loadFile(path)
		if !ok {
			continue
		}
		for _, e := range entries {
			if prev, found := final[e.cfg.Name]; found {
				opts.Logger.Debug().Str("server", e.cfg.Name).Str("file", path).
					Str("overrides", prev.cfg.Source).Msg("upstream server config overridden")
			}
			final[e.cfg.Name] = e
		}
	}

	var cfg Config
	for _, name := range sortedKeys(final) {
		if e := final[name]; e.state == stateOK {
			cfg.Servers = append(cfg.Servers, e.cfg)
		}
	}
	return cfg, l.warnings, errors.Join(l.errs...)
}

type entryState int

const (
	stateOK       entryState = iota
	stateDisabled            // "disabled": true
	stateSelf                // would start the bridge itself
	stateInvalid             // has an error
)

// entry is what one file says about one server name.
type entry struct {
	cfg   ServerConfig
	state entryState
}

// loader holds one LoadFiles call's options and findings.
type loader struct {
	opts     LoadOptions
	self     string   // resolved SelfPath, or ""
	selfURL  *url.URL // parsed SelfURL, or nil
	warnings []Warning
	errs     []error
}

func (l *loader) warn(file, server, format string, args ...any) {
	l.warnings = append(l.warnings, Warning{File: file, Server: server, Message: fmt.Sprintf(format, args...)})
}

// fail records an error about the value at path (or the whole file when
// path is empty).
func (l *loader) fail(file, server, path string, err error, format string, args ...any) {
	l.errs = append(l.errs, &ConfigError{File: file, Server: server, Path: path, Message: fmt.Sprintf(format, args...), Err: err})
}

// loadFile reads one file. ok is false when the file was skipped or could
// not be read at all, so that it overrides nothing.
func (l *loader) loadFile(path string) (entries []entry, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		if l.opts.SkipMissing && errors.Is(err, fs.ErrNotExist) {
			return nil, false
		}
		msg := "cannot read the file"
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg += ": " + pe.Err.Error()
		}
		l.fail(path, "", "", err, "%s", msg)
		return nil, false
	}
	data = standardJSON(data)
	if len(bytes.TrimSpace(data)) == 0 {
		l.fail(path, "", "", nil, "the file is empty: want a JSON object")
		return nil, false
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(data, se.Offset)
			l.fail(path, "", "", err, "invalid JSON at line %d, column %d: %s", line, col, se.Error())
		} else {
			l.fail(path, "", "", err, "want a JSON object at the top level, got %s", kind(data))
		}
		return nil, false
	}
	if top == nil {
		l.fail(path, "", "", nil, "want a JSON object at the top level, got null")
		return nil, false
	}

	keys := 0                   // servers keys present
	seen := map[string]string{} // server name -> key it was under
	for _, key := range serversKeys() {
		raw, found := top[key]
		if found {
			keys++
		}
		if !found || kind(raw) == "null" {
			continue
		}
		var servers map[string]json.RawMessage
		if k := kind(raw); k != "object" {
			l.fail(path, "", key, nil, "want an object mapping server names to entries, got %s", k)
			continue
		}
		if err := json.Unmarshal(raw, &servers); err != nil {
			l.fail(path, "", key, err, "cannot decode: %v", err)
			continue
		}
		for _, name := range sortedKeys(servers) {
			p := joinPath(key, name)
			if other, dup := seen[name]; dup {
				l.fail(path, name, p, nil, "server is defined in both %s and %s", other, key)
				entries = append(entries, entry{cfg: ServerConfig{Name: name, Source: path}, state: stateInvalid})
				continue
			}
			seen[name] = key
			entries = append(entries, l.loadEntry(path, name, p, servers[name]))
		}
	}
	// A file the user named is there to define servers: one without a
	// servers key is most likely a misspelling, not a file of zero servers
	// (an empty "mcpServers" says that, and runs without the default
	// files). The default files belong to other tools and may hold none.
	if keys == 0 && !l.opts.SkipMissing {
		l.fail(path, "", "", nil, "%s", noServersKey(top))
		return nil, false
	}
	return entries, true
}

// serversKeys are the top-level keys that map server names to entries:
// "mcpServers" (Claude Desktop, Claude Code, Cursor) and "servers" (VS
// Code).
func serversKeys() []string { return []string{"mcpServers", "servers"} }

// noServersKey says that a file has no servers key, which keys the bridge
// reads, and what the file has instead: a key that misspells one, VS
// Code's settings.json nesting, or its keys.
func noServersKey(top map[string]json.RawMessage) string {
	msg := `no "mcpServers" key (Claude Desktop, Claude Code, Cursor) or "servers" key (VS Code) at the top level, so no servers to load`
	keys := sortedKeys(top)
	for _, k := range keys {
		if want := suggest.Key(k, serversKeys()); want != "" {
			return msg + fmt.Sprintf("; did you mean %q instead of %s?", want, quoteKey(k))
		}
	}
	var mcp map[string]json.RawMessage
	if json.Unmarshal(top["mcp"], &mcp) == nil && mcp["servers"] != nil {
		return msg + `; this looks like VS Code's settings.json, which keeps them in "mcp": {"servers": ...}: ` +
			`move that "servers" object to the top level of a file of its own, as in .vscode/mcp.json, and name that file`
	}
	if len(keys) == 0 {
		return msg + ": the file is an empty object"
	}
	const show = 5
	quoted := make([]string, 0, show)
	for _, k := range keys[:min(len(keys), show)] {
		quoted = append(quoted, quoteKey(k))
	}
	if len(keys) > show {
		quoted = append(quoted, fmt.Sprintf("and %d more", len(keys)-show))
	}
	return msg + "; the file has " + strings.Join(quoted, ", ")
}

// quoteKey is k quoted for a message, shortened if long.
func quoteKey(k string) string { return `"` + printable(k) + `"` }

// entryKeys are the keys a server entry may have.
func entryKeys() []string {
	return []string{"type", "command", "args", "env", "cwd", "url", "headers", "disabled"}
}

// loadEntry decodes, expands and checks one server entry.
func (l *loader) loadEntry(file, name, path string, raw json.RawMessage) entry {
	e := entry{cfg: ServerConfig{Name: name, Source: file}, state: stateInvalid}
	nerr := len(l.errs)
	failed := func() bool { return len(l.errs) > nerr }
	fail := func(p, format string, args ...any) { l.fail(file, name, p, nil, format, args...) }

	fields, ok := entryFields(name, path, raw, fail)
	if !ok {
		return e
	}
	d := decoder{fail: fail}

	// disabled first: a disabled entry is not checked any further.
	if v, ok := fields["disabled"]; ok {
		e.cfg.Disabled = d.boolean(v, path+".disabled")
		if failed() {
			return e
		}
		if e.cfg.Disabled {
			l.opts.Logger.Debug().Str("server", name).Str("file", file).Msg("upstream server disabled in config: skipped")
			e.state = stateDisabled
			return e
		}
	}
	l.warnUnknownKeys(file, name, fields)

	c := &e.cfg
	typ := decodeEntry(c, d, fields, path)
	if failed() {
		return e
	}
	if !setType(c, typ, path, fail) {
		return e
	}
	l.dropOtherTransport(file, name, c)
	expandEntry(c, expander{getenv: l.opts.Getenv, fail: fail}, path)
	if failed() {
		return e
	}

	if c.Type == TypeStdio {
		checkStdio(c, path, fail)
	} else {
		checkRemote(c, path, fail)
	}
	if failed() {
		return e
	}

	if why := l.selfReference(c); why != "" {
		l.warn(file, name, "skipped: %s, so the bridge would be its own upstream", why)
		e.state = stateSelf
		return e
	}
	e.state = stateOK
	return e
}

// entryFields checks a server's name and decodes its entry into its keys.
// ok is false, the failure recorded, when the name is not one or the entry
// is not a JSON object.
func entryFields(name, path string, raw json.RawMessage, fail func(p, format string, args ...any)) (fields map[string]json.RawMessage, ok bool) {
	if msg := checkName(name); msg != "" {
		fail(path, "%s", msg)
		return nil, false
	}
	if k := kind(raw); k != "object" {
		fail(path, "want an object, got %s", k)
		return nil, false
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		fail(path, "cannot decode: %v", err)
		return nil, false
	}
	return fields, true
}

// warnUnknownKeys warns of each key of an entry that is none of
// entryKeys, naming the one it most likely misspells.
func (l *loader) warnUnknownKeys(file, name string, fields map[string]json.RawMessage) {
	for _, k := range sortedKeys(fields) {
		if slices.Contains(entryKeys(), k) {
			continue
		}
		if want := suggest.Key(k, entryKeys()); want != "" {
			l.warn(file, name, "unknown key %q ignored; did you mean %q?", k, want)
		} else {
			l.warn(file, name, "unknown key %q ignored", k)
		}
	}
}

// decodeEntry decodes an entry's values into c, as written (not yet
// expanded), and returns its "type".
func decodeEntry(c *ServerConfig, d decoder, fields map[string]json.RawMessage, path string) (typ string) {
	typ = d.str(fields["type"], path+".type")
	c.Command = d.str(fields["command"], path+".command")
	c.Args = d.strings(fields["args"], path+".args")
	c.Env = d.stringMap(fields["env"], path+".env")
	c.Cwd = d.str(fields["cwd"], path+".cwd")
	c.URL = d.str(fields["url"], path+".url")
	c.Headers = d.stringMap(fields["headers"], path+".headers")
	return typ
}

// setType sets c's transport from the entry's "type", or, when it has
// none, from whether it has a command or a url. It is false, the failure
// recorded, when the type is unknown or neither or both say.
func setType(c *ServerConfig, typ, path string, fail func(p, format string, args ...any)) bool {
	switch typ {
	case TypeStdio, TypeSSE:
		c.Type = typ
	case TypeHTTP, "streamable-http", "streamableHttp":
		c.Type = TypeHTTP
	case "":
		switch {
		case c.Command != "" && c.URL != "":
			fail(path, `has both a command and a url: set "type" to "stdio", "http" or "sse"`)
			return false
		case c.URL != "":
			c.Type = TypeHTTP
		case c.Command != "":
			c.Type = TypeStdio
		default:
			fail(path, `needs a "command" (a stdio server) or a "url" (an http or sse server)`)
			return false
		}
	default:
		fail(path+".type", "%q is not a known type: want stdio, http or sse", typ)
		return false
	}
	return true
}

// dropOtherTransport drops the fields of the transport c does not use,
// with a warning for each one set: they are neither expanded nor checked.
func (l *loader) dropOtherTransport(file, name string, c *ServerConfig) {
	ignored := func(key string, set bool) {
		if set {
			l.warn(file, name, "%q is ignored for %s server", key, withArticle(c.Type))
		}
	}
	if c.Type == TypeStdio {
		ignored("url", c.URL != "")
		ignored("headers", len(c.Headers) > 0)
		c.URL, c.Headers = "", nil
	} else {
		ignored("command", c.Command != "")
		ignored("args", len(c.Args) > 0)
		ignored("env", len(c.Env) > 0)
		ignored("cwd", c.Cwd != "")
		c.Command, c.Args, c.Env, c.Cwd = "", nil, nil, ""
	}
}

// expandEntry expands the ${VAR} references in each of c's values; x
// records the failures.
func expandEntry(c *ServerConfig, x expander, path string) {
	c.Command = x.expand(c.Command, path+".command")
	for i := range c.Args {
		c.Args[i] = x.expand(c.Args[i], fmt.Sprintf("%s.args[%d]", path, i))
	}
	for _, k := range sortedKeys(c.Env) {
		c.Env[k] = x.expand(c.Env[k], joinPath(path+".env", k))
	}
	c.Cwd = x.expand(c.Cwd, path+".cwd")
	c.URL = x.expand(c.URL, path+".url")
	for _, k := range sortedKeys(c.Headers) {
		c.Headers[k] = x.expand(c.Headers[k], joinPath(path+".headers", k))
	}
}

// withArticle is "a stdio", "an http" or "an sse".
func withArticle(typ string) string {
	if typ == TypeStdio {
		return "a " + typ
	}
	return "an " + typ
}

// checkName says what is wrong with a server name, or "".
func checkName(name string) string {
	switch {
	case name == "":
		return "a server name must not be empty"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("server name is %d bytes long: at most %d", len(name), MaxNameLen)
	case strings.ContainsFunc(name, unicode.IsControl):
		return "server name contains a control character"
	case !utf8.ValidString(name):
		return "server name is not valid UTF-8"
	}
	return ""
}

func checkStdio(c *ServerConfig, path string, fail func(p, format string, args ...any)) {
	const nul = "contains a NUL byte"
	if c.Command == "" {
		fail(path+".command", "a stdio server needs a command")
	} else if strings.ContainsRune(c.Command, 0) {
		fail(path+".command", nul)
	}
	for i, a := range c.Args {
		if strings.ContainsRune(a, 0) {
			fail(fmt.Sprintf("%s.args[%d]", path, i), nul)
		}
	}
	for _, k := range sortedKeys(c.Env) {
		p := joinPath(path+".env", k)
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			fail(p, `not a valid environment variable name (empty, or with "=" or NUL)`)
		case strings.ContainsRune(c.Env[k], 0):
			fail(p, "value "+nul)
		}
	}
	if strings.ContainsRune(c.Cwd, 0) {
		fail(path+".cwd", nul)
	}
}

func checkRemote(c *ServerConfig, path string, fail func(p, format string, args ...any)) {
	// The URL may carry a token: messages describe it, never quote it.
	const want = "want an absolute http:// or https:// URL"
	switch u, err := url.Parse(c.URL); {
	case c.URL == "":
		fail(path+".url", "%s server needs a url", withArticle(c.Type))
	case err != nil:
		fail(path+".url", "%s: it does not parse", want)
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			fail(path+".url", "%s: it has no scheme", want)
		} else {
			fail(path+".url", "%s, not %s://", want, u.Scheme)
		}
	case u.Host == "":
		fail(path+".url", "%s: it has no host", want)
	}
	for _, k := range sortedKeys(c.Headers) {
		p := joinPath(path+".headers", k)
		switch {
		case !isToken(k):
			fail(p, "not a valid header name")
		case strings.ContainsAny(c.Headers[k], "\r\n"):
			fail(p, "the value contains a line break (CR or LF)")
		case strings.ContainsFunc(c.Headers[k], func(r rune) bool { return r != '\t' && (r < 0x20 || r == 0x7f) }):
			fail(p, "the value contains a control character")
		}
	}
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2), as
// header names must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// selfReference says why c would start or reach the bridge itself, or "".
func (l *loader) selfReference(c *ServerConfig) string {
	if c.Type == TypeStdio {
		if !slices.Contains(c.Args, "serve") {
			return ""
		}
		base := strings.TrimSuffix(filepath.Base(c.Command), ".exe")
		if base == "bridge" {
			return `its command is "bridge" with "serve" in its args`
		}
		if l.self != "" && resolveCommand(c.Command, c.Cwd) == l.self {
			return `its command is this bridge's executable with "serve" in its args`
		}
		return ""
	}
	if l.selfURL == nil {
		return ""
	}
	u, err := url.Parse(c.URL)
	if err == nil && sameHostPort(u, l.selfURL) {
		return "its url points at the bridge's own HTTP address"
	}
	return ""
}

// resolveCommand makes command an absolute path with symlinks resolved, as
// far as it can: a bare name is looked up in $PATH, a relative path is
// taken from dir (the entry's cwd).
func resolveCommand(command, dir string) string {
	p := command
	if !strings.ContainsRune(p, '/') && !strings.ContainsRune(p, filepath.Separator) {
		found, err := exec.LookPath(p)
		if err != nil {
			return p
		}
		p = found
	} else if !filepath.IsAbs(p) && dir != "" {
		p = filepath.Join(dir, p)
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return p
}

// sameHostPort reports whether u reaches the host and port of self.
func sameHostPort(u, self *url.URL) bool {
	if port(u) != port(self) {
		return false
	}
	h, sh := strings.ToLower(u.Hostname()), strings.ToLower(self.Hostname())
	if h == sh {
		return true
	}
	if !isLoopback(h) {
		return false
	}
	if isLoopback(sh) {
		return true
	}
	ip := net.ParseIP(sh)
	return ip != nil && ip.IsUnspecified()
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

func isLoopback(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// standardJSON is data, a JSON file that may have a byte order mark and
// VS Code's comments and trailing commas, as standard JSON: those become
// blanks and every other byte stays in place, so that a JSON error's
// position is still the file's. What hujson cannot read is returned as it
// is, and the JSON decoder then says where it is wrong.
func standardJSON(data []byte) []byte {
	std, _ := hujson.Standardize(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))
	return std
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	if col > 1 {
		col-- // the decoder's offset is just past the offending byte
	}
	return line, col
}
