package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// writeFiles writes each content to its own file in a new temporary
// directory and returns their paths, in order.
func writeFiles(t *testing.T, contents ...string) []string {
	t.Helper()
	dir := t.TempDir()
	paths := make([]string, len(contents))
	for i, c := range contents {
		paths[i] = filepath.Join(dir, strconv.Itoa(i)+".json")
		if err := os.WriteFile(paths[i], []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

// mapEnv is a Getenv over a map.
func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadFiles(t *testing.T) {
	env := map[string]string{"TOKEN": "tok123", "HOME": "/home/u", "PORT": "9000", "EVIL": "a\r\nX-Injected: 1"}
	tests := []struct {
		name  string
		files []string
		// want lists the servers; Source holds the index of the file they
		// come from ("0", "1"), replaced by its path.
		want     []ServerConfig
		wantWarn []string // each must appear in one warning; none when nil
		wantErr  []string // each must appear in the error; no error when nil
	}{{
		name: "claude desktop",
		files: []string{`{
			"mcpServers": {
				"filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
				"github": {"command": "docker", "args": ["run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp-server"],
					"env": {"GITHUB_TOKEN": "ghp_x"}, "cwd": "/srv"}
			},
			"globalShortcut": "Ctrl+Space",
			"preferences": {"menuBarEnabled": true}
		}`},
		want: []ServerConfig{
			{Name: "filesystem", Type: TypeStdio, Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/tmp"}, Source: "0"},
			{Name: "github", Type: TypeStdio, Command: "docker", Args: []string{"run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp-server"},
				Env: map[string]string{"GITHUB_TOKEN": "ghp_x"}, Cwd: "/srv", Source: "0"},
		},
	}, {
		name: "mcp.json with http and headers",
		files: []string{`{"mcpServers": {
			"api": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}", "X-Plain": "v"}},
			"inferred": {"url": "http://localhost:3000/mcp"},
			"streamable": {"type": "streamable-http", "url": "https://s.example.com/mcp"},
			"old": {"type": "sse", "url": "https://old.example.com/sse"}
		}}`},
		want: []ServerConfig{
			{Name: "api", Type: TypeHTTP, URL: "https://api.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer tok123", "X-Plain": "v"}, Source: "0"},
			{Name: "inferred", Type: TypeHTTP, URL: "http://localhost:3000/mcp", Source: "0"},
			{Name: "old", Type: TypeSSE, URL: "https://old.example.com/sse", Source: "0"},
			{Name: "streamable", Type: TypeHTTP, URL: "https://s.example.com/mcp", Source: "0"},
		},
	}, {
		name: "vs code servers with sse, comments and trailing commas",
		files: []string{`{
			// VS Code's .vscode/mcp.json is JSON with comments
			"inputs": [{"type": "promptString", "id": "key", "description": "API key", "password": true}],
			"servers": {
				"events": {"type": "sse", "url": "https://events.example.com/sse", "headers": {"X-Key": "${env:TOKEN}"},},
				/* a local one */
				"local": {"type": "stdio", "command": "node", "args": ["server.js", "// not a comment"]},
			},
		}`},
		want: []ServerConfig{
			{Name: "events", Type: TypeSSE, URL: "https://events.example.com/sse", Headers: map[string]string{"X-Key": "tok123"}, Source: "0"},
			{Name: "local", Type: TypeStdio, Command: "node", Args: []string{"server.js", "// not a comment"}, Source: "0"},
		},
	}, {
		name:    "vs code input reference",
		files:   []string{`{"servers": {"gh": {"type": "http", "url": "https://x.example.com/mcp", "headers": {"Authorization": "Bearer ${input:gh-token}"}}}}`},
		wantErr: []string{`servers.gh.headers.Authorization: ${input:gh-token} is a VS Code input`, "environment variable"},
	}, {
		name: "disabled is left out, without a warning",
		files: []string{`{"mcpServers": {
			"off": {"command": "x", "disabled": true, "env": {"A": "${UNSET}"}, "bogus": 1},
			"on": {"command": "y", "disabled": false}
		}}`},
		want: []ServerConfig{{Name: "on", Type: TypeStdio, Command: "y", Source: "0"}},
	}, {
		name: "precedence: later file replaces the whole entry",
		files: []string{
			`{"mcpServers": {"a": {"command": "a0"}, "b": {"command": "b0", "args": ["old"], "env": {"K": "v"}}, "c": {"command": "c0"}}}`,
			`{"servers": {"b": {"type": "http", "url": "https://b.example.com/mcp"}, "c": {"command": "c1", "disabled": true}}}`,
		},
		want: []ServerConfig{
			{Name: "a", Type: TypeStdio, Command: "a0", Source: "0"},
			{Name: "b", Type: TypeHTTP, URL: "https://b.example.com/mcp", Source: "1"},
		},
	}, {
		name: "expansion: set, default, literal $",
		files: []string{`{"mcpServers": {"s": {
			"command": "${HOME}/bin/srv",
			"args": ["--port=${PORT:-8080}", "--host=${HOST:-127.0.0.1}", "$HOME", "$$", "$", "cost: $5", "$${TOKEN}", "${EMPTYDEF:-}"],
			"env": {"T": "${TOKEN}", "LIT": "$TOKEN"},
			"cwd": "${HOME}/work"
		}}}`},
		want: []ServerConfig{{Name: "s", Type: TypeStdio, Command: "/home/u/bin/srv",
			Args: []string{"--port=9000", "--host=127.0.0.1", "$HOME", "$$", "$", "cost: $5", "$tok123", ""},
			Env:  map[string]string{"T": "tok123", "LIT": "$TOKEN"}, Cwd: "/home/u/work", Source: "0"}},
	}, {
		name:    "expansion: unset variable",
		files:   []string{`{"mcpServers": {"s": {"command": "srv", "args": ["--key", "${MISSING_KEY}"]}}}`},
		wantErr: []string{"mcpServers.s.args[1]: environment variable MISSING_KEY is not set"},
	}, {
		name:    "expansion: unset variable in a url",
		files:   []string{`{"mcpServers": {"remote": {"url": "https://${API_HOST}/mcp"}}}`},
		wantErr: []string{"mcpServers.remote.url: environment variable API_HOST is not set"},
	}, {
		name:    "expansion: unterminated and invalid references",
		files:   []string{`{"mcpServers": {"a": {"command": "${HOME"}, "b": {"command": "${not a name}"}, "c": {"command": "${X:-${Y}}"}}}`},
		wantErr: []string{`mcpServers.a.command: "${" without a closing "}"`, "mcpServers.b.command: invalid variable reference", "mcpServers.c.command: the default of ${X:-...}"},
	}, {
		name: "self-reference by base name is skipped",
		files: []string{`{"mcpServers": {
			"me": {"command": "/usr/local/bin/bridge", "args": ["serve", "--http", "127.0.0.1:8808"]},
			"me2": {"command": "bridge", "args": ["serve"]},
			"runner": {"command": "bridge", "args": ["run", "x.py"]},
			"other": {"command": "bridge-helper", "args": ["serve"]}
		}}`},
		want: []ServerConfig{
			{Name: "other", Type: TypeStdio, Command: "bridge-helper", Args: []string{"serve"}, Source: "0"},
			{Name: "runner", Type: TypeStdio, Command: "bridge", Args: []string{"run", "x.py"}, Source: "0"},
		},
		wantWarn: []string{`server "me": skipped: its command is "bridge"`, `server "me2": skipped`},
	}, {
		name:    "bad types with JSON paths",
		files:   []string{`{"mcpServers": {"fs": {"command": "npx", "args": ["-y", 3], "env": {"PORT": 8080}, "cwd": ["x"]}, "s": "npx", "d": {"command": "x", "disabled": "yes"}, "h": {"url": "https://h", "headers": []}}}`},
		wantErr: []string{"mcpServers.fs.args[1]: want a string, got number", "mcpServers.fs.env.PORT: want a string, got number", "mcpServers.fs.cwd: want a string, got array", "mcpServers.s: want an object, got string", "mcpServers.d.disabled: want a boolean, got string", "mcpServers.h.headers: want an object, got array"},
	}, {
		name:    "servers key of the wrong type",
		files:   []string{`{"mcpServers": [{"command": "x"}]}`},
		wantErr: []string{"0.json: mcpServers: want an object mapping server names to entries, got array"},
	}, {
		name:    "names needing brackets in paths",
		files:   []string{`{"mcpServers": {"@scope/srv": {"command": "x", "args": [null]}}}`},
		wantErr: []string{`mcpServers["@scope/srv"].args[0]: want a string, got null`},
	}, {
		name: "unknown keys in an entry are warnings",
		files: []string{`{"mcpServers": {"fs": {"command": "npx", "envFile": ".env", "autoApprove": []}},
			"unknownTopLevel": {"anything": 1}}`},
		want:     []ServerConfig{{Name: "fs", Type: TypeStdio, Command: "npx", Source: "0"}},
		wantWarn: []string{`0.json: server "fs": unknown key "autoApprove" ignored`, `0.json: server "fs": unknown key "envFile" ignored`},
	}, {
		name: "fields of the other transport are ignored with a warning",
		files: []string{`{"mcpServers": {
			"h": {"type": "http", "url": "https://h.example.com/mcp", "command": "x", "env": {"A": "${UNSET}"}},
			"s": {"type": "stdio", "command": "x", "headers": {"A": "b"}}
		}}`},
		want: []ServerConfig{
			{Name: "h", Type: TypeHTTP, URL: "https://h.example.com/mcp", Source: "0"},
			{Name: "s", Type: TypeStdio, Command: "x", Source: "0"},
		},
		wantWarn: []string{`server "h": "command" is ignored for an http server`, `server "h": "env" is ignored`, `server "s": "headers" is ignored for a stdio server`},
	}, {
		name: "invalid urls",
		files: []string{`{"mcpServers": {
			"ftp": {"url": "ftp://files.example.com/mcp"},
			"rel": {"type": "http", "url": "/mcp"},
			"nohost": {"type": "sse", "url": "https:///sse"},
			"none": {"type": "http"},
			"bad": {"url": "http://[::1"}
		}}`},
		wantErr: []string{"mcpServers.ftp.url: want an absolute http:// or https:// URL, not ftp://", "mcpServers.rel.url: want an absolute http:// or https:// URL: it has no scheme",
			"mcpServers.nohost.url: want an absolute http:// or https:// URL: it has no host", "mcpServers.none.url: an http server needs a url", "mcpServers.bad.url: want an absolute http:// or https:// URL: it does not parse"},
	}, {
		name:    "missing command",
		files:   []string{`{"mcpServers": {"a": {"type": "stdio", "args": ["x"]}, "b": {}, "c": {"command": "x", "url": "https://c.example.com"}}}`},
		wantErr: []string{"mcpServers.a.command: a stdio server needs a command", `mcpServers.b: needs a "command" (a stdio server) or a "url"`, `mcpServers.c: has both a command and a url`},
	}, {
		name:    "unknown type",
		files:   []string{`{"mcpServers": {"ws": {"type": "websocket", "url": "wss://x"}}}`},
		wantErr: []string{`mcpServers.ws.type: "websocket" is not a known type`},
	}, {
		name: "bad headers",
		files: []string{`{"mcpServers": {
			"crlf": {"url": "https://a.example.com", "headers": {"X-A": "one\r\nX-B: two"}},
			"lf": {"url": "https://a.example.com", "headers": {"X-A": "one\ntwo"}},
			"fromenv": {"url": "https://a.example.com", "headers": {"X-A": "${EVIL}"}},
			"ctl": {"url": "https://a.example.com", "headers": {"X-A": "a\u0000b"}},
			"name": {"url": "https://a.example.com", "headers": {"Bad Header": "v"}}
		}}`},
		wantErr: []string{"mcpServers.crlf.headers.X-A: the value contains a line break", "mcpServers.lf.headers.X-A: the value contains a line break",
			"mcpServers.fromenv.headers.X-A: the value contains a line break", "mcpServers.ctl.headers.X-A: the value contains a control character",
			`mcpServers.name.headers["Bad Header"]: not a valid header name`},
	}, {
		name:    "bad env names",
		files:   []string{`{"mcpServers": {"s": {"command": "x", "env": {"A=B": "v", "": "w"}}}}`},
		wantErr: []string{`mcpServers.s.env["A=B"]: not a valid environment variable name`, `mcpServers.s.env[""]: not a valid`},
	}, {
		name: "bad names",
		files: []string{`{"mcpServers": {
			"": {"command": "x"},
			"` + strings.Repeat("n", 65) + `": {"command": "x"},
			"tab\there": {"command": "x"},
			"` + strings.Repeat("m", 64) + `": {"command": "x"},
			"ünïcode name": {"command": "x"}
		}}`},
		want: []ServerConfig{
			{Name: strings.Repeat("m", 64), Type: TypeStdio, Command: "x", Source: "0"},
			{Name: "ünïcode name", Type: TypeStdio, Command: "x", Source: "0"},
		},
		wantErr: []string{`mcpServers[""]: a server name must not be empty`, "server name is 65 bytes long: at most 64", `mcpServers["tab\there"]: server name contains a control character`},
	}, {
		name:    "both keys name the same server",
		files:   []string{`{"mcpServers": {"a": {"command": "x"}}, "servers": {"a": {"command": "y"}}}`},
		wantErr: []string{"servers.a: server is defined in both mcpServers and servers"},
	}, {
		name:    "invalid JSON",
		files:   []string{"{\n  \"mcpServers\": {\n    \"a\": {\"command\" \"x\"}\n  }\n}"},
		wantErr: []string{"0.json: invalid JSON at line 3, column 21"},
	}, {
		name:    "not an object",
		files:   []string{`[{"mcpServers": {}}]`, `null`, "  \n"},
		wantErr: []string{"0.json: want a JSON object at the top level, got array", "1.json: want a JSON object at the top level, got null", "2.json: the file is empty"},
	}, {
		name: "an invalid entry replaces an earlier one, others load",
		files: []string{
			`{"mcpServers": {"a": {"command": "a0"}, "b": {"command": "b0"}}}`,
			`{"mcpServers": {"a": {"command": "a1", "args": [1]}, "c": {"command": "c1"}}}`,
		},
		want: []ServerConfig{
			{Name: "b", Type: TypeStdio, Command: "b0", Source: "0"},
			{Name: "c", Type: TypeStdio, Command: "c1", Source: "1"},
		},
		wantErr: []string{"1.json: mcpServers.a.args[0]: want a string, got number"},
	}, {
		name:  "no servers at all",
		files: []string{`{"mcpServers": {}}`, `{"mcpServers": null, "projects": {"/x": {"mcpServers": {"p": {"command": "x"}}}}}`},
	}, {
		name:     "a misspelt key in an entry",
		files:    []string{`{"mcpServers": {"fs": {"comand": "npx", "url": "https://h.example.com", "Headers": {}}}}`},
		want:     []ServerConfig{{Name: "fs", Type: TypeHTTP, URL: "https://h.example.com", Source: "0"}},
		wantWarn: []string{`server "fs": unknown key "comand" ignored; did you mean "command"?`, `server "fs": unknown key "Headers" ignored; did you mean "headers"?`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths := writeFiles(t, tt.files...)
			cfg, warns, err := LoadFiles(paths, LoadOptions{Getenv: mapEnv(env)})

			want := make([]ServerConfig, len(tt.want))
			for i, s := range tt.want {
				n, _ := strconv.Atoi(s.Source)
				s.Source = paths[n]
				want[i] = s
			}
			if len(want) == 0 {
				want = nil
			}
			if !reflect.DeepEqual(cfg.Servers, want) {
				t.Errorf("servers:\n got %#v\nwant %#v", cfg.Servers, want)
				for i := range min(len(cfg.Servers), len(want)) {
					if !reflect.DeepEqual(cfg.Servers[i], want[i]) {
						t.Errorf("first difference at %d:\n got %+v\nwant %+v", i, rawFields(cfg.Servers[i]), rawFields(want[i]))
						break
					}
				}
			}
			checkMessages(t, "warning", warnStrings(warns), tt.wantWarn)
			if tt.wantErr == nil {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want one with %q", tt.wantErr)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %v is not a *ConfigError", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// rawFields shows a ServerConfig with its secrets, for test failures only.
type rawFields ServerConfig

func warnStrings(warns []Warning) []string {
	var out []string
	for _, w := range warns {
		out = append(out, w.String())
	}
	return out
}

// checkMessages checks that each of want is in one of got, and that got is
// empty when want is.
func checkMessages(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(want) == 0 && len(got) > 0 {
		t.Errorf("unexpected %ss: %q", what, got)
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.Contains(g, w)
		}
		if !found {
			t.Errorf("no %s contains %q; got %q", what, w, got)
		}
	}
}

func TestLoadFilesSelf(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "real-binary")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "mcp-bridge")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfgJSON := fmt.Sprintf(`{"mcpServers": {
		"via-link": {"command": %q, "args": ["serve"]},
		"direct": {"command": %q, "args": ["--log-level", "debug", "serve"]},
		"relative": {"command": "./mcp-bridge", "args": ["serve"], "cwd": %q},
		"not-serving": {"command": %q, "args": ["doctor"]},
		"other-binary": {"command": %q, "args": ["serve"]},
		"own-url": {"url": "http://localhost:8808/sse"},
		"own-url-v4": {"type": "http", "url": "http://127.0.0.1:8808/mcp"},
		"other-port": {"url": "http://localhost:8809/mcp"},
		"other-host": {"url": "http://example.com:8808/mcp"}
	}}`, link, exe, dir, link, other)

	tests := []struct {
		name     string
		opts     LoadOptions
		wantKept []string
		wantWarn []string
	}{{
		name:     "SelfPath and SelfURL",
		opts:     LoadOptions{SelfPath: exe, SelfURL: "http://127.0.0.1:8808/mcp"},
		wantKept: []string{"not-serving", "other-binary", "other-host", "other-port"},
		wantWarn: []string{`"via-link": skipped: its command is this bridge's executable`, `"direct": skipped`, `"relative": skipped`,
			`"own-url": skipped: its url points at the bridge's own HTTP address`, `"own-url-v4": skipped`},
	}, {
		name:     "SelfPath given as the symlink",
		opts:     LoadOptions{SelfPath: link},
		wantKept: []string{"not-serving", "other-binary", "other-host", "other-port", "own-url", "own-url-v4"},
		wantWarn: []string{`"via-link": skipped`, `"direct": skipped`, `"relative": skipped`},
	}, {
		name:     "unspecified listen address",
		opts:     LoadOptions{SelfURL: "http://0.0.0.0:8808/mcp"},
		wantKept: []string{"direct", "not-serving", "other-binary", "other-host", "other-port", "relative", "via-link"},
		wantWarn: []string{`"own-url": skipped`, `"own-url-v4": skipped`},
	}, {
		name:     "nothing given",
		wantKept: []string{"direct", "not-serving", "other-binary", "other-host", "other-port", "own-url", "own-url-v4", "relative", "via-link"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, warns, err := LoadFiles(writeFiles(t, cfgJSON), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, s := range cfg.Servers {
				kept = append(kept, s.Name)
			}
			if !reflect.DeepEqual(kept, tt.wantKept) {
				t.Errorf("kept %q, want %q", kept, tt.wantKept)
			}
			checkMessages(t, "warning", warnStrings(warns), tt.wantWarn)
			if len(warns) != len(tt.wantWarn) {
				t.Errorf("%d warnings, want %d: %q", len(warns), len(tt.wantWarn), warnStrings(warns))
			}
		})
	}

	if _, _, err := LoadFiles(nil, LoadOptions{SelfURL: "127.0.0.1:8808"}); err == nil {
		t.Error("LoadFiles accepted a SelfURL with no scheme")
	}
}

// TestLoadFilesServersKey: a file the user named must have a servers key
// (which may be empty), and the error for one without says which keys
// count and what the file has instead; the default files, which belong to
// other tools, need none.
func TestLoadFilesServersKey(t *testing.T) {
	const accepted = `no "mcpServers" key (Claude Desktop, Claude Code, Cursor) or "servers" key (VS Code) at the top level, so no servers to load`
	tests := []struct {
		name    string
		file    string
		wantErr string // for a named file; "" for none
		servers int    // how many it defines
	}{
		{name: "snake case", file: `{"mcp_servers": {"a": {"command": "x"}}}`,
			wantErr: accepted + `; did you mean "mcpServers" instead of "mcp_servers"?`},
		{name: "lower case", file: `{"globalShortcut": "", "mcpservers": {"a": {"command": "x"}}}`,
			wantErr: `did you mean "mcpServers" instead of "mcpservers"?`},
		{name: "singular", file: `{"server": {"a": {"command": "x"}}, "inputs": []}`,
			wantErr: `did you mean "servers" instead of "server"?`},
		{name: "VS Code settings", file: `{"editor.fontSize": 14, "mcp": {"servers": {"a": {"command": "x"}}}}`,
			wantErr: `this looks like VS Code's settings.json, which keeps them in "mcp": {"servers": ...}`},
		{name: "nothing near", file: `{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}`,
			wantErr: accepted + `; the file has "a", "b", "c", "d", "e", and 1 more`},
		{name: "long keys are cut", file: `{"` + strings.Repeat("k", 100) + `": 1}`,
			wantErr: `the file has "` + strings.Repeat("k", 64) + `..."`},
		{name: "empty object", file: `{}`, wantErr: accepted + ": the file is an empty object"},
		{name: "no servers", file: `{"mcpServers": {}}`},
		{name: "null servers", file: `{"servers": null}`},
		{name: "servers", file: `{"servers": {"a": {"command": "x"}}, "mcp_servers": {}}`, servers: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFiles(t, tt.file)[0]
			_, warns, err := LoadFiles([]string{path}, LoadOptions{})
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("named file: unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("named file: error %v\nwant one containing %s", err, tt.wantErr)
			case tt.wantErr != "" && !strings.HasPrefix(err.Error(), path+": no \"mcpServers\" key"):
				t.Errorf("named file: error %v does not start with the file and what is missing", err)
			}
			var ce *ConfigError
			if err != nil && !errors.As(err, &ce) {
				t.Errorf("error %v is not a *ConfigError", err)
			}
			checkMessages(t, "warning", warnStrings(warns), nil)
			// As a default file (of another tool), the same file loads
			// whatever servers it has, without an error or a warning.
			cfg, warns, err := LoadFiles([]string{path}, LoadOptions{SkipMissing: true})
			if err != nil || len(warns) > 0 {
				t.Errorf("default file: error %v, warnings %v", err, warns)
			}
			if len(cfg.Servers) != tt.servers {
				t.Errorf("default file: %d servers, want %d", len(cfg.Servers), tt.servers)
			}
		})
	}
}

func TestLoadFilesMissing(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.json")
	good := writeFiles(t, `{"mcpServers": {"a": {"command": "x"}}}`)[0]
	tests := []struct {
		name     string
		paths    []string
		skip     bool
		wantErr  string
		notExist bool
		wantLen  int
	}{
		{name: "skipped", paths: []string{missing, good}, skip: true, wantLen: 1},
		{name: "required", paths: []string{missing, good}, wantErr: "nope.json: cannot read the file", notExist: true, wantLen: 1},
		{name: "a directory is an error even when skipping", paths: []string{dir}, skip: true, wantErr: "cannot read the file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := LoadFiles(tt.paths, LoadOptions{SkipMissing: tt.skip})
			if len(cfg.Servers) != tt.wantLen {
				t.Errorf("%d servers, want %d", len(cfg.Servers), tt.wantLen)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tt.notExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", got, tt.notExist)
			}
		})
	}
}

func TestDefaultPaths(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		home string
		want []string
	}{{
		name: "xdg unset",
		home: "/home/u",
		want: []string{
			"/home/u/.config/Claude/claude_desktop_config.json",
			"/home/u/Library/Application Support/Claude/claude_desktop_config.json",
			"/home/u/.cursor/mcp.json",
			"/home/u/.claude.json",
			".mcp.json",
		},
	}, {
		name: "xdg set",
		env:  map[string]string{"XDG_CONFIG_HOME": "/cfg"},
		home: "/home/u",
		want: []string{
			"/cfg/Claude/claude_desktop_config.json",
			"/home/u/Library/Application Support/Claude/claude_desktop_config.json",
			"/home/u/.cursor/mcp.json",
			"/home/u/.claude.json",
			".mcp.json",
		},
	}, {
		name: "relative xdg is ignored",
		env:  map[string]string{"XDG_CONFIG_HOME": "cfg"},
		home: "/home/u",
		want: []string{
			"/home/u/.config/Claude/claude_desktop_config.json",
			"/home/u/Library/Application Support/Claude/claude_desktop_config.json",
			"/home/u/.cursor/mcp.json",
			"/home/u/.claude.json",
			".mcp.json",
		},
	}, {
		name: "no home",
		env:  map[string]string{"XDG_CONFIG_HOME": "/cfg"},
		want: []string{"/cfg/Claude/claude_desktop_config.json", ".mcp.json"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultPaths(mapEnv(tt.env), tt.home); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestDefaultPathsPrecedence loads files at the default locations and checks
// that a later one wins.
func TestDefaultPathsPrecedence(t *testing.T) {
	home := t.TempDir()
	project := t.TempDir()
	t.Chdir(project)
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(home, ".config/Claude/claude_desktop_config.json"), `{"mcpServers": {"a": {"command": "desktop"}, "b": {"command": "desktop"}, "c": {"command": "desktop"}}}`)
	write(filepath.Join(home, ".cursor/mcp.json"), `{"mcpServers": {"b": {"command": "cursor"}}}`)
	write(filepath.Join(home, ".claude.json"), `{"numStartups": 3, "mcpServers": {"c": {"command": "claude-code"}}, "projects": {}}`)
	write(filepath.Join(project, ".mcp.json"), `{"mcpServers": {"c": {"command": "project"}}}`)

	cfg, warns, err := LoadFiles(DefaultPaths(mapEnv(nil), home), LoadOptions{SkipMissing: true})
	if err != nil || len(warns) > 0 {
		t.Fatalf("err %v, warnings %v", err, warns)
	}
	got := map[string]string{}
	for _, s := range cfg.Servers {
		got[s.Name] = s.Command + " from " + s.Source
	}
	want := map[string]string{
		"a": "desktop from " + filepath.Join(home, ".config/Claude/claude_desktop_config.json"),
		"b": "cursor from " + filepath.Join(home, ".cursor/mcp.json"),
		"c": "project from .mcp.json",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// TestSecretsStayHidden formats configs, warnings and errors of entries that
// hold secrets in env and headers, and checks that no secret shows.
func TestSecretsStayHidden(t *testing.T) {
	secrets := []string{"s3cr3t-env-value", "s3cr3t-header-value", "s3cr3t-from-var", "s3cr3t-query", "s3cr3t-pass"}
	env := map[string]string{"SECRET": "s3cr3t-from-var"}
	files := writeFiles(t, `{"mcpServers": {
		"ok-stdio": {"command": "srv", "env": {"API_KEY": "s3cr3t-env-value", "FROM_VAR": "${SECRET}"}},
		"ok-http": {"url": "https://user:s3cr3t-pass@h.example.com/mcp?key=s3cr3t-query", "headers": {"Authorization": "Bearer s3cr3t-header-value", "X-Var": "${SECRET}"}},
		"unknown-key": {"command": "srv", "env": {"K": "s3cr3t-env-value"}, "extra": "s3cr3t-env-value"},
		"self": {"command": "bridge", "args": ["serve"], "env": {"K": "s3cr3t-env-value"}},
		"ignored": {"url": "https://h.example.com", "env": {"K": "s3cr3t-env-value"}},
		"crlf": {"url": "https://h.example.com", "headers": {"A": "s3cr3t-header-value\r\n"}},
		"crlf-var": {"url": "https://h.example.com", "headers": {"A": "${SECRET}\n"}},
		"bad-name": {"url": "https://h.example.com", "headers": {"Bad Name": "s3cr3t-header-value"}},
		"unset": {"url": "https://h.example.com", "headers": {"A": "s3cr3t-header-value ${UNSET}"}},
		"bad-url": {"url": "ftp://user:s3cr3t-pass@h.example.com/?key=s3cr3t-query", "headers": {"A": "s3cr3t-header-value"}},
		"nul": {"command": "srv", "env": {"A": "s3cr3t-env-value\u0000"}},
		"wrong-type": {"command": "srv", "env": {"A": "s3cr3t-env-value", "B": 1}}
	}}`)
	cfg, warns, err := LoadFiles(files, LoadOptions{Getenv: mapEnv(env)})
	// ignored and unknown-key load, with warnings.
	if err == nil || len(warns) != 3 || len(cfg.Servers) != 4 || cfg.Servers[1].Name != "ok-http" || cfg.Servers[2].Name != "ok-stdio" {
		t.Fatalf("want 4 servers, 3 warnings and errors; got servers %v, warnings %v, error %v", cfg.Servers, warns, err)
	}
	// The secrets are loaded, not lost.
	if cfg.Servers[1].Headers["Authorization"] != "Bearer s3cr3t-header-value" || cfg.Servers[2].Env["FROM_VAR"] != "s3cr3t-from-var" {
		t.Fatalf("secrets not loaded: %+v, %+v", rawFields(cfg.Servers[1]), rawFields(cfg.Servers[2]))
	}

	var outputs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		outputs = append(outputs, fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, cfg.Servers), fmt.Sprintf(verb, &cfg.Servers[0]))
	}
	for _, v := range []any{cfg, cfg.Servers[0], &cfg.Servers[1]} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(b))
	}
	outputs = append(outputs, err.Error())
	outputs = append(outputs, warnStrings(warns)...)
	outputs = append(outputs, fmt.Sprintf("%+v", warns))

	for _, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("secret %q shows in %s", s, out)
			}
		}
	}
	// The redacted forms still say what is there.
	for _, want := range []string{`"API_KEY"=<redacted>`, `"Authorization"=<redacted>`, `url="https://<redacted>@h.example.com/mcp?key=<redacted>"`} {
		if s := fmt.Sprint(cfg); !strings.Contains(s, want) {
			t.Errorf("%s does not contain %s", s, want)
		}
	}
	for _, want := range []string{"crlf", "crlf-var", "bad-name", "unset", "bad-url", "nul", "wrong-type"} {
		if !strings.Contains(err.Error(), "mcpServers."+want+".") {
			t.Errorf("no error for %s: %v", want, err)
		}
	}
}

func TestExpand(t *testing.T) {
	env := mapEnv(map[string]string{"A": "1", "B_2": "two", "EMPTY": ""})
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "1"},
		{in: "x${A}y${B_2}z", want: "x1ytwoz"},
		{in: "${env:A}", want: "1"},
		{in: "${C:-def}", want: "def"},
		{in: "${A:-def}", want: "1"},
		{in: "${EMPTY:-def}", want: "def"},
		{in: "${C:-}", want: ""},
		{in: "${C:-a:-b}", want: "a:-b"},
		{in: "$A $ $$ ${A}$", want: "$A $ $$ 1$"},
		{in: "${C}", wantErr: "environment variable C is not set"},
		{in: "${EMPTY}", wantErr: "environment variable EMPTY is not set"},
		{in: "${A", wantErr: `without a closing "}"`},
		{in: "${}", wantErr: "invalid variable reference"},
		{in: "${1A}", wantErr: "invalid variable reference"},
		{in: "${input:key}", wantErr: "${input:key} is a VS Code input"},
		{in: "${C:-${A}}", wantErr: "holds another ${...}"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var errs []string
			x := expander{getenv: env, fail: func(path, format string, args ...any) {
				errs = append(errs, path+": "+fmt.Sprintf(format, args...))
			}}
			got := x.expand(tt.in, "f")
			if tt.wantErr == "" {
				if len(errs) > 0 || got != tt.want {
					t.Errorf("expand(%q) = %q, errors %q; want %q", tt.in, got, errs, tt.want)
				}
				return
			}
			if len(errs) != 1 || !strings.HasPrefix(errs[0], "f: ") || !strings.Contains(errs[0], tt.wantErr) {
				t.Errorf("expand(%q) errors %q, want one with %q", tt.in, errs, tt.wantErr)
			}
		})
	}
}

func TestStandardJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a": 1}`, `{"a": 1}`},
		{"{\"a\": 1, // c\n}", "{\"a\": 1      \n}"},
		{`{"a": [1, 2,], /* x */ "b": "//not, /*a*/ comment",}`, `{"a": [1, 2 ],         "b": "//not, /*a*/ comment" }`},
		{`{"a": "q\"//", "b": 1}`, `{"a": "q\"//", "b": 1}`},
		{"{/* never closed", "{/* never closed"},
	}
	for _, tt := range tests {
		if got := string(standardJSON([]byte(tt.in))); got != tt.want {
			t.Errorf("standardJSON(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
