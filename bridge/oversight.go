package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

// maxTraceEntries bounds a run's tool-call trace. Once it is full, an
// allowed call that went through is cut first: a denied, asked, refused
// or failed one takes the place of the latest such call, and is cut only
// when the trace holds nothing else. Calls cut are counted by kind.
const maxTraceEntries = 100

// traceKind is the kind a trace entry is counted under when cut: its
// decision, or "failed" for an allowed call that failed.
func traceKind(e TraceEntry) string {
	if e.Decision == "allowed" && e.Error != "" {
		return "failed"
	}
	return e.Decision
}

// TraceEntry is one tool call of a run, as structuredContent.tool_calls
// reports it.
type TraceEntry = toolhost.TraceEntry

// askMode is how a run's client can be asked.
type askMode int

const (
	askNone   askMode = iota // no elicitation capability: tools.ask_fallback
	askInCall                // elicitation/create while the call is open (protocol < 2026-07-28)
	askResult                // an input_required result, answered in a retried call (SEP-2322)
)

// clientAskMode is how the client that made req can be asked. As the SDK
// does, a session that initialized says its version and capabilities;
// otherwise (MCP 2026-07-28 and later) the request's _meta does.
func clientAskMode(req *mcp.CallToolRequest) askMode {
	caps, version := req.ClientCapabilities(), req.ProtocolVersion()
	if req.Session != nil {
		if ip := req.Session.InitializeParams(); ip != nil {
			caps, version = ip.Capabilities, ip.ProtocolVersion
		}
	}
	if caps == nil || caps.Elicitation == nil || (caps.Elicitation.Form == nil && caps.Elicitation.URL != nil) {
		return askNone
	}
	if version != "" && version < "2026-07-28" {
		if req.Session == nil {
			return askNone
		}
		return askInCall
	}
	return askResult
}

// runState is what the bridge keeps of one run_python call while it runs:
// its tool-call trace, and how to ask its human. It is the run's
// [toolhost.Run], registered under the run's id while the code runs
// ([Options.Runs]), so the sandbox's tool calls ask and trace through it.
type runState struct {
	mode    askMode
	session *mcp.ServerSession // askInCall: where to ask
	scope   string             // "run" or, for a session's call, "session"
	// pending receives the questions of an askResult run (detached.go).
	pending chan *pendingAsk
	// task says the run is a task's (tasks.go): polled, never streamed to.
	task bool
	// turn is held by the question being asked.
	turn chan struct{}

	mu sync.Mutex
	// prog reports the run's progress and what it waits for; nil until
	// the run starts.
	prog     *progress
	trace    []TraceEntry
	cut      map[string]int // calls cut from the trace, by traceKind
	counts   map[string]int // by decision
	run      *approvals     // remembered for the run (or its session)
	conn     *approvals     // remembered for the connection
	declined approvals      // what the human said no to in this run
	// questions counts the questions put to the human in this run;
	// unasked, once set, says why no more are (a question was dismissed,
	// went unanswered, or could not be asked).
	questions int
	unasked   string
	// vaultKey and vaultEnds name a session's tokenized values (Vault).
	vaultKey  string
	vaultEnds time.Time
	// span is the run's code's (bridge.exec), once it runs (Span).
	span trace.SpanContext
}

// progress is the run's progress, nil until the run starts.
func (rs *runState) progress() *progress {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.prog
}

// Vault names the tokenized values of the run's session, which a remote
// MCP proxy keeps for the session's runs until ends; "" outside a session.
func (rs *runState) Vault() (key string, ends time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.vaultKey, rs.vaultEnds
}

var (
	_ toolhost.Run        = (*runState)(nil)
	_ toolhost.Originator = (*runState)(nil)
	_ toolhost.TracedRun  = (*runState)(nil)
)

// Client is the MCP client the run is for, as it named itself: "name
// version", or "" when it gave no name.
func (rs *runState) Client() string {
	if rs.session == nil {
		return ""
	}
	p := rs.session.InitializeParams()
	if p == nil || p.ClientInfo == nil || p.ClientInfo.Name == "" {
		return ""
	}
	return strings.TrimSpace(p.ClientInfo.Name + " " + p.ClientInfo.Version)
}

// Record adds one call to the trace.
func (rs *runState) Record(e TraceEntry) {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.counts == nil {
		rs.counts = map[string]int{}
	}
	rs.counts[e.Decision]++
	if e.Error != "" && e.Decision == "allowed" {
		rs.counts["failed"]++
	}
	if len(rs.trace) >= maxTraceEntries {
		// Full: a call that went through makes room for one that did not.
		drop := -1
		if traceKind(e) != "allowed" {
			for i := len(rs.trace) - 1; i >= 0; i-- {
				if traceKind(rs.trace[i]) == "allowed" {
					drop = i
					break
				}
			}
		}
		if rs.cut == nil {
			rs.cut = map[string]int{}
		}
		if drop < 0 {
			rs.cut[traceKind(e)]++
			return
		}
		rs.cut["allowed"]++
		rs.trace = slices.Delete(rs.trace, drop, drop+1)
	}
	rs.trace = append(rs.trace, e)
}

// summary is the trace, the calls cut from it (in all, and by kind), and
// a short line for the agent when it helps: when a call was denied, asked
// about or failed ("" when every call went through).
func (rs *runState) summary() (entries []TraceEntry, cut int, cutBy map[string]int, line string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, c := range rs.cut {
		cut += c
	}
	n := len(rs.trace) + cut
	var parts []string
	for _, k := range []string{"denied", "asked", "refused", "failed"} {
		if c := rs.counts[k]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, k))
		}
	}
	if len(parts) > 0 {
		line = fmt.Sprintf("[%d tool call%s: %s]", n, plural(n), strings.Join(parts, ", "))
	}
	if cut > 0 {
		cutBy = maps.Clone(rs.cut)
	}
	return append([]TraceEntry(nil), rs.trace...), cut, cutBy, line
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// approvals are the calls the human allowed and asked to remember: by
// server and tool.
type approvals struct {
	mu sync.Mutex
	m  map[[2]string]bool
}

// maxApprovals bounds what one scope remembers.
const maxApprovals = 1000

func (a *approvals) has(server, tool string) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[[2]string{server, tool}]
}

func (a *approvals) add(server, tool string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[[2]string]bool{}
	}
	if len(a.m) < maxApprovals {
		a.m[[2]string{server, tool}] = true
	}
}

// scopeFor is the approvals a "remember" answer goes to under the
// policy's tools.ask_remember, and the words that name it; nil when
// answers are not remembered.
func (rs *runState) scopeFor(remember string) (*approvals, string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch remember {
	case policy.RememberConnection:
		if rs.conn != nil {
			return rs.conn, "for the rest of this connection"
		}
		fallthrough
	case policy.RememberRun:
		if rs.run == nil {
			rs.run = &approvals{}
		}
		return rs.run, "for the rest of this " + rs.scope
	}
	return nil, ""
}

// Ask asks the run's human about q: [proxy.Asker]. A run asks one question
// at a time: a human answers one, and code calling from many threads must
// not flood the client; the others wait their turn within their own
// timeout, and a "remember" answer lets them through.
func (rs *runState) Ask(ctx context.Context, q proxy.Question) proxy.Answer {
	select {
	case rs.turn <- struct{}{}:
		defer func() { <-rs.turn }()
	case <-ctx.Done():
		return proxy.Answer{How: proxy.TimedOut}
	}
	mem, words := rs.scopeFor(q.Remember)
	rs.mu.Lock()
	conn := rs.conn
	rs.mu.Unlock()
	if mem.has(q.Server, q.Tool) || (q.Remember == policy.RememberConnection && conn.has(q.Server, q.Tool)) {
		return proxy.Answer{Allow: true, How: proxy.Remembered}
	}
	// A "no" holds for the rest of the run: code looping on the tool must
	// not wear the human down with prompts.
	if rs.declined.has(q.Server, q.Tool) {
		return proxy.Answer{How: proxy.Remembered}
	}
	if rs.mode == askNone {
		return proxy.Answer{How: proxy.Unsupported}
	}
	if why := rs.mayAsk(q.Limit); why != "" {
		return proxy.Answer{How: proxy.Withheld, Why: why}
	}
	params := elicitParams(q, words)
	rs.mu.Lock()
	prog := rs.prog
	rs.mu.Unlock()
	if prog != nil {
		prog.wait(fmt.Sprintf("waiting for the user's approval of %s/%s", q.Server, q.Tool))
		defer prog.wait("")
	}
	var res *mcp.ElicitResult
	var err error
	switch rs.mode {
	case askInCall:
		res, err = rs.session.Elicit(ctx, params)
	case askResult:
		res, err = rs.askByResult(ctx, params, q.Timeout)
	}
	// A question dismissed, left unanswered or that could not be asked
	// ends the asking for the rest of the run: asking again would wear
	// the human down, or wait out ask_timeout again for no one.
	switch {
	case ctx.Err() != nil:
		rs.stopAsking("the user did not answer an earlier question of this run within " + formatWait(q.Timeout))
		return proxy.Answer{How: proxy.TimedOut}
	case err != nil || res == nil:
		rs.stopAsking("the client failed to ask an earlier question of this run")
		return proxy.Answer{How: proxy.Failed}
	case res.Action == "accept":
		if remember, _ := res.Content["remember"].(bool); remember && mem != nil {
			mem.add(q.Server, q.Tool)
		}
		return proxy.Answer{Allow: true, How: proxy.Accepted}
	case res.Action == "decline":
		rs.declined.add(q.Server, q.Tool)
		return proxy.Answer{How: proxy.Declined}
	}
	rs.stopAsking("the user dismissed an earlier question of this run")
	return proxy.Answer{How: proxy.Cancelled}
}

// mayAsk counts a question about to be put to the human, or says why it
// may not be: the run's asking ended, or it put limit questions (0: no
// limit).
func (rs *runState) mayAsk(limit int) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case rs.unasked != "":
		return rs.unasked
	case limit > 0 && rs.questions >= limit:
		return fmt.Sprintf("this run already asked the user %d times (tools.ask_max_per_run)", rs.questions)
	}
	rs.questions++
	return ""
}

// stopAsking ends the asking for the rest of the run, saying why.
func (rs *runState) stopAsking(why string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.unasked == "" {
		rs.unasked = why
	}
}

// elicitParams is the form the human answers: a message naming the call
// and why the policy asks, and, when answers may be remembered, one
// checkbox to remember it (words says for how long).
func elicitParams(q proxy.Question, words string) *mcp.ElicitParams {
	msg := fmt.Sprintf("Code run by the agent wants to call the tool %q of the MCP server %q.\nWhy the policy asks: %s\nArguments: %s\nAllow this call? (No answer within %s denies it.)",
		q.Tool, q.Server, q.Reason, q.Arguments, formatWait(q.Timeout))
	schema := `{"type":"object","properties":{}}`
	if words != "" {
		title, _ := json.Marshal(fmt.Sprintf("Also allow %s/%s %s", q.Server, q.Tool, words))
		schema = `{"type":"object","properties":{"remember":{"type":"boolean","title":` + string(title) + `,"default":false}}}`
	}
	return &mcp.ElicitParams{Message: msg, RequestedSchema: json.RawMessage(schema)}
}

func formatWait(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%d min", int(d/time.Minute))
	}
	return fmt.Sprintf("%d s", int(d/time.Second))
}

// errNoAnswer is an askResult question whose answering call brought no
// elicitation result for it.
var errNoAnswer = errors.New("no answer")

// newRunState is the state of a call's run: how its client can be asked
// (not at all when the policy in force never asks), and what its human
// allowed for the rest of the connection.
func (s *Server) newRunState(req *mcp.CallToolRequest, inSession bool) *runState {
	rs := &runState{mode: clientAskMode(req), session: req.Session, scope: "run", turn: make(chan struct{}, 1)}
	if inSession {
		rs.scope = "session"
	}
	var pol *policy.Policy
	if s.opts.Policy != nil {
		pol = s.opts.Policy.Current().Policy
	}
	if !pol.MayAsk() {
		rs.mode = askNone
	}
	if rs.mode == askResult {
		rs.pending = make(chan *pendingAsk)
	}
	if pol != nil && pol.Tools.AskRemember == policy.RememberConnection {
		rs.conn = s.approved.of(req.Session)
	}
	return rs
}

// connApprovals are, for each client connection, the calls its human
// allowed for the rest of it; forgotten when the connection ends.
type connApprovals struct {
	mu sync.Mutex
	m  map[*mcp.ServerSession]*approvals
}

// of is the approvals of client's connection (nil for no client).
func (c *connApprovals) of(client *mcp.ServerSession) *approvals {
	if client == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.m[client]; a != nil {
		return a
	}
	if c.m == nil {
		c.m = map[*mcp.ServerSession]*approvals{}
	}
	a := &approvals{}
	c.m[client] = a
	go func() {
		_ = client.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.m, client)
	}()
	return a
}
