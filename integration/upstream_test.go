package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// upstreamEnv names the test binary's own upstream mode: run with it set,
// the binary serves integration/testupstream over stdio (see TestMain).
const upstreamEnv = "BRIDGE_TEST_UPSTREAM"

// upstreams is a servers file with real upstream MCP servers and the
// directories they work in.
type upstreams struct {
	config     string // the servers file
	fsRoot     string // the filesystem server's only allowed directory
	memoryFile string // where the memory server keeps its graph
	record     string // the calls the misbehave server received, one JSON line each
}

// startUpstreams writes a servers file with the three reference servers from
// npm (everything over stdio and, as everything_http, over streamable HTTP;
// filesystem on a temp dir; memory on a temp file) and "misbehave", this test
// binary as an upstream that can crash, hang and send big results.
func startUpstreams(t *testing.T) upstreams {
	t.Helper()
	npm := npmPeers(t)
	dir := t.TempDir()
	u := upstreams{
		config:     filepath.Join(dir, "servers.json"),
		fsRoot:     filepath.Join(dir, "files"),
		memoryFile: filepath.Join(dir, "memory.jsonl"),
		record:     filepath.Join(dir, "calls.jsonl"),
	}
	if err := os.Mkdir(u.fsRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	// The filesystem server resolves its root; so must we, to compare.
	if r, err := filepath.EvalSymlinks(u.fsRoot); err == nil {
		u.fsRoot = r
	}
	pkg := func(name string) string {
		return filepath.Join(npm, "@modelcontextprotocol", name, "dist", "index.js")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	httpURL := startEverythingHTTP(t, pkg("server-everything"))
	servers := map[string]any{
		"everything":      map[string]any{"command": "node", "args": []string{pkg("server-everything"), "stdio"}},
		"everything_http": map[string]any{"type": "http", "url": httpURL},
		"filesystem":      map[string]any{"command": "node", "args": []string{pkg("server-filesystem"), u.fsRoot}},
		"memory": map[string]any{"command": "node", "args": []string{pkg("server-memory")},
			"env": map[string]string{"MEMORY_FILE_PATH": u.memoryFile}},
		"misbehave": map[string]any{"command": self, "args": []string{"--name", "misbehave", "--record", u.record},
			"env": map[string]string{upstreamEnv: "1"}},
	}
	writeServers(t, u.config, servers)
	return u
}

// misbehaveServers writes a servers config with one server, "misbehave":
// this test binary as the test upstream (integration/testupstream), and
// returns its path.
func misbehaveServers(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "servers.json")
	writeServers(t, path, map[string]any{
		"misbehave": map[string]any{"command": self, "env": map[string]string{upstreamEnv: "1"}},
	})
	return path
}

func writeServers(t *testing.T, path string, servers map[string]any) {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startEverythingHTTP runs server-everything over streamable HTTP on a free
// port and returns its /mcp URL once it listens.
func startEverythingHTTP(t *testing.T, entry string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("node", entry, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return "http://" + addr + "/mcp"
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything never listened on %s:\n%s", addr, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runCode calls run_python and returns the text it answered; the run must
// end with status ok unless wantStatus says otherwise.
func runCode(t *testing.T, cs *mcp.ClientSession, code string) (string, callOutput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, out := callRunPython(t, ctx, cs, code, nil)
	if res.IsError || out.Status != "ok" {
		t.Fatalf("run failed: status %q\n%s", out.Status, contentText(res))
	}
	return out.Stdout, out
}

func TestUpstreamsFromTheSandbox(t *testing.T) {
	u := startUpstreams(t)
	forEachEngine(t, func(t *testing.T, e *engine) {
		cs, _, stderr := connectStdioArgs(t, e, nil, "--servers-config", u.config, "--call-timeout", "3s")

		t.Run("discover, search, call", func(t *testing.T) {
			out, _ := runCode(t, cs, `
import mcp_tools
print("servers", [s["name"] for s in mcp_tools.servers()])
print("modules", [s["module"] for s in mcp_tools.servers()])
for q in ("echo", "write file"):
    h = mcp_tools.search(q, limit=3)[0]
    print("search", q, "->", h["server"], h["tool"])
print("echo", mcp_tools.call("everything", "echo", message="hi"))
print("echo over http", mcp_tools.call("everything_http", "echo", message="hi"))
from mcp_tools.everything import get_sum
print("sum", get_sum(a=2, b=3))
`)
			want := []string{
				"servers ['everything', 'everything_http', 'filesystem', 'memory', 'misbehave']",
				"search echo -> everything echo",
				"search write file -> filesystem write_file",
				"echo Echo: hi",
				"echo over http Echo: hi",
				"sum The sum of 2 and 3 is 5.",
			}
			for _, w := range want {
				if !strings.Contains(out, w+"\n") {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})

		t.Run("filesystem and memory", func(t *testing.T) {
			name := "note-" + e.name + ".txt"
			entity := "bridge-test-" + e.name
			out, _ := runCode(t, cs, fmt.Sprintf(`
import mcp_tools
root = mcp_tools.call("filesystem", "list_allowed_directories")["content"].splitlines()[1]
path = root + "/%[1]s"
mcp_tools.call("filesystem", "write_file", path=path, content="written in the sandbox")
print("read back:", mcp_tools.call("filesystem", "read_text_file", path=path)["content"])
mcp_tools.call("memory", "create_entities", entities=[{"name": "%[2]s", "entityType": "test", "observations": ["made by %[3]s"]}])
found = mcp_tools.call("memory", "search_nodes", query="%[2]s")
print("memory:", [(n["name"], n["observations"]) for n in found["entities"]])
`, name, entity, e.name))
			if !strings.Contains(out, "read back: written in the sandbox\n") {
				t.Errorf("filesystem round trip:\n%s", out)
			}
			if !strings.Contains(out, fmt.Sprintf("memory: [('%s', ['made by %s'])]", entity, e.name)) {
				t.Errorf("memory round trip:\n%s", out)
			}
			// The writes happened on the host, through the real servers.
			b, err := os.ReadFile(filepath.Join(u.fsRoot, name))
			if err != nil || string(b) != "written in the sandbox" {
				t.Errorf("the file on the host: %q, %v", b, err)
			}
			if b, err := os.ReadFile(u.memoryFile); err != nil || !strings.Contains(string(b), entity) {
				t.Errorf("the memory file on the host lacks %s: %v\n%s", entity, err, b)
			}
		})

		t.Run("5 MB result stays in the sandbox", func(t *testing.T) {
			text, out := runCode(t, cs, `
import mcp_tools
data = mcp_tools.call("misbehave", "big", bytes=5_000_000)
print(len(data), sum(1 for line in data.splitlines() if line), data[:16])
`)
			if !regexp.MustCompile(`^5000000 \d+ 0123456789abcdef\n$`).MatchString(text) {
				t.Errorf("output %q", text)
			}
			if len(text) > 100 || len(out.Stdout) > 100 {
				t.Errorf("the agent got %d bytes", len(text))
			}
		})

		t.Run("calls run concurrently", func(t *testing.T) {
			// barrier answers only once 3 calls wait in it at the same time:
			// calls made one after another would time out instead.
			out, _ := runCode(t, cs, `
import asyncio, mcp_tools
r = await asyncio.gather(*(mcp_tools.acall("misbehave", "barrier", n=3) for _ in range(3)))
print(r)
`)
			if out != "['released', 'released', 'released']\n" {
				t.Errorf("output %q", out)
			}
		})

		t.Run("hang past the call timeout", func(t *testing.T) {
			out, _ := runCode(t, cs, `
import time, mcp_tools
t0 = time.monotonic()
try:
    mcp_tools.call("misbehave", "hang")
except mcp_tools.ToolTimeoutError as e:
    print("timeout:", isinstance(e, TimeoutError), round(time.monotonic() - t0))
print("echo after:", mcp_tools.call("misbehave", "echo", message="still up")["message"])
`)
			if !strings.Contains(out, "timeout: True 3\n") || !strings.Contains(out, "echo after: still up\n") {
				t.Errorf("output %q", out)
			}
		})

		t.Run("crash mid-call, then the next run works", func(t *testing.T) {
			out, _ := runCode(t, cs, `
import mcp_tools
try:
    mcp_tools.call("misbehave", "crash")
except mcp_tools.UpstreamError as e:
    print("upstream error:", e)
print("others fine:", mcp_tools.call("everything", "echo", message="ok"))
`)
			if !strings.Contains(out, `upstream error: server "misbehave" exited or disconnected during the call to "crash"`) ||
				!strings.Contains(out, "others fine: Echo: ok\n") {
				t.Errorf("output %q", out)
			}
			out, _ = runCode(t, cs, `
import mcp_tools
print(mcp_tools.call("misbehave", "count"))
`)
			// A new process: this is the first call it has seen.
			if out != "{'calls': 1}\n" {
				t.Errorf("count after the restart: %q", out)
			}
		})

		t.Run("a tool added upstream appears in the next run", func(t *testing.T) {
			tool := "fresh_" + strings.ReplaceAll(e.name, "-", "_")
			runCode(t, cs, fmt.Sprintf(`
import mcp_tools
print(mcp_tools.call("misbehave", "add_tool", name=%q))
`, tool))
			// notifications/tools/list_changed travels upstream -> proxy ->
			// bridge, which drops its cached catalog; give it a moment.
			var out string
			for range 50 {
				out, _ = runCode(t, cs, fmt.Sprintf(`
import mcp_tools
print(%q in [t["name"] for t in mcp_tools.tools("misbehave")])
`, tool))
				if out == "True\n" {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if out != "True\n" {
				t.Fatalf("%s never appeared in mcp_tools.tools(\"misbehave\")", tool)
			}
		})

		t.Run("unknown names", func(t *testing.T) {
			out, _ := runCode(t, cs, `
import mcp_tools
for server, tool in (("filesytem", "read_text_file"), ("filesystem", "raed_text_file")):
    try:
        mcp_tools.call(server, tool)
    except LookupError as e:
        print(type(e).__name__, e)
`)
			if !strings.Contains(out, `UnknownServerError no MCP server "filesytem"; did you mean: filesystem?`) ||
				!strings.Contains(out, `UnknownToolError server "filesystem" has no tool "raed_text_file"; did you mean: read_text_file`) {
				t.Errorf("output %q", out)
			}
		})

		// The upstream's stderr is in the bridge's log, tagged; the
		// servers' env values are not.
		logs := awaitLog(t, stderr, "a log line tagged with the misbehave server", func(log string) bool {
			return strings.Contains(log, `"server":"misbehave"`)
		})
		if strings.Contains(logs, u.memoryFile) {
			t.Errorf("an env value of an upstream reached the log")
		}
	})
}

// TestSandboxAPIDocExamples runs every example of docs/sandbox-api.md and
// compares what it prints with the text block that follows it.
func TestSandboxAPIDocExamples(t *testing.T) {
	scope := aboveEngine("the sandbox API's documented examples")
	runsOn(t, scope)
	examples := docExamples(t, filepath.Join("..", "docs", "sandbox-api.md"))
	if len(examples) < 5 {
		t.Fatalf("found %d examples in docs/sandbox-api.md", len(examples))
	}
	u := startUpstreams(t)
	forEngines(t, scope, func(t *testing.T, e *engine) {
		// The skills examples save into a folder of this engine's own.
		pol := skillsPolicy(t, e, filepath.Join(t.TempDir(), "skills"), "")
		cs, _, _ := connectStdioArgs(t, e, nil, "--servers-config", u.config, "--policy", pol)
		for _, ex := range examples {
			t.Run(fmt.Sprintf("line %d", ex.line), func(t *testing.T) {
				out, _ := runCode(t, cs, ex.code)
				if out != ex.want {
					t.Errorf("docs/sandbox-api.md:%d printed\n%s\nwant\n%s", ex.line, out, ex.want)
				}
			})
		}
	})
}

type docExample struct {
	line       int
	code, want string
}

// docExamples finds each ```python block preceded by an `<!-- example: -->`
// line, and the ```text block right after it.
func docExamples(t *testing.T, path string) []docExample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out     []docExample
		cur     *docExample
		marked  bool
		inBlock string // "python", "text" or ""
		buf     strings.Builder
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case inBlock != "" && line == "```":
			if inBlock == "python" {
				cur = &docExample{line: n, code: buf.String()}
			} else if cur != nil {
				cur.want = buf.String()
				out = append(out, *cur)
				cur = nil
			}
			inBlock = ""
			buf.Reset()
		case inBlock != "":
			buf.WriteString(line + "\n")
		case strings.HasPrefix(line, "<!-- example:"):
			marked = true
		case line == "```python" && marked:
			inBlock, marked = "python", false
		case line == "```text" && cur != nil:
			inBlock = "text"
		case strings.TrimSpace(line) != "":
			marked = false
			if cur != nil && !strings.HasPrefix(line, "```") {
				t.Fatalf("%s:%d: an example without a text block after it", path, cur.line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// startProxy runs `bridge proxy --http 127.0.0.1:0` on config (and extra
// flags) and returns its address and its log.
func startProxy(t *testing.T, config string, extra ...string) (string, *syncBuffer) {
	t.Helper()
	addr, logs, _ := startProxyEnv(t, config, []string{"BRIDGE_LOG_LEVEL=debug"}, extra...)
	return addr, logs
}

// startProxyEnv is startProxy with env added to the proxy's environment; it
// also returns the proxy's pid. The proxy is stopped (SIGINT) at the test's
// end.
func startProxyEnv(t *testing.T, config string, env []string, extra ...string) (string, *syncBuffer, int) {
	t.Helper()
	cmd := exec.Command(testSuite.bridgeBin, append([]string{"proxy", "--http", "127.0.0.1:0", "--servers-config", config}, extra...)...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	addr := make(chan string, 1)
	go func() {
		// The MCP address, not --metrics-addr's or --debug-addr's.
		re := regexp.MustCompile(`"addr":"(127\.0\.0\.1:[0-9]+)".*serving MCP over HTTP`)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logs.Write([]byte(sc.Text() + "\n"))
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		pw.Close()
		if t.Failed() {
			t.Logf("bridge proxy stderr:\n%s", logs.String())
		}
	})
	select {
	case a := <-addr:
		return a, logs, cmd.Process.Pid
	case <-time.After(30 * time.Second):
		t.Fatalf("bridge proxy never said where it listens:\n%s", logs.String())
	}
	return "", nil, 0
}

// TestProxyWithInspector has an independent MCP client, the MCP Inspector
// CLI, list and call the proxy's tools over streamable HTTP.
func TestProxyWithInspector(t *testing.T) {
	noEngine(t)
	npm := npmPeers(t)
	u := startUpstreams(t)
	a, _ := startProxy(t, u.config)
	inspector := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(npm, ".bin", "mcp-inspector"),
			append([]string{"--cli", "http://" + a + "/mcp", "--transport", "http"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mcp-inspector %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var list struct {
		Tools []struct {
			Name string         `json:"name"`
			Meta map[string]any `json:"_meta"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(inspector("--method", "tools/list")), &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tool := range list.Tools {
		if tool.Name == "filesystem__write_file" {
			found = tool.Meta["io.github.bridge-mcp/server"] == "filesystem" && tool.Meta["io.github.bridge-mcp/tool"] == "write_file"
		}
	}
	if !found || len(list.Tools) < 30 {
		t.Fatalf("the proxy lists %d tools; filesystem__write_file with its _meta found: %v", len(list.Tools), found)
	}
	out := inspector("--method", "tools/call", "--tool-name", "everything__echo", "--tool-arg", "message=from the inspector")
	if !strings.Contains(out, "Echo: from the inspector") {
		t.Fatalf("tools/call: %s", out)
	}
	out = inspector("--method", "resources/read", "--uri", "bridge://servers")
	if !strings.Contains(out, `\"name\":\"misbehave\"`) || !strings.Contains(out, `\"state\":\"ready\"`) {
		t.Fatalf("resources/read bridge://servers: %s", out)
	}
}

// TestServeWithRemoteProxy runs `bridge proxy --http` and a `bridge serve
// --proxy-url` that uses it.
func TestServeWithRemoteProxy(t *testing.T) {
	u := startUpstreams(t)
	a, logs := startProxy(t, u.config)
	forEachEngine(t, func(t *testing.T, e *engine) {
		cs, _, _ := connectStdioArgs(t, e, nil, "--proxy-url", "http://"+a+"/mcp")
		out, _ := runCode(t, cs, `
import mcp_tools
print(mcp_tools.call("everything", "echo", message="via the shared proxy"))
print(mcp_tools.call("misbehave", "echo", message="tagged")["message"])
`)
		if out != "Echo: via the shared proxy\ntagged\n" {
			t.Errorf("output %q", out)
		}
	})
	// Every call reached the proxy with a run id.
	b, err := os.ReadFile(u.record)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"run_id":"`) {
		t.Errorf("the proxy's log has no run id:\n%s", logs.String())
	}
	if !strings.Contains(string(b), `"tagged"`) {
		t.Errorf("the upstream's record lacks the call:\n%s", b)
	}
}

// TestCLIRunWithUpstreams: `bridge run --servers-config` gives the script
// the same mcp_tools as serve does, and `bridge run --policy` denies what
// the policy denies.
func TestCLIRunWithUpstreams(t *testing.T) {
	scope := aboveEngine("the upstreams and policy of `bridge run`")
	runsOn(t, scope)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	servers := filepath.Join(dir, "servers.json")
	writeServers(t, servers, map[string]any{
		"misbehave": map[string]any{"command": self, "env": map[string]string{upstreamEnv: "1"}},
	})
	code := `import mcp_tools
print(mcp_tools.call("misbehave", "echo", message="from bridge run")["message"])
try:
    mcp_tools.call("misbehave", "crash")
except mcp_tools.ToolDeniedError as e:
    print("denied:", e)
try:
    mcp_tools.call("misbehave", "fail", message="x")
except mcp_tools.ToolDeniedError as e:
    print("asked:", e)
`
	forEngines(t, scope, func(t *testing.T, e *engine) {
		policyFile := filepath.Join(dir, "policy-"+e.name+".yaml")
		doc := "version: 1\n" + sandboxSection(e) + "tools:\n  rules:\n    - tool: crash\n      action: deny\n      reason: no crashing\n" +
			"    - tool: fail\n      action: ask\n      reason: failing needs a human\n"
		if err := os.WriteFile(policyFile, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		env := append(engineEnv(e), "XDG_CONFIG_HOME="+dir)
		stdout, stderr, exit := bridgeCLI(t, env, code, "run", "--policy", policyFile, "--servers-config", servers, "-")
		// bridge run has no MCP client: it says so, and what to do.
		asked := "asked: misbehave/fail needs the user's approval (failing needs a human), and bridge run cannot ask a person (it has no MCP client): " +
			"allow the tool for this run in a policy file (--policy FILE, a tools rule with action: allow), or run the code through bridge serve " +
			"with a client that supports MCP elicitation; the policy's tools.ask_fallback is deny\n"
		if exit != 0 || stdout != "from bridge run\ndenied: no crashing\n"+asked {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
		}
	})
}

// TestServeSIGHUP: SIGHUP reloads a policy file at once, and a bridge with
// no policy file logs it and keeps serving.
func TestServeSIGHUP(t *testing.T) {
	forEngines(t, aboveEngine("reloading the policy on SIGHUP"), func(t *testing.T, e *engine) {
		cs, pid, stderr := connectStdioArgs(t, e, nil)
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitLog(t, stderr, "SIGHUP, but there is no policy file to reload")
		if out, _ := runCode(t, cs, "print('still serving')"); out != "still serving\n" {
			t.Fatalf("after SIGHUP: %q", out)
		}
	})
}
