package integration

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// callWith calls run_python with args and returns the result and its
// structuredContent.
func callWith(t *testing.T, cs *mcp.ClientSession, args map[string]any) (*mcp.CallToolResult, callOutput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: args})
	if err != nil {
		t.Fatalf("run_python: %v", err)
	}
	var out callOutput
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return res, out
}

// inputsPolicy is a policy with a folder for files by reference, sessions,
// the pool on (as users run it) and inputs up to 64 MiB.
func inputsPolicy(t *testing.T, e *engine) string {
	t.Helper()
	pol, _ := artifactPolicy(t, e, "  max_bytes_stored: 64Mi\n")
	b, err := os.ReadFile(pol)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b) + "pool:\n  size: 1\nsessions:\n  enabled: true\ninputs:\n  max_files: 5\n  max_file_bytes: 64Mi\n  max_bytes: 64Mi\n"
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestInputs: files passed in by value and by URI land read-only under
// /tmp/inputs; what escapes, belongs to another client or is too much is
// refused; a session's code cannot redirect a later call's inputs.
func TestInputs(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e *engine) {
		pol := inputsPolicy(t, e)
		cs := connectStdioLarge(t, e, "--policy", pol)

		t.Run("by value, read-only", func(t *testing.T) {
			bin := []byte{0, 1, 2, 250, 255}
			res, out := callWith(t, cs, map[string]any{"code": `
import os, stat
root = "/tmp/inputs"
print(open(root + "/notes.txt").read())
print(list(open(root + "/d/e/raw.bin", "rb").read()))
print(oct(stat.S_IMODE(os.stat(root + "/notes.txt").st_mode)), oct(stat.S_IMODE(os.stat(root + "/d").st_mode)))
for what, f in [("write", lambda: open(root + "/notes.txt", "w")), ("remove", lambda: os.remove(root + "/notes.txt")), ("create", lambda: open(root + "/new", "w"))]:
    try:
        f()
        print(what, "allowed")
    except PermissionError:
        print(what, "refused")
`, "inputs": []any{
				map[string]any{"path": "notes.txt", "text": "héllo, inputs"},
				map[string]any{"path": "d/e/raw.bin", "base64": base64.StdEncoding.EncodeToString(bin)},
			}})
			want := "héllo, inputs\n[0, 1, 2, 250, 255]\n0o444 0o555\nwrite refused\nremove refused\ncreate refused\n"
			if res.IsError || out.Stdout != want {
				t.Fatalf("status %q, stdout %q, want %q\n%s", out.Status, out.Stdout, want, contentText(res))
			}
		})

		t.Run("chained by URI", func(t *testing.T) {
			res, arts, _ := runArtifacts(t, cs, `
import hashlib, os
data = os.urandom(20 << 20)
open("/tmp/outputs/big.bin", "wb").write(data)
print(hashlib.sha256(data).hexdigest())
`)
			if len(arts) != 1 || arts[0].Inlined || !strings.HasPrefix(arts[0].URI, "bridge://runs/") {
				t.Fatalf("no file by reference: %+v", arts)
			}
			sum := strings.TrimSpace(firstText(res))
			res, out := callWith(t, cs, map[string]any{"code": `
import hashlib
print(hashlib.sha256(open("/tmp/inputs/from-run-1.bin", "rb").read()).hexdigest())
`, "inputs": []any{map[string]any{"path": "from-run-1.bin", "uri": arts[0].URI}}})
			if res.IsError || !strings.HasPrefix(out.Stdout, sum[:64]) {
				t.Fatalf("run 2 read %q, want the sha256 %q of run 1's file\n%s", out.Stdout, sum, contentText(res))
			}
			// Another client (a bridge of its own on the same folder):
			// the URI is as unknown as one that never was.
			other := connectStdioLarge(t, e, "--policy", pol)
			res, out = callWith(t, other, map[string]any{"code": "print(1)", "inputs": []any{map[string]any{"path": "x", "uri": arts[0].URI}}})
			if !res.IsError || out.Status != "invalid" || !strings.Contains(out.Message, "is not a file your runs handed back") {
				t.Fatalf("another client's file: status %q, %q", out.Status, out.Message)
			}
		})

		t.Run("refused", func(t *testing.T) {
			for _, c := range []struct {
				name   string
				inputs []any
				want   string
			}{
				{"escaping path", []any{map[string]any{"path": "../etc/x", "text": "x"}}, "escapes /tmp/inputs"},
				{"absolute path", []any{map[string]any{"path": "/run/bridge/relay.sock", "text": "x"}}, "is absolute"},
				{"too many", manyTexts(6), "6 inputs, over the limit of 5 (inputs.max_files)"},
				{"unknown bridge URI", []any{map[string]any{"path": "x", "uri": "bridge://runs/abcdef/x.bin"}}, "is not a file your runs handed back"},
			} {
				res, out := callWith(t, cs, map[string]any{"code": "print('ran')", "inputs": c.inputs})
				if !res.IsError || out.Status != "invalid" || !strings.Contains(out.Message, c.want) || out.Stdout != "" {
					t.Errorf("%s: status %q, message %q; want invalid saying %q", c.name, out.Status, out.Message, c.want)
				}
			}
		})

		t.Run("session: a link the code left is not followed", func(t *testing.T) {
			sess := "inputs-" + strings.ToLower(e.name)
			res, out := callWith(t, cs, map[string]any{"session": sess, "code": `
import os
os.chmod("/tmp/inputs", 0o755)
os.symlink("/tmp/outputs", "/tmp/inputs/link")
print(open("/tmp/inputs/a.txt").read())
`, "inputs": []any{map[string]any{"path": "a.txt", "text": "one"}}})
			if res.IsError || out.Stdout != "one\n" {
				t.Fatalf("first call: %q\n%s", out.Stdout, contentText(res))
			}
			res, out = callWith(t, cs, map[string]any{"session": sess, "code": "print('ran')",
				"inputs": []any{map[string]any{"path": "link/planted.txt", "text": "x"}}})
			if out.Status != "error" || !strings.Contains(contentText(res), "InputError") || !strings.Contains(contentText(res), "taken by something else") || out.Stdout != "" {
				t.Fatalf("an input through the code's link: status %q\n%s", out.Status, contentText(res))
			}
			// The session goes on, and a later call's input replaces an
			// earlier one of the same path.
			res, out = callWith(t, cs, map[string]any{"session": sess, "code": "import os\nprint(open('/tmp/inputs/a.txt').read(), os.path.exists('/tmp/outputs/planted.txt'))",
				"inputs": []any{map[string]any{"path": "a.txt", "text": "two"}}})
			if res.IsError || out.Stdout != "two False\n" {
				t.Fatalf("third call: %q\n%s", out.Stdout, contentText(res))
			}
		})

		t.Run("50 MiB by URI", func(t *testing.T) {
			// 50 MiB cannot come inline (the request bound): by URI.
			res, arts, _ := runArtifacts(t, cs, "import os\nopen('/tmp/outputs/b.bin', 'wb').write(os.urandom(50 << 20))\n")
			if len(arts) != 1 {
				t.Fatalf("artifacts %+v\n%s", arts, contentText(res))
			}
			res, out := callWith(t, cs, map[string]any{"code": "import os\nprint(os.path.getsize('/tmp/inputs/b.bin'))",
				"inputs": []any{map[string]any{"path": "b.bin", "uri": arts[0].URI}}})
			if res.IsError || out.Stdout != "52428800\n" {
				t.Fatalf("50 MiB by URI: %q\n%s", out.Stdout, contentText(res))
			}
		})
	})
}

// manyTexts is n small text inputs.
func manyTexts(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"path": "f" + string(rune('a'+i)), "text": "x"}
	}
	return out
}

// firstText is the text of a result's first content item.
func firstText(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if t, ok := res.Content[0].(*mcp.TextContent); ok {
		return t.Text
	}
	return ""
}

// TestInputsFromUpstreamResources: a call passes an upstream server's
// resource by its URI; it is read through the proxy under the policy
// (a denied one refuses the call before any container), counted and
// audited as the code's own read would be.
func TestInputsFromUpstreamResources(t *testing.T) {
	scope := aboveEngine("reading upstream resources as inputs")
	runsOn(t, scope)
	npm := npmPeers(t)
	servers := filepath.Join(t.TempDir(), "servers.json")
	writeServers(t, servers, map[string]any{
		"everything": map[string]any{"command": "node", "args": []string{filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
	})
	arch, err := os.ReadFile(filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	forEngines(t, scope, func(t *testing.T, e *engine) {
		dir := t.TempDir()
		audit := filepath.Join(dir, "audit.jsonl")
		pol := filepath.Join(dir, "policy.yaml")
		body := "version: 1\n" + sandboxSection(e) + "pool:\n  size: 1\n" + resourcesPolicy(audit)
		body = strings.Replace(body, "max_bytes: 4Ki", "max_bytes: 64Ki", 1)
		if err := os.WriteFile(pol, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cs, _, _ := connectStdioArgs(t, e, nil, "--policy", pol, "--servers-config", servers)
		res, out := callWith(t, cs, map[string]any{"code": `
import hashlib
print(len(open("/tmp/inputs/docs/arch.md", "rb").read()), hashlib.sha256(open("/tmp/inputs/docs/arch.md", "rb").read()).hexdigest()[:16])
print(len(open("/tmp/inputs/blob.bin", "rb").read()) > 0)
`, "inputs": []any{
			map[string]any{"path": "docs/arch.md", "uri": "demo://resource/static/document/architecture.md"},
			map[string]any{"path": "blob.bin", "uri": "demo://resource/dynamic/blob/7", "server": "everything"},
		}})
		sum := sha256.Sum256(arch)
		want := fmt.Sprintf("%d %s\nTrue\n", len(arch), hex.EncodeToString(sum[:])[:16])
		if res.IsError || out.Stdout != want {
			t.Fatalf("inputs from resources: %q, want %q\n%s", out.Stdout, want, contentText(res))
		}
		for _, c := range []struct {
			name string
			in   map[string]any
			want string
		}{
			{"denied by the policy", map[string]any{"path": "f.md", "uri": "demo://resource/static/document/features.md"}, "the features are not for the code"},
			{"unknown", map[string]any{"path": "n.md", "uri": "demo://resource/static/document/nope.md"}, "no server lists the resource"},
			{"server with a bridge URI", map[string]any{"path": "n.md", "uri": "bridge://runs/abc/x", "server": "everything"}, `"server" names the upstream server`},
		} {
			res, out := callWith(t, cs, map[string]any{"code": "print('ran')", "inputs": []any{c.in}})
			if !res.IsError || out.Status != "invalid" || !strings.Contains(out.Message, c.want) || out.Stdout != "" {
				t.Errorf("%s: status %q, %q; want invalid saying %q", c.name, out.Status, out.Message, c.want)
			}
		}
		log, err := os.ReadFile(audit)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"event":"resource_read"`, `"event":"input","run_id"`, `"source":"demo://resource/static/document/architecture.md"`} {
			if !strings.Contains(string(log), want) {
				t.Errorf("the audit log lacks %s", want)
			}
		}
	})
}
