package toolhost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/proxy/catalog"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// fakeUpstreams is an in-memory proxy client for unit tests.
type fakeUpstreams struct {
	servers []proxy.ServerStatus
	catalog *catalog.Catalog
	result  *mcp.CallToolResult
	err     error
	gotRun  string
	// Resources: the listing, the read and its report's decision, and the
	// last read asked for.
	resources proxy.ResourceList
	read      *proxy.ResourceData
	decision  string
	gotRead   proxy.ResourceRequest
}

func (f *fakeUpstreams) Servers(context.Context) ([]proxy.ServerStatus, error) { return f.servers, nil }
func (f *fakeUpstreams) Catalog(context.Context) (*catalog.Catalog, error)     { return f.catalog, nil }
func (f *fakeUpstreams) Resolve(_ context.Context, server, _ string) (proxy.ServerStatus, error) {
	for _, s := range f.servers {
		if s.Name == server {
			return s, nil
		}
	}
	return proxy.ServerStatus{}, &proxy.Error{Kind: proxy.KindUnknownSrv, Message: "no MCP server " + server}
}
func (f *fakeUpstreams) Call(_ context.Context, call proxy.Call) (*mcp.CallToolResult, error) {
	f.gotRun = call.RunID
	return f.result, f.err
}
func (f *fakeUpstreams) CallJSON(ctx context.Context, call proxy.Call) (json.RawMessage, error) {
	res, err := f.Call(ctx, call)
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func (f *fakeUpstreams) Resources(_ context.Context, req proxy.ResourceRequest) (proxy.ResourceList, error) {
	f.gotRun = req.RunID
	if f.err != nil {
		return proxy.ResourceList{}, f.err
	}
	return f.resources, nil
}

func (f *fakeUpstreams) ReadResource(_ context.Context, req proxy.ResourceRequest) (*proxy.ResourceData, error) {
	f.gotRun, f.gotRead = req.RunID, req
	if f.err != nil {
		return nil, f.err
	}
	if req.Report != nil {
		req.Report.Decision, req.Report.Server = f.decision, f.read.Server
	}
	return f.read, nil
}

func newFake() *fakeUpstreams {
	return &fakeUpstreams{
		servers: []proxy.ServerStatus{
			{Name: "server-everything", Description: "Everything.", State: "ready"},
			{Name: "search", Title: "A search server", State: "ready"},
			{Name: "down", State: "unavailable", Error: "exec: not found"},
		},
		catalog: catalog.New([]catalog.Tool{
			{Server: "server-everything", Name: "echo", Description: "Echoes back the input. Second sentence.",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"message":{"type":"string"}}}`)},
			{Server: "search", Name: "web_search", Description: "Searches the web."},
		}),
	}
}

func query(t *testing.T, h interface {
	Query(context.Context, string, relay.Query) relay.ToolResult
}, op, args string, out any) *relay.ToolError {
	t.Helper()
	r := h.Query(context.Background(), "run", relay.Query{ID: 1, Op: op, Args: json.RawMessage(args)})
	if r.Error != nil {
		return r.Error
	}
	if err := json.Unmarshal(r.Result, out); err != nil {
		t.Fatalf("%s: %v in %s", op, err, r.Result)
	}
	return nil
}

func TestToolHandlerQueries(t *testing.T) {
	h := New(newFake(), Options{})

	var servers []serverInfo
	if e := query(t, h, "servers", `{}`, &servers); e != nil {
		t.Fatal(e)
	}
	want := []serverInfo{
		{"server-everything", "Everything.", "server_everything"},
		{"search", "A search server", "search_"}, // would shadow mcp_tools.search
		{"down", "unavailable: exec: not found", "down"},
	}
	if len(servers) != len(want) {
		t.Fatalf("servers = %+v", servers)
	}
	for i := range want {
		if servers[i] != want[i] {
			t.Errorf("servers[%d] = %+v, want %+v", i, servers[i], want[i])
		}
	}

	var tools []toolInfo
	if e := query(t, h, "tools", `{"server":"server-everything"}`, &tools); e != nil {
		t.Fatal(e)
	}
	if len(tools) != 1 || tools[0].Name != "echo" || !strings.Contains(string(tools[0].InputSchema), "message") {
		t.Fatalf("tools = %+v", tools)
	}
	if e := query(t, h, "tools", `{"server":"search"}`, &tools); e != nil || len(tools) != 1 || string(tools[0].InputSchema) != `{"type":"object"}` {
		t.Fatalf("a tool without a schema gets an empty object schema: %+v %v", tools, e)
	}
	if e := query(t, h, "tools", `{"server":"down"}`, &tools); e == nil || e.Type != relay.ErrUpstream || !strings.Contains(e.Message, "exec: not found") {
		t.Fatalf("tools of a server that is down: %+v", e)
	}
	if e := query(t, h, "tools", `{"server":"nope"}`, &tools); e == nil || e.Type != relay.ErrUnknownServer {
		t.Fatalf("tools of an unknown server: %+v", e)
	}
	if e := query(t, h, "tools", `{}`, &tools); e == nil || e.Type != relay.ErrInvalid {
		t.Fatalf("tools without a server: %+v", e)
	}

	var hits []searchHit
	if e := query(t, h, "search", `{"query":"echo","limit":3}`, &hits); e != nil {
		t.Fatal(e)
	}
	if len(hits) == 0 || hits[0].Tool != "echo" || hits[0].Description != "Echoes back the input." || len(hits[0].Params) != 1 {
		t.Fatalf("search = %+v", hits)
	}
	if e := query(t, h, "search", `{"limit":3}`, &hits); e == nil || e.Type != relay.ErrInvalid {
		t.Fatalf("search without a query: %+v", e)
	}
}

// A tool with an output schema has its result's shape, "returns", in the
// tools and search answers, also with skills merged in; a tool without has
// no "returns".
func TestToolHandlerResultShapes(t *testing.T) {
	up := newFake()
	up.catalog = catalog.New([]catalog.Tool{
		{Server: "server-everything", Name: "list_users", Description: "Lists the users.",
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"users":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"email":{"type":"string"}},"required":["id"]}},"next":{"type":["string","null"]}},"required":["users"]}`)},
		{Server: "server-everything", Name: "echo", Description: "Echoes the users' input."},
	})
	const want = `{users: [{id: int, email?: str}], next?: str | None}`
	returns := func(list []map[string]any) map[string]any {
		out := map[string]any{}
		for _, x := range list {
			name, _ := x["name"].(string)
			if name == "" {
				name, _ = x["tool"].(string)
			}
			out[name] = x["returns"]
			if _, ok := x["returns"]; !ok {
				out[name] = "absent"
			}
		}
		return out
	}
	h := New(up, Options{})
	var tools []map[string]any
	if e := query(t, h, "tools", `{"server":"server-everything"}`, &tools); e != nil {
		t.Fatal(e)
	}
	if got := returns(tools); got["list_users"] != want || got["echo"] != "absent" {
		t.Errorf("tools: returns %v", got)
	}
	cfg := skillsConfig(t)
	for _, h := range []sandbox.ToolHandler{h, WithSkills(h, SkillsOptions{Config: func(string) policy.Skills { return *cfg }})} {
		var hits []map[string]any
		if e := query(t, h, "search", `{"query":"users","limit":5}`, &hits); e != nil {
			t.Fatal(e)
		}
		if got := returns(hits); len(got) != 2 || got["list_users"] != want || got["echo"] != "absent" {
			t.Errorf("search (%T): returns %v", h, got)
		}
	}
}

func TestToolHandlerCalls(t *testing.T) {
	f := newFake()
	h := New(f, Options{MaxResult: 1024})
	call := relay.ToolCall{ID: 9, Server: "server-everything", Tool: "echo", Args: json.RawMessage(`{}`)}

	f.result = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}, IsError: true}
	r := h.CallTool(context.Background(), "run-7", call)
	if r.Error != nil || !strings.Contains(string(r.Result), `"isError":true`) || !strings.Contains(string(r.Result), `"text":"hi"`) {
		t.Fatalf("a tool's own error passes as a result: %+v %s", r.Error, r.Result)
	}
	if f.gotRun != "run-7" {
		t.Fatalf("run id %q did not reach the proxy", f.gotRun)
	}

	f.result = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 2000)}}}
	r = h.CallTool(context.Background(), "run", call)
	if r.Error == nil || r.Error.Type != relay.ErrLimit || !strings.Contains(r.Error.Message, "over the 1 KiB") {
		t.Fatalf("a result over the limit: %+v", r)
	}

	f.result, f.err = nil, &proxy.Error{Kind: proxy.KindTimeout, Message: "did not answer"}
	r = h.CallTool(context.Background(), "run", call)
	if r.Error == nil || r.Error.Type != relay.ErrTimeout || r.Error.Message != "did not answer" {
		t.Fatalf("a proxy error keeps its kind: %+v", r)
	}
}

func TestToolHandlerBoundsWhatTheSandboxAsks(t *testing.T) {
	f := newFake()
	h := New(f, Options{})
	big := json.RawMessage(`{"x":"` + strings.Repeat("a", MaxArgBytes) + `"}`)
	r := h.CallTool(context.Background(), "run", relay.ToolCall{Server: "server-everything", Tool: "echo", Args: big})
	if r.Error == nil || r.Error.Type != relay.ErrLimit || f.gotRun != "" {
		t.Fatalf("arguments over the limit must not reach the proxy: %+v (proxy saw run %q)", r.Error, f.gotRun)
	}
	var hits []searchHit
	q, _ := json.Marshal(map[string]any{"query": strings.Repeat("word ", 1000), "limit": 5})
	if e := query(t, h, "search", string(q), &hits); e == nil || e.Type != relay.ErrInvalid {
		t.Fatalf("a 5 KB query: %+v", e)
	}
	var tools []toolInfo
	q, _ = json.Marshal(map[string]any{"server": strings.Repeat("s", 10000)})
	if e := query(t, h, "tools", string(q), &tools); e == nil || e.Type != relay.ErrUnknownServer {
		t.Fatalf("a 10 KB server name: %+v", e)
	}
}

// What the bridge computes itself for a run is metered, and an answer too
// big for the sandbox is refused with a hint.
func TestToolHandlerHostBudget(t *testing.T) {
	up := newFake()
	var tools []catalog.Tool
	for i := range 2000 {
		tools = append(tools, catalog.Tool{Server: "search", Name: fmt.Sprintf("tool_%d", i),
			Description: strings.Repeat("a long description ", 20)})
	}
	up.catalog = catalog.New(tools)
	h := New(up, Options{MaxResult: 64 << 10})

	r := h.Query(context.Background(), "run", relay.Query{ID: 1, Op: relay.OpTools, Args: json.RawMessage(`{"server":"search"}`)})
	if r.Error == nil || r.Error.Type != relay.ErrLimit || !strings.Contains(r.Error.Message, "search(") {
		t.Fatalf("a 2000-tool list over a 64 KiB limit: %+v", r.Error)
	}

	meter := sandbox.NewHostMeter(20 * time.Millisecond)
	ctx := sandbox.WithHostMeter(context.Background(), meter)
	refused := 0
	for range 100_000 {
		r := h.Query(ctx, "run", relay.Query{ID: 1, Op: relay.OpSearch, Args: json.RawMessage(`{"query":"long description tool","limit":50}`)})
		if r.Error != nil {
			if r.Error.Type != relay.ErrLimit || !strings.Contains(r.Error.Message, "per run") {
				t.Fatalf("got %+v", r.Error)
			}
			refused++
			break
		}
	}
	if refused == 0 {
		t.Fatalf("100,000 searches ran within a 20 ms budget (used %s)", meter.Used())
	}
	up.err = &proxy.Error{Kind: proxy.KindUnknownTool, Message: "no such tool"}
	if r := h.CallTool(ctx, "run", relay.ToolCall{ID: 2, Server: "search", Tool: "x", Args: json.RawMessage(`{}`)}); r.Error == nil || r.Error.Type != relay.ErrLimit {
		t.Fatalf("a call after the budget is used: %+v", r.Error)
	}
}

// TestModuleReservedMatchesPython holds moduleReserved to the names the
// mcp_tools package reserves itself (_core.RESERVED): the two lists live in
// two languages.
func TestModuleReservedMatchesPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 not found")
		}
		t.Skip("python3 not found")
	}
	cmd := exec.Command(py, "-I", "-B", "-c", "import sys; sys.path.insert(0, sys.argv[1]); from mcp_tools import _core; print(' '.join(sorted(_core.RESERVED)))",
		filepath.Join("..", "..", "images", "runner", "lib"))
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("reading _core.RESERVED: %v", err)
	}
	var goNames []string
	for n := range moduleReserved {
		goNames = append(goNames, n)
	}
	sort.Strings(goNames)
	if got, want := strings.Join(goNames, " "), strings.TrimSpace(string(b)); got != want {
		t.Errorf("moduleReserved =\n%s\nmcp_tools._core.RESERVED =\n%s", got, want)
	}
}
