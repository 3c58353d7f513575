package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// rawClient speaks MCP 2026-07-28 to a Server by hand, as principal who:
// the go-sdk client knows nothing of tasks.
type rawClient struct {
	t     *testing.T
	conn  mcp.Connection
	who   string
	tasks bool // declare the Tasks extension
	ask   bool // declare elicitation (form)
	next  int64
}

func rawConnect(t *testing.T, s *Server, who string, tasks bool) *rawClient {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawClient{t: t, conn: conn, who: who, tasks: tasks}
}

// call sends method with params (and the request's _meta), and returns its
// result or error.
func (c *rawClient) call(method string, params map[string]any) (map[string]any, *jsonrpc.Error) {
	c.t.Helper()
	caps := map[string]any{}
	if c.tasks {
		caps["extensions"] = map[string]any{TasksExtension: map[string]any{}}
	}
	if c.ask {
		caps["elicitation"] = map[string]any{"form": map[string]any{}}
	}
	params["_meta"] = map[string]any{
		mcp.MetaKeyProtocolVersion:    "2026-07-28",
		mcp.MetaKeyClientCapabilities: caps,
		mcp.MetaKeyClientInfo:         map[string]any{"name": c.who, "version": "1"},
	}
	raw, _ := json.Marshal(params)
	c.next++
	id, _ := jsonrpc.MakeID(float64(c.next))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, &jsonrpc.Request{ID: id, Method: method, Params: raw}); err != nil {
		c.t.Fatal(err)
	}
	for {
		msg, err := c.conn.Read(ctx)
		if err != nil {
			c.t.Fatalf("%s: %v", method, err)
		}
		resp, ok := msg.(*jsonrpc.Response)
		if !ok || resp.ID != id {
			continue
		}
		if resp.Error != nil {
			var je *jsonrpc.Error
			if e, ok := resp.Error.(*jsonrpc.Error); ok {
				je = e
			} else {
				je = &jsonrpc.Error{Message: resp.Error.Error()}
			}
			return nil, je
		}
		var out map[string]any
		if err := json.Unmarshal(resp.Result, &out); err != nil {
			c.t.Fatal(err)
		}
		return out, nil
	}
}

// runPython calls run_python with code.
func (c *rawClient) runPython(code string) (map[string]any, *jsonrpc.Error) {
	c.t.Helper()
	return c.call("tools/call", map[string]any{"name": ToolName, "arguments": map[string]any{"code": code}})
}

// getTask polls tasks/get until the task's status is want, and returns
// the last answer.
func (c *rawClient) awaitTask(id, want string) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c.call("tasks/get", map[string]any{"taskId": id})
		if err != nil {
			c.t.Fatalf("tasks/get %s: %v", id, err)
		}
		if got["status"] == want {
			return got
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s is %v, not %s, 10 s on: %v", id, got["status"], want, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gate is a runner that blocks each run until released (or cancelled).
type gate struct {
	release   chan struct{}
	release2  chan struct{} // for "huge"
	started   chan string
	cancelled chan string
}

func newGate() *gate {
	return &gate{release: make(chan struct{}), release2: make(chan struct{}), started: make(chan string, 16), cancelled: make(chan string, 16)}
}

func (g *gate) run(ctx context.Context, req sandbox.Request) (sandbox.Result, error) {
	if strings.HasPrefix(req.Code, "quick") {
		return sandbox.Result{Status: sandbox.StatusOK, Stdout: "quick\n"}, nil
	}
	g.started <- req.Code
	switch {
	case strings.HasPrefix(req.Code, "big"):
		<-g.release
		return sandbox.Result{Status: sandbox.StatusOK, Stdout: strings.Repeat("x", 2000)}, nil
	case strings.HasPrefix(req.Code, "huge"):
		<-g.release2
		return sandbox.Result{Status: sandbox.StatusOK, Stdout: strings.Repeat("x", 6000)}, nil
	}
	select {
	case <-g.release:
		return sandbox.Result{Status: sandbox.StatusOK, Stdout: "done: " + req.Code + "\n"}, nil
	case <-ctx.Done():
		g.cancelled <- req.Code
		return sandbox.Result{Status: sandbox.StatusCancelled, ExitCode: -1, Message: "cancelled"}, nil
	}
}

func taskServer(t *testing.T, g *gate, tp policy.Tasks) *Server {
	t.Helper()
	if tp.Max == 0 {
		tp = policy.Tasks{Enabled: true, After: 20 * time.Millisecond, Max: 8, MaxPerPrincipal: 2, ResultTTL: time.Minute, MaxResultBytes: 1 << 20}
	}
	return newServer(t, Options{Instances: fakeInstances{run: g.run}, Tasks: tp})
}

// A call still running after tasks.after is answered by a task handle;
// tasks/get says working, then completed with the call's result; a quick
// call is answered with its result, and so is any call of a client that
// does not declare the extension.
func TestTaskRunsPastItsCall(t *testing.T) {
	g := newGate()
	s := taskServer(t, g, policy.Tasks{})
	c := rawConnect(t, s, "alice", true)

	res, err := c.runPython("quick")
	if err != nil || res["resultType"] != "complete" || !strings.Contains(fmt.Sprint(res["content"]), "quick") {
		t.Fatalf("a quick call: %v %v", res, err)
	}
	res, err = c.runPython("slow")
	if err != nil || res["resultType"] != "task" || res["status"] != "working" || res["taskId"] == "" || res["pollIntervalMs"] != float64(1000) {
		t.Fatalf("a slow call: %v %v", res, err)
	}
	id := res["taskId"].(string)
	if _, err := time.Parse(time.RFC3339Nano, res["createdAt"].(string)); err != nil {
		t.Errorf("createdAt %v: %v", res["createdAt"], err)
	}
	got := c.awaitTask(id, "working")
	if got["resultType"] != "complete" || got["result"] != nil {
		t.Errorf("tasks/get of a working task: %v", got)
	}
	close(g.release)
	got = c.awaitTask(id, "completed")
	result, _ := got["result"].(map[string]any)
	if !strings.Contains(fmt.Sprint(result["content"]), "done: slow") || result["resultType"] != "complete" {
		t.Errorf("the completed task's result: %v", got)
	}
	// Fetched once, still there until result_ttl.
	c.awaitTask(id, "completed")

	plain := rawConnect(t, s, "alice", false)
	res, err = plain.runPython("slow again")
	if err != nil || res["resultType"] != "complete" {
		t.Errorf("a client without the extension: %v %v", res, err)
	}
	if _, err := plain.call("tasks/get", map[string]any{"taskId": id}); err == nil || err.Code != codeMissingCapability {
		t.Errorf("tasks/get of a client without the extension: %v", err)
	}
}

// Another principal can neither see, answer nor cancel a task: its id is
// as unknown to it as one never made; an id of an earlier start of the
// bridge says it was lost.
func TestTaskBelongsToItsPrincipal(t *testing.T) {
	g := newGate()
	s := taskServer(t, g, policy.Tasks{})
	alice, bob := rawConnect(t, s, "alice", true), rawConnect(t, s, "bob", true)
	res, _ := alice.runPython("slow")
	id, _ := res["taskId"].(string)
	for _, m := range []string{"tasks/get", "tasks/cancel", "tasks/update"} {
		params := map[string]any{"taskId": id}
		if m == "tasks/update" {
			params["inputResponses"] = map[string]any{}
		}
		if _, err := bob.call(m, params); err == nil || err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Message, "never was yours") {
			t.Errorf("bob's %s of alice's task: %v", m, err)
		}
	}
	alice.awaitTask(id, "working")
	lost := id[:len(id)-40] + "00000000" + id[len(id)-32:]
	if _, err := alice.call("tasks/get", map[string]any{"taskId": lost}); err == nil || !strings.Contains(err.Message, "the bridge restarted since it made it") {
		t.Errorf("a task of an earlier start: %v", err)
	}
	close(g.release)
	alice.awaitTask(id, "completed")
}

// tasks/cancel stops the run (its context ends: the container goes) and
// the task ends cancelled; the bounds on running tasks hold per principal
// and in all.
func TestTaskCancelAndBounds(t *testing.T) {
	g := newGate()
	s := taskServer(t, g, policy.Tasks{Enabled: true, After: 20 * time.Millisecond, Max: 3, MaxPerPrincipal: 2, ResultTTL: time.Minute, MaxResultBytes: 1 << 20})
	alice, bob := rawConnect(t, s, "alice", true), rawConnect(t, s, "bob", true)
	var ids []string
	for i := range 2 {
		res, err := alice.runPython(fmt.Sprintf("slow %d", i))
		if err != nil || res["resultType"] != "task" {
			t.Fatalf("alice's task %d: %v %v", i, res, err)
		}
		ids = append(ids, res["taskId"].(string))
	}
	res, _ := alice.runPython("slow 3")
	if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "tasks.max_per_principal") {
		t.Errorf("alice's third task: %v", res)
	}
	res, _ = bob.runPython("slow bob")
	if res["resultType"] != "task" {
		t.Fatalf("bob's first task: %v", res)
	}
	res, _ = bob.runPython("slow bob 2")
	if res["isError"] != true || !strings.Contains(fmt.Sprint(res["content"]), "(tasks.max)") {
		t.Errorf("a task past tasks.max: %v", res)
	}
	if _, err := alice.call("tasks/cancel", map[string]any{"taskId": ids[0]}); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-g.cancelled:
		if code != "slow 0" {
			t.Errorf("cancelled %q", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled task's run goes on")
	}
	alice.awaitTask(ids[0], "cancelled")
	// A running task ended: room for another.
	if res, _ := alice.runPython("slow 4"); res["resultType"] != "task" {
		t.Errorf("a task once one was cancelled: %v", res)
	}
	close(g.release)
	alice.awaitTask(ids[1], "completed")
}

// The results a principal's ended tasks keep are bounded: past
// tasks.max_result_bytes its oldest ended task is dropped, and a result
// larger than the bound alone is replaced by a note saying so.
func TestTaskResultsBounded(t *testing.T) {
	g := newGate()
	s := taskServer(t, g, policy.Tasks{Enabled: true, After: time.Millisecond, Max: 8, MaxPerPrincipal: 8, ResultTTL: time.Minute, MaxResultBytes: 5000})
	c := rawConnect(t, s, "alice", true)
	var ids []string
	for range 2 {
		res, _ := c.runPython("big")
		id, _ := res["taskId"].(string)
		if id == "" {
			t.Fatalf("not a task: %v", res)
		}
		ids = append(ids, id)
	}
	close(g.release)
	// Both end; their results together (about 8 KB: stdout is in the text
	// and in structuredContent) are over the bound: the one that ended
	// first is dropped (once the second's end is recorded: a poll between
	// the two may see both).
	kept := func() (kept, dropped int) {
		for _, id := range ids {
			got, err := c.call("tasks/get", map[string]any{"taskId": id})
			switch {
			case err != nil && strings.Contains(err.Message, "tasks.max_result_bytes"):
				dropped++
			case err != nil:
				t.Fatalf("tasks/get: %v", err)
			case got["status"] == "completed":
				kept++
			}
		}
		return kept, dropped
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		k, d := kept()
		if k == 1 && d == 1 {
			break
		}
		if k+d == 2 && d > 1 || time.Now().After(deadline) {
			t.Fatalf("%d of 2 results kept and %d dropped under tasks.max_result_bytes 5000, want 1 and 1", k, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if k, d := kept(); k != 1 || d != 1 {
		t.Errorf("then %d kept and %d dropped", k, d)
	}
	res, _ := c.runPython("huge")
	id, _ := res["taskId"].(string)
	close(g.release2)
	got := c.awaitTask(id, "completed")
	result, _ := got["result"].(map[string]any)
	if result["isError"] != true || !strings.Contains(fmt.Sprint(result["content"]), "is larger than one principal's tasks may keep (tasks.max_result_bytes") {
		t.Errorf("a result over the bound alone: %v", got)
	}
}

// A question the run asks becomes the task's inputRequests
// (input_required); tasks/update answers it, an answer to a key not
// outstanding is ignored, and the run goes on to its result.
func TestTaskAsksThroughUpdate(t *testing.T) {
	g := newGate()
	s, _, _ := policyServer(t, "tools:\n  rules:\n    - server: pay\n      tool: refund\n      action: ask\ntasks:\n  after: 20ms\n", g.run)
	c := rawConnect(t, s, "alice", true)
	c.ask = true
	res, _ := c.runPython("slow")
	id, _ := res["taskId"].(string)
	if id == "" {
		t.Fatalf("not a task: %v", res)
	}
	<-g.started
	// The code's tool call asks, as the proxy would for it.
	s.tasks.mu.Lock()
	k := s.tasks.m[id]
	s.tasks.mu.Unlock()
	answered := make(chan proxy.Answer, 1)
	go func() {
		answered <- k.d.rs.Ask(context.Background(), proxy.Question{Server: "pay", Tool: "refund", Reason: "money", Timeout: time.Minute, Remember: policy.RememberRun})
	}()
	got := c.awaitTask(id, "input_required")
	reqs, _ := got["inputRequests"].(map[string]any)
	if len(reqs) != 1 {
		t.Fatalf("input_required with %v", got)
	}
	var key string
	for key = range reqs {
	}
	if !strings.Contains(fmt.Sprint(reqs[key]), "refund") {
		t.Errorf("the question: %v", reqs[key])
	}
	for _, answer := range []map[string]any{
		{"nope": map[string]any{"action": "accept", "content": map[string]any{}}}, // not outstanding: ignored
		{key: map[string]any{"action": "accept", "content": map[string]any{}}},
	} {
		if _, err := c.call("tasks/update", map[string]any{"taskId": id, "inputResponses": answer}); err != nil {
			t.Fatalf("tasks/update: %v", err)
		}
	}
	select {
	case a := <-answered:
		if !a.Allow {
			t.Errorf("the human's yes reached the run as %+v", a)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the answer never reached the run")
	}
	c.awaitTask(id, "working")
	close(g.release)
	c.awaitTask(id, "completed")
}
