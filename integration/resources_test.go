package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// resourcesPolicy is the resources and budgets part of TestResources'
// policy: one static document of server-everything denied, 4 KiB a read
// (its structure.md is 12 KiB), 14 calls a run, audited to audit.
func resourcesPolicy(audit string) string {
	return `resources:
  rules:
    - server: "everything"
      uri: "demo://resource/static/document/features.md"
      action: deny
      reason: "the features are not for the code"
  max_bytes: 4Ki
budgets:
  max_calls_per_run: 14
audit:
  file: ` + audit + "\n"
}

// resourcesCode lists and reads server-everything's resources (and
// server-filesystem's, which has none) from the sandbox, then spends the
// run's call budget on reads.
const resourcesCode = `
import mcp_tools
docs = [r for r in mcp_tools.resources() if r["uri"].startswith("demo://resource/static/document/")]
print("listed", sorted(r["uri"].rsplit("/", 1)[1] for r in docs))
print("mime", {r["mime"] for r in docs}, {r["server"] for r in docs})
print("templates", sorted(t["uri_template"] for t in mcp_tools.resources("everything", templates=True)))
print("filesystem", mcp_tools.resources("filesystem"))
text = mcp_tools.read_resource("demo://resource/static/document/architecture.md")
open("/tmp/architecture.md", "w").write(text)
print("text", type(text).__name__, len(text.encode()))
blob = mcp_tools.read_resource("demo://resource/dynamic/blob/7")
print("blob", type(blob).__name__, blob[:34])
print("dynamic", mcp_tools.read_resource("demo://resource/dynamic/text/3", server="everything")[:40])
for uri, server in (("demo://resource/static/document/features.md", None),
                    ("demo://resource/static/document/structure.md", None),
                    ("demo://resource/static/document/nope.md", None),
                    ("demo://resource/static/document/nope.md", "everything"),
                    ("demo://resource/static/document/../features.md", "everything"),
                    ("file:///etc/passwd", "filesystem")):
    try:
        mcp_tools.read_resource(uri, server=server)
        print("read", uri)
    except mcp_tools.MCPToolsError as e:
        print(type(e).__name__, e.type, str(e)[:110])
n = 0
try:
    while True:
        mcp_tools.read_resource("demo://resource/static/document/extension.md")
        n += 1
except mcp_tools.LimitExceededError as e:
    print("budget", n, "budgets.max_calls_per_run" in str(e))
`

// TestResources reads upstream resources from the sandbox, through the
// proxy in the bridge and through a remote `bridge proxy --http`, against
// the real npm servers: listed, read (text, a blob, a template's URI),
// denied by the policy, over resources.max_bytes, unknown, ambiguous-free
// lookups of a URI's server, the run's call budget, the audit and the
// run's trace.
func TestResources(t *testing.T) {
	scope := aboveEngine("reading upstream resources through the proxy")
	runsOn(t, scope)
	npm := npmPeers(t)
	pkg := func(name string) string { return filepath.Join(npm, "@modelcontextprotocol", name, "dist", "index.js") }
	root := t.TempDir()
	servers := filepath.Join(t.TempDir(), "servers.json")
	writeServers(t, servers, map[string]any{
		"everything": map[string]any{"command": "node", "args": []string{pkg("server-everything"), "stdio"}},
		"filesystem": map[string]any{"command": "node", "args": []string{pkg("server-filesystem"), root}},
	})
	arch, err := os.ReadFile(filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, placement := range []string{"local", "remote"} {
		t.Run(placement, func(t *testing.T) {
			forEngines(t, scope, func(t *testing.T, e *engine) {
				dir := t.TempDir()
				audit := filepath.Join(dir, "audit.jsonl")
				pol := filepath.Join(dir, "policy.yaml")
				args := []string{"--policy", pol}
				body := "version: 1\n" + sandboxSection(e)
				if placement == "remote" {
					proxyPol := filepath.Join(dir, "proxy.yaml")
					if err := os.WriteFile(proxyPol, []byte("version: 1\n"+resourcesPolicy(audit)), 0o644); err != nil {
						t.Fatal(err)
					}
					a, _ := startProxy(t, servers, "--policy", proxyPol)
					args = append(args, "--proxy-url", "http://"+a+"/mcp")
				} else {
					body += resourcesPolicy(audit)
					args = append(args, "--servers-config", servers)
				}
				if err := os.WriteFile(pol, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				cs, _, _ := connectStdioArgs(t, e, nil, args...)
				checkResources(t, cs, len(arch), audit)
			})
		})
	}
}

func checkResources(t *testing.T, cs *mcp.ClientSession, archBytes int, audit string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, out := callRunPython(t, ctx, cs, resourcesCode, nil)
	if res.IsError || out.Status != "ok" {
		t.Fatalf("run failed: %+v\n%s", out, contentText(res))
	}
	for _, want := range []string{
		// features.md is denied: not listed.
		"listed ['architecture.md', 'extension.md', 'how-it-works.md', 'instructions.md', 'startup.md', 'structure.md']",
		"mime {'text/markdown'} {'everything'}",
		"templates ['demo://resource/dynamic/blob/{resourceId}', 'demo://resource/dynamic/text/{resourceId}']",
		"filesystem []",
		fmt.Sprintf("text str %d", archBytes),
		"blob bytes b'Resource 7: This is a base64 blob '",
		"dynamic Resource 3: This is a plaintext resource",
		"ToolDeniedError denied the features are not for the code",
		`LimitExceededError limit the resource "demo://resource/static/document/structure.md" of server "everything" is 12.0 KiB, over the`,
		`UnknownResourceError unknown_resource no server lists the resource "demo://resource/static/document/nope.md", nor a template that matches it`,
		`UnknownResourceError unknown_resource server "everything" has no resource "demo://resource/static/document/nope.md"`,
		`ToolDeniedError denied the resource URI "demo://resource/static/document/../features.md" has a "." or ".." segment`,
		`UnknownResourceError unknown_resource server "filesystem" offers no resources`,
		// 3 listings and 9 reads so far: 2 more go, the 15th is refused.
		"budget 2 True",
	} {
		if !strings.Contains(out.Stdout, want+"\n") && !strings.Contains(out.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, out.Stdout)
		}
	}
	// The run's trace has the reads, with their URIs.
	var sc struct {
		ToolCalls []struct{ Server, Tool, Decision, URI, Error string } `json:"tool_calls"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &sc)
	var reads, denied int
	for _, c := range sc.ToolCalls {
		if c.Tool == "resources/read" && c.URI == "demo://resource/static/document/architecture.md" && c.Decision == "allowed" && c.Server == "everything" {
			reads++
		}
		if c.Tool == "resources/read" && c.Decision == "denied" {
			denied++
		}
	}
	if reads != 1 || denied != 2 {
		t.Errorf("tool_calls: %d reads of architecture.md, %d denied; want 1 and 2:\n%s", reads, denied, b)
	}
	checkResourceAudit(t, audit, archBytes)
}

// checkResourceAudit finds the read of architecture.md and the denied read
// in the audit file, with their URIs and sizes, and no contents.
func checkResourceAudit(t *testing.T, audit string, archBytes int) {
	t.Helper()
	var found []map[string]any
	// The proxy writes each record as the read ends: wait for the last.
	for range 50 {
		found = nil
		f, err := os.Open(audit)
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "Everything Server") {
					t.Errorf("an audit record holds a resource's contents: %s", sc.Text())
				}
				var m map[string]any
				if json.Unmarshal(sc.Bytes(), &m) == nil && strings.HasPrefix(fmt.Sprint(m["event"]), "resource_") {
					found = append(found, m)
				}
			}
			f.Close()
		}
		if len(found) >= 16 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var arch, features, lists bool
	for _, m := range found {
		switch {
		case m["event"] == "resource_read" && m["uri"] == "demo://resource/static/document/architecture.md":
			arch = m["decision"] == "allow" && m["result_bytes"] == float64(archBytes) && m["server"] == "everything"
		case m["event"] == "resource_read" && m["uri"] == "demo://resource/static/document/features.md":
			features = m["decision"] == "deny" && strings.HasPrefix(fmt.Sprint(m["rule"]), "resources.rules[0] (line ")
		case m["event"] == "resource_list":
			lists = true
		}
	}
	if !arch || !features || !lists {
		t.Errorf("audit records (architecture read %t, features denied %t, listings %t):\n%v", arch, features, lists, found)
	}
}
