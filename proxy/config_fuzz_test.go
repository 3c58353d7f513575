package proxy

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzServersConfig: a servers file, which comes from the user's agents'
// settings, never panics the loader; every problem is a *ConfigError; what
// loads has a valid name and prints and marshals without its secrets.
//
//	go test ./proxy -run '^$' -fuzz FuzzServersConfig -fuzztime 60s
func FuzzServersConfig(f *testing.F) {
	for _, s := range []string{
		`{"mcpServers":{"fs":{"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","/tmp"]}}}`,
		`{"servers":{"web":{"type":"http","url":"https://example.com/mcp?key=${KEY:-x}","headers":{"Authorization":"Bearer ${TOKEN}"}}}}`,
		`{"mcpServers":{"s":{"type":"sse","url":"http://u:p@h:1/sse"},"d":{"command":"x","disabled":true}}}`,
		`{// comment
		"mcpServers": {"a": {"command": "a", "env": {"K": "${env:HOME}"}, "cwd": "/",},},}`,
		`{"mcpServers":{"bad name!":{"command":""},"b":{"url":"ftp://x"},"c":{"type":"stdio"}}}`,
		`{"mcpServers":{"x":{"command":"bridge","args":["serve"]}}}`,
		`{"mcpServers":[]}`, `[]`, `null`, `{"mcpServers":{"a":{"command":"${input:pw}"}}}`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "servers.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		env := func(k string) string {
			if k == "TOKEN" || k == "KEY" {
				return "s3cr3t-" + k
			}
			return ""
		}
		cfg, _, err := LoadFiles([]string{path}, LoadOptions{Getenv: env})
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
			}
		}
		for _, s := range cfg.Servers {
			if msg := checkName(s.Name); msg != "" {
				t.Fatalf("loaded a server with an invalid name %q: %s", s.Name, msg)
			}
			js, err := json.Marshal(s)
			if err != nil || !json.Valid(js) {
				t.Fatalf("marshalling %q: %v", s.Name, err)
			}
			_ = s.String()
		}
	})
}
