package integration

// Tests of `bridge serve` against real MCP peers from npm: the MCP Inspector
// CLI as an independent client, and js-tiktoken to count what tools/list
// costs an agent. The packages are pinned in integration/npm (package.json,
// package-lock.json) and installed by `make setup` (integration/env/setup.sh,
// npm ci), which records their node_modules as BRIDGE_NPM_DIR.

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The most o200k_base tokens the whole result of tools/list may cost
// (TestToolsListTokenBudget): the plain tool, the tool with sessions and
// snapshots, and that with the words a policy's mounts and the
// datascience image add (which a user opted into).
const (
	toolsListTokenBudget          = 250
	toolsListTokenBudgetSessions  = 320
	toolsListTokenBudgetOptedInto = 345
)

// npmInstallHint says how to install the npm peers.
const npmInstallHint = "run `make setup` (or: cd integration/npm && npm ci)"

// npmPeers returns the node_modules directory of integration/npm: the one in
// $BRIDGE_NPM_DIR, else npm/node_modules under the working directory (go test
// runs in the package's directory; so does the rootless run), else the one
// next to this file. Missing peers fail the test with CI=true (a run that
// silently skips them proves nothing) and skip it otherwise.
func npmPeers(t testing.TB) string {
	t.Helper()
	var dirs []string
	add := func(d string) {
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if d := os.Getenv("BRIDGE_NPM_DIR"); d != "" {
		add(d)
	}
	add(filepath.Join("npm", "node_modules"))
	add(filepath.Join(repoRoot(), "integration", "npm", "node_modules"))
	missing := func(format string, args ...any) {
		t.Helper()
		if ci() {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node is not on PATH (%v): the npm MCP peers need Node 20+; %s", err, npmInstallHint)
	}
	for _, d := range dirs {
		// What the tests use: the Inspector CLI, js-tiktoken, the
		// TypeScript SDK 1.x and 2.x clients, the Tasks extension's client,
		// and the scripts next to node_modules that import them from there
		// (the token counter, the elicitation client; the HTTP clients of
		// typescript_test.go run from copies beside a link to them).
		need := []string{
			filepath.Join(d, ".bin", "mcp-inspector"),
			filepath.Join(d, "js-tiktoken", "package.json"),
			filepath.Join(d, "@modelcontextprotocol", "sdk", "package.json"),
			filepath.Join(d, "@modelcontextprotocol", "client", "package.json"),
			filepath.Join(d, "@modelcontextprotocol", "ext-tasks", "package.json"),
			filepath.Join(d, "..", "count-tokens.mjs"),
			filepath.Join(d, "..", "elicit-client.mjs"),
		}
		ok := true
		for _, f := range need {
			if _, err := os.Stat(f); err != nil {
				ok = false
				break
			}
		}
		if ok {
			return d
		}
	}
	missing("the npm MCP peers are not installed (looked in %s): %s", strings.Join(dirs, ", "), npmInstallHint)
	return ""
}

// serveArgs is `bridge serve` on e: its arguments and the environment it
// needs beyond PATH and HOME.
func serveArgs(e *engine) (args, env []string) {
	// No upstream servers unless a test adds a --servers-config of its own
	// (a later file adds to this one): the defaults in $HOME are not read.
	args = []string{"serve", "--runtime", e.cand.Engine, "--servers-config", testSuite.noServers}
	if !e.enforced {
		args = append(args, "--allow-unenforced-limits")
	}
	if e.cand.Engine == sandbox.EngineKubernetes {
		args = append(args, "--cpus", kubeTestCPUs)
	}
	env = engineEnv(e)
	// No policy file from the tester's own ~/.config/bridge: tests that
	// want one pass --policy.
	env = append(env, "XDG_CONFIG_HOME="+filepath.Join(filepath.Dir(testSuite.bridgeBin), "xdg-config"))
	// The rootless engine's run directories live under the user's runtime dir.
	for _, k := range []string{"XDG_RUNTIME_DIR", "BRIDGE_LOG_LEVEL"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return args, env
}

// inspectorCLI runs the MCP Inspector CLI with `bridge serve` on e as its
// stdio server and returns the "result" of its JSON output. The syntax:
//
//	mcp-inspector --cli --method M [method flags] --format json \
//	    -e KEY=VALUE ... -- BRIDGE serve --runtime R [--allow-unenforced-limits]
//
// Everything after "--" is the server's command line, passed verbatim. The
// Inspector starts the server with only HOME, LOGNAME, PATH, SHELL, TERM and
// USER of its own environment, plus each -e KEY=VALUE (the engine's socket).
// With --format json it prints {"result": ...} on stdout, or
// {"error": ...} on stderr and exits non-zero.
func inspectorCLI(t *testing.T, npm string, e *engine, method string, methodArgs ...string) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sargs, senv := serveArgs(e)
	args := append([]string{"--cli", "--method", method}, methodArgs...)
	// The first call starts the engine connection; allow for a slow one.
	args = append(args, "--format", "json", "--connect-timeout", "60000")
	for _, kv := range senv {
		args = append(args, "-e", kv)
	}
	args = append(args, "--")
	args = append(args, testSuite.bridgeBin)
	args = append(args, sargs...)
	cmd := exec.CommandContext(ctx, filepath.Join(npm, ".bin", "mcp-inspector"), args...)
	// The Inspector keeps OAuth and client state under ~/.mcp-inspector:
	// keep it out of the user's home.
	cmd.Env = append(os.Environ(), "MCP_STORAGE_DIR="+t.TempDir())
	// Its own process group, so a timeout also ends the bridge it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("mcp-inspector --cli --method %s %s: %v in %s", method, strings.Join(methodArgs, " "), err, time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		t.Fatalf("mcp-inspector --method %s did not finish in time\nstdout:\n%s\nstderr:\n%s", method, stdout.String(), stderr.String())
	}
	if err != nil {
		t.Fatalf("mcp-inspector --method %s: %v\nstdout:\n%s\nstderr (the Inspector's and bridge serve's):\n%s", method, err, stdout.String(), stderr.String())
	}
	var out struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out.Result) == 0 {
		t.Fatalf("mcp-inspector --method %s printed no {\"result\": ...} (%v)\nstdout:\n%s\nstderr:\n%s", method, err, stdout.String(), stderr.String())
	}
	return out.Result
}

// The MCP Inspector CLI, an independent client, lists bridge's one tool and
// calls it over stdio.
func TestInspectorCLI(t *testing.T) {
	scope := aboveEngine("the MCP Inspector's view of the bridge")
	runsOn(t, scope)
	npm := npmPeers(t)
	forEngines(t, scope, func(t *testing.T, e *engine) {
		raw := inspectorCLI(t, npm, e, "tools/list")
		var list struct {
			Tools []struct {
				Name        string `json:"name"`
				InputSchema struct {
					Properties map[string]json.RawMessage `json:"properties"`
					Required   []string                   `json:"required"`
				} `json:"inputSchema"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			t.Fatalf("tools/list result: %v\n%s", err, raw)
		}
		if len(list.Tools) != 1 || list.Tools[0].Name != "run_python" {
			t.Fatalf("tools/list: want exactly one tool, run_python; got\n%s", raw)
		}
		if _, ok := list.Tools[0].InputSchema.Properties["code"]; !ok {
			t.Errorf("run_python's input schema has no code property:\n%s", raw)
		}

		// --tool-arg sends a value that parses as JSON as that JSON (code=42
		// would send a number); this one does not, so it goes as a string.
		raw = inspectorCLI(t, npm, e, "tools/call", "--tool-name", "run_python", "--tool-arg", "code=print(21*2)")
		var res struct {
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatalf("tools/call result: %v\n%s", err, raw)
		}
		if res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" || strings.TrimSpace(res.Content[0].Text) != "42" {
			t.Fatalf("tools/call run_python print(21*2): want one text content \"42\"; got\n%s", raw)
		}

		// A file the code saves comes back to this client as an image.
		raw = inspectorCLI(t, npm, e, "tools/call", "--tool-name", "run_python", "--tool-arg", "code="+pngCode+"from mcp_tools import show\nshow(png(32, 16))\n")
		var img struct {
			Content []struct {
				Type     string `json:"type"`
				Data     []byte `json:"data"`
				MIMEType string `json:"mimeType"`
			} `json:"content"`
		}
		if err := json.Unmarshal(raw, &img); err != nil {
			t.Fatalf("tools/call result: %v\n%s", err, raw)
		}
		var got *image.Config
		for _, c := range img.Content {
			if c.Type == "image" && c.MIMEType == "image/png" {
				if cfg, err := png.DecodeConfig(bytes.NewReader(c.Data)); err == nil {
					got = &cfg
				}
			}
		}
		if got == nil || got.Width != 32 || got.Height != 16 {
			t.Fatalf("tools/call run_python show(png): want a 32x16 PNG image content; got %+v\n%.2000s", got, raw)
		}

		// A file passed in: a --tool-arg that parses as JSON goes as that
		// JSON, here the inputs list.
		raw = inspectorCLI(t, npm, e, "tools/call", "--tool-name", "run_python",
			"--tool-arg", "code=print(open('/tmp/inputs/notes/a.txt').read())",
			"--tool-arg", `inputs=[{"path": "notes/a.txt", "text": "from the inspector"}]`)
		res.Content, res.IsError = nil, false
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatalf("tools/call result: %v\n%s", err, raw)
		}
		if res.IsError || len(res.Content) != 1 || strings.TrimSpace(res.Content[0].Text) != "from the inspector" {
			t.Fatalf("tools/call run_python with inputs: want the input's text back; got\n%s", raw)
		}
	})
}

// The whole tools/list result stays within its budget: toolsListTokenBudget
// tokens, toolsListTokenBudgetSessions with sessions and snapshots on, and
// toolsListTokenBudgetOptedInto with mounts and the datascience image too.
//
// What is counted: the "result" member of the JSON-RPC response to
// tools/list, byte for byte as bridge serve wrote it on stdout (captured
// below the go-sdk client, before it decodes anything), in its compact
// JSON serialization, tokenized with o200k_base (js-tiktoken). That is
// everything a client learns from tools/list: the tool's name, description,
// input and output schemas and annotations, with the JSON punctuation, and
// the envelope fields of the protocol version the go-sdk client negotiates
// (its newest; the most a client receives). The initialize result (server
// info, instructions) is not part of it.
func TestToolsListTokenBudget(t *testing.T) {
	scope := aboveEngine("the size of tools/list")
	runsOn(t, scope)
	npm := npmPeers(t)
	// Three real upstream servers with 30-odd tools between them: the
	// agent's tools/list must not grow by a single token.
	u := startUpstreams(t)
	three := filepath.Join(t.TempDir(), "three.json")
	writeServers(t, three, map[string]any{
		"everything": map[string]any{"command": "node", "args": []string{filepath.Join(npm, "@modelcontextprotocol", "server-everything", "dist", "index.js"), "stdio"}},
		"filesystem": map[string]any{"command": "node", "args": []string{filepath.Join(npm, "@modelcontextprotocol", "server-filesystem", "dist", "index.js"), u.fsRoot}},
		"memory":     map[string]any{"command": "node", "args": []string{filepath.Join(npm, "@modelcontextprotocol", "server-memory", "dist", "index.js")}},
	})
	forEngines(t, scope, func(t *testing.T, e *engine) {
		none := toolsListTokens(t, npm, e, toolsListTokenBudget)
		with3 := toolsListTokens(t, npm, e, toolsListTokenBudget, "--servers-config", three)
		if none != with3 {
			t.Fatalf("tools/list costs %d tokens with no upstream servers and %d with three: it must not change", none, with3)
		}
		// With sessions on, the tool takes two more arguments and says
		// what a session is; with mounts, it names their paths; with the
		// datascience image, its packages: still within the budget.
		sales, other := mountedFolder(t)
		reports := filepath.Join(filepath.Dir(sales), "reports")
		if err := os.Mkdir(reports, 0o755); err != nil {
			t.Fatal(err)
		}
		mounts := "mounts:\n  - host: " + sales + "\n  - host: " + other + "\n  - host: " + reports + "\n"
		counts := map[string]int{}
		snaps := "snapshots:\n  dir: " + filepath.Join(t.TempDir(), "snapshots") + "\n"
		for _, c := range []struct {
			name, sandbox, rest string
			budget              int
		}{
			{"sessions", "", "", toolsListTokenBudgetSessions},
			{"sessions and snapshots", "", snaps, toolsListTokenBudgetSessions},
			{"sessions, snapshots and 3 mounts", "", snaps + mounts, toolsListTokenBudgetOptedInto},
			{"sessions, snapshots, 3 mounts and the datascience image", "  variant: datascience\n", snaps + mounts, toolsListTokenBudgetOptedInto},
		} {
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(pol, []byte("version: 1\n"+sandboxSection(e)+c.sandbox+"pool:\n  size: 0\nsessions:\n  enabled: true\n"+c.rest), 0o644); err != nil {
				t.Fatal(err)
			}
			n, desc := toolsListTokensDesc(t, npm, e, c.budget, "--policy", pol)
			counts[c.name] = n
			if strings.Contains(c.rest, "mounts:") && !strings.Contains(desc, " Data: /data/sales, /data/other, /data/reports.") {
				t.Errorf("%s: the description does not name the mounts: %s", c.name, desc)
			}
			if c.sandbox != "" && !strings.Contains(desc, "numpy, pandas, matplotlib") {
				t.Errorf("%s: the description does not name the packages: %s", c.name, desc)
			}
		}
		t.Logf("tools/list: %d tokens with sessions off; %v", none, counts)
	})
}

// toolsListTokens is toolsListTokensDesc's count.
func toolsListTokens(t *testing.T, npm string, e *engine, budget int, extra ...string) int {
	t.Helper()
	n, _ := toolsListTokensDesc(t, npm, e, budget, extra...)
	return n
}

// toolsListTokensDesc starts `bridge serve` with extra flags, runs one
// run_python (so the upstreams, if any, are connected), and counts the
// o200k_base tokens of its raw tools/list result, which must stay within
// the budget; and returns the tool's description.
func toolsListTokensDesc(t *testing.T, npm string, e *engine, budget int, extra ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sargs, senv := serveArgs(e)
	cmd := exec.CommandContext(ctx, testSuite.bridgeBin, append(sargs, extra...)...)
	cmd.Env = append(os.Environ(), senv...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	tr := &captureTransport{Transport: &mcp.CommandTransport{Command: cmd}}
	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-integration-test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting to bridge serve: %v\nstderr:\n%s", err, stderr.String())
	}
	defer cs.Close()
	if slices.Contains(extra, "--servers-config") {
		// The servers are connected and their tools listed in the sandbox.
		res, out := callRunPython(t, ctx, cs, "import mcp_tools\nprint(sum(len(mcp_tools.tools(s['name'])) for s in mcp_tools.servers()))", nil)
		if res.IsError || out.Status != "ok" {
			t.Fatalf("listing the upstream tools: %s\nstderr:\n%s", contentText(res), stderr.String())
		}
		t.Logf("upstream tools seen from the sandbox: %s", strings.TrimSpace(out.Stdout))
	}
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v\nstderr:\n%s", err, stderr.String())
	}
	if len(lt.Tools) != 1 || lt.Tools[0].Name != "run_python" {
		t.Fatalf("tools/list: want exactly one tool, run_python; got %d tools", len(lt.Tools))
	}
	raw := tr.result("tools/list")
	if len(raw) == 0 {
		t.Fatal("the raw tools/list response was not captured")
	}
	n := countTokens(t, npm, raw)
	// The tools array alone, for whoever trims the description: the rest
	// is the protocol's envelope (_meta, resultType, ttlMs, cacheScope at
	// newer protocol versions), which the tool cannot shrink.
	tools, err := json.Marshal(map[string]json.RawMessage{"tools": toolsOf(t, raw)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tools/list result at protocol %s with flags %q: %d o200k_base tokens (budget %d; {\"tools\": ...} alone: %d), %d bytes on the wire",
		cs.InitializeResult().ProtocolVersion, extra, n, budget, countTokens(t, npm, tools), len(raw))
	if n > budget {
		t.Fatalf("tools/list result costs %d tokens, over the budget of %d:\n%s", n, budget, raw)
	}
	return n, lt.Tools[0].Description
}

// toolsOf returns the tools member of a tools/list result.
func toolsOf(t *testing.T, result json.RawMessage) json.RawMessage {
	t.Helper()
	var r struct {
		Tools json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(result, &r); err != nil || len(r.Tools) == 0 {
		t.Fatalf("tools/list result without tools (%v):\n%s", err, result)
	}
	return r.Tools
}

// countTokens runs integration/npm/count-tokens.mjs (next to node_modules
// npm) on doc and returns its o200k_base token count.
func countTokens(t *testing.T, npm string, doc []byte) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(filepath.Dir(npm), "count-tokens.mjs"))
	cmd.Stdin = bytes.NewReader(doc)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("count-tokens.mjs: %v\n%s", err, stderr.String())
	}
	n, err := strconv.Atoi(strings.TrimSpace(stdout.String()))
	if err != nil {
		t.Fatalf("count-tokens.mjs printed %q, not a count: %v", stdout.String(), err)
	}
	return n
}

// captureTransport wraps an MCP transport and keeps the raw result of the
// last response to each method the client called, as the server sent it.
type captureTransport struct {
	mcp.Transport
	mu      sync.Mutex
	pending map[any]string // request ID -> method
	results map[string]json.RawMessage
}

func (c *captureTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := c.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &captureConn{Connection: conn, t: c}, nil
}

func (c *captureTransport) result(method string) json.RawMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results[method]
}

type captureConn struct {
	mcp.Connection
	t *captureTransport
}

func (c *captureConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		c.t.mu.Lock()
		if c.t.pending == nil {
			c.t.pending = map[any]string{}
		}
		c.t.pending[req.ID.Raw()] = req.Method
		c.t.mu.Unlock()
	}
	return c.Connection.Write(ctx, msg)
}

func (c *captureConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); ok && err == nil {
		c.t.mu.Lock()
		if method, ok := c.t.pending[resp.ID.Raw()]; ok {
			delete(c.t.pending, resp.ID.Raw())
			if c.t.results == nil {
				c.t.results = map[string]json.RawMessage{}
			}
			c.t.results[method] = append(json.RawMessage(nil), resp.Result...)
		}
		c.t.mu.Unlock()
	}
	return msg, err
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
