package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// ToolName is the bridge's only tool.
const ToolName = "run_python"

// The tool's description teaches the agent the tool in as few tokens as do
// the job: the whole tools/list answer must stay at or under 250 tokens,
// 320 with sessions and snapshots on, 345 with a few mounts and the
// datascience image too (TestToolsListTokenBudget). It tells the truth of this bridge:
// whether calls may keep state, where the policy's folders are, what the
// image holds beyond Python.
const (
	descFresh = "Run Python 3 in a fresh isolated container: no network, " +
		"read-only except /tmp, nothing kept between calls."
	// descSessions replaces descFresh when the policy enables sessions;
	// descSnapshots when snapshots are on too.
	descSessions = "Run Python 3 in an isolated container: no network, read-only except /tmp; " +
		"a fresh one per call unless calls share a session (reset:true ends it)."
	descSnapshots = "Run Python 3 in an isolated container: no network, read-only except /tmp; " +
		"fresh per call unless calls share a session (reset:true ends it, snapshot:label saves it, restore:label forks it)."
	// descOutput says what comes back, and how files get in: by value or
	// by URI (an earlier result's bridge:// file, an upstream resource).
	descOutput = " Top-level await works. " +
		"Returns what it prints (print only what you need) and files in /tmp/outputs; " +
		"inputs [{path,text|base64|uri}] arrive read-only in /tmp/inputs."
	// descDataScience is said when the image holds the datascience
	// variant's packages (docs/images.md).
	descDataScience = " numpy, pandas, matplotlib, scipy, sklearn; `mcp_tools.show(fig)` saves a chart."
	descTools       = " `import mcp_tools` reaches the user's MCP servers: search(q), call(server, tool, **args), help()."
)

// maxListedMounts is how many of the policy's mounts the description
// names; it counts the others.
const maxListedMounts = 3

// toolInfo is what the tool's definition states of this bridge; it
// follows the policy in force.
type toolInfo struct {
	maxTimeout  time.Duration
	sessions    bool
	snapshots   bool     // sessions may be saved and restored
	mounts      []string // the container paths of the policy's mounts
	dataScience bool
}

// describe is the tool's description for ti.
func describe(ti toolInfo) string {
	var b strings.Builder
	switch {
	case ti.snapshots:
		b.WriteString(descSnapshots)
	case ti.sessions:
		b.WriteString(descSessions)
	default:
		b.WriteString(descFresh)
	}
	b.WriteString(descOutput)
	if ti.dataScience {
		b.WriteString(descDataScience)
	}
	b.WriteString(descTools)
	if n := len(ti.mounts); n > 0 {
		b.WriteString(" Data: ")
		b.WriteString(strings.Join(ti.mounts[:min(n, maxListedMounts)], ", "))
		if n > maxListedMounts {
			fmt.Fprintf(&b, " +%d more", n-maxListedMounts)
		}
		b.WriteByte('.')
	}
	return b.String()
}

const instructions = "Use run_python to compute, transform and filter data in a sandbox, and to use the tools of the user's other MCP servers from code; print only the result you need."

// Status values beyond the sandbox's own.
const (
	statusBusy        = "busy"        // no slot and no queue place
	statusInvalid     = "invalid"     // bad arguments
	statusUnavailable = "unavailable" // the sandbox could not run the code
)

// runPythonTool is the tool's definition, with compact hand-written schemas
// (the SDK emits them byte for byte). With sessions, it takes session
// (its name's rule as a pattern) and reset too. The session's name is
// mirrored into the request's Mcp-Param-Session header by 2026-07-28
// clients (x-mcp-header, SEP-2243), so that a balancer can keep a
// stateless client's calls of one session on the bridge that holds it.
func runPythonTool(ti toolInfo) *mcp.Tool {
	props := fmt.Sprintf(`"code":{"type":"string"},"timeout_seconds":{"type":"integer","minimum":1,"maximum":%d},"inputs":{"type":"array"}`, int(ti.maxTimeout/time.Second))
	if ti.sessions {
		pattern, _ := json.Marshal(sessionNameRule)
		props += `,"session":{"type":"string","pattern":` + string(pattern) + `,"x-mcp-header":"Session"},"reset":{"type":"boolean"}`
		if ti.snapshots {
			props += `,"snapshot":{"type":"string"},"restore":{"type":"string"}`
		}
	}
	input := `{"type":"object","properties":{` + props + `},"required":["code"],"additionalProperties":false}`
	return &mcp.Tool{
		Name:         ToolName,
		Description:  describe(ti),
		InputSchema:  json.RawMessage(input),
		OutputSchema: json.RawMessage(outputSchema),
		// No annotations: the SDK would send readOnlyHint and
		// idempotentHint false (the defaults) with any, 22 tokens, and
		// openWorldHint false is untrue once upstream servers exist.
	}
}

// outputSchema names the fields an agent reads first; the others
// (duration_ms, stdout_cut, stderr_cut, message, artifacts, session_ended,
// tool_calls...)
// are in structuredContent all the same, and in the README: listing them
// all cost 31 of the tools/list budget's tokens.
const outputSchema = `{"type":"object","properties":{"status":{"type":"string"},"exit_code":{"type":"integer"},"stdout":{"type":"string"},"stderr":{"type":"string"}},"required":["status"]}`

// Output is the structuredContent of every run_python result.
type Output struct {
	Status     string `json:"status"`
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
	StdoutCut  int64  `json:"stdout_cut,omitempty"`
	StderrCut  int64  `json:"stderr_cut,omitempty"`
	// Message says, in one line, why a run did not succeed.
	Message string `json:"message,omitempty"`
	// SessionEnded says that the call's session ended, and why.
	SessionEnded string `json:"session_ended,omitempty"`
	// SessionNew says that the call started its session: nothing of
	// earlier calls is in it.
	SessionNew bool `json:"session_new,omitempty"`
	// Artifacts are the files the code left in /tmp/outputs: returned
	// (inline or by reference) or not, and why.
	Artifacts []ArtifactOutput `json:"artifacts,omitempty"`
	// ArtifactsUnlisted counts the files not returned beyond those listed.
	ArtifactsUnlisted int `json:"artifacts_unlisted,omitempty"`
	// ToolCalls are the run's tool calls, in the order they were answered:
	// at most maxTraceEntries, the denied, asked, refused and failed ones
	// kept before those that went through. ToolCallsCut counts the calls
	// left out, and ToolCallsCutBy counts them by kind ("allowed",
	// "failed", "denied", "asked", "refused").
	ToolCalls []TraceEntry `json:"tool_calls,omitempty"`
	// Snapshot is what the call's snapshot argument saved; Restored, the
	// snapshot its session started from.
	Snapshot       *SnapshotOutput `json:"snapshot,omitempty"`
	Restored       *RestoredOutput `json:"restored,omitempty"`
	ToolCallsCut   int             `json:"tool_calls_cut,omitempty"`
	ToolCallsCutBy map[string]int  `json:"tool_calls_cut_by,omitempty"`
}

// input is what a call may pass. Decoding is strict: unknown fields and
// wrong types are input errors.
type input struct {
	Code           *string          `json:"code"`
	TimeoutSeconds *json.RawMessage `json:"timeout_seconds"`
	Session        *json.RawMessage `json:"session"`
	Reset          *json.RawMessage `json:"reset"`
	Inputs         *json.RawMessage `json:"inputs"`
	Snapshot       *json.RawMessage `json:"snapshot"`
	Restore        *json.RawMessage `json:"restore"`
}

// callArgs are a call's checked arguments.
type callArgs struct {
	code    string
	timeout time.Duration
	asked   bool   // timeout_seconds was given
	session string // "" without a session
	reset   bool
	// resetEnded says that reset ended a session of that name before the
	// code ran (resetNote).
	resetEnded bool
	// inputs are the files to put in /tmp/inputs, checked but not yet
	// resolved (inputs.go).
	inputs []inputSpec
	// snapshot saves the session's state under this label once the call
	// ends; restore starts the (new) session from the one of that label.
	snapshot, restore string
}

// parseInput checks a call's arguments: the timeout is defTimeout unless
// the call gave timeout_seconds; session and reset are refused unless
// sessions are on.
func (s *Server) parseInput(raw json.RawMessage, defTimeout, maxTimeout time.Duration, sessions bool) (a callArgs, err error) {
	code, timeout, asked, in, err := s.parseBase(raw, defTimeout, maxTimeout, sessions)
	if err != nil {
		return a, err
	}
	a = callArgs{code: code, timeout: timeout, asked: asked}
	given := func(r *json.RawMessage) bool { return r != nil && string(*r) != "null" }
	if given(in.Inputs) {
		if a.inputs, err = parseInputs(*in.Inputs); err != nil {
			return a, err
		}
	}
	if (given(in.Session) || given(in.Reset)) && !sessions {
		return a, errors.New("session and reset need sessions, which this bridge's policy does not enable (sessions.enabled); call without them: each call then runs in a fresh container")
	}
	if given(in.Session) {
		if err := json.Unmarshal(*in.Session, &a.session); err != nil {
			return a, fmt.Errorf("session must be a string naming the session, got %s", *in.Session)
		}
		if !sessionNamePattern.MatchString(a.session) {
			return a, fmt.Errorf("session %q is not a session name: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", a.session)
		}
	}
	if given(in.Reset) {
		if err := json.Unmarshal(*in.Reset, &a.reset); err != nil {
			return a, fmt.Errorf("reset must be true or false, got %s", *in.Reset)
		}
		if a.reset && a.session == "" {
			return a, errors.New("reset ends a session: pass the session's name with it")
		}
	}
	if given(in.Snapshot) || given(in.Restore) {
		if err := s.parseLabels(in, &a, sessions); err != nil {
			return a, err
		}
	}
	if a.reset && strings.TrimSpace(a.code) == "" && len(a.inputs) > 0 {
		return a, errors.New("inputs go with code: a reset without code runs nothing to read them")
	}
	if strings.TrimSpace(a.code) == "" && !a.reset {
		return a, errors.New("code is empty: pass the Python source to run")
	}
	return a, nil
}

// parseBase decodes the arguments and checks code and timeout_seconds.
func (s *Server) parseBase(raw json.RawMessage, defTimeout, maxTimeout time.Duration, sessions bool) (code string, timeout time.Duration, asked bool, in input, err error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return "", 0, false, in, errors.New(`missing arguments: pass {"code": "<python source>"}`)
	}
	takes := "code, timeout_seconds and inputs"
	if sessions {
		takes = "code, timeout_seconds, inputs, session and reset"
		if s.snapshotsOn() {
			takes = "code, timeout_seconds, inputs, session, reset, snapshot and restore"
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var ute *json.UnmarshalTypeError
		switch {
		case errors.As(err, &ute) && ute.Field == "code":
			return "", 0, false, in, fmt.Errorf("code must be a string of Python source, got %s", ute.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return "", 0, false, in, fmt.Errorf("%s: run_python takes only %s", strings.TrimPrefix(err.Error(), "json: "), takes)
		}
		return "", 0, false, in, fmt.Errorf("arguments must be a JSON object with code (string) and optional timeout_seconds (integer): %v", err)
	}
	if in.Code == nil {
		return "", 0, false, in, errors.New("missing required argument code (the Python source to run)")
	}
	if most, key := s.maxCode(); int64(len(*in.Code)) > most {
		return "", 0, false, in, fmt.Errorf("code is %d bytes, over the limit of %s (%s): send less code, and have it read large data from a tool, a mount or a file rather than carry it inline",
			len(*in.Code), units.FormatSize(most), key)
	}
	timeout = defTimeout
	if in.TimeoutSeconds != nil && string(*in.TimeoutSeconds) != "null" {
		var f float64
		if err := json.Unmarshal(*in.TimeoutSeconds, &f); err != nil || f != math.Trunc(f) {
			return "", 0, false, in, fmt.Errorf("timeout_seconds must be a whole number of seconds, got %s", *in.TimeoutSeconds)
		}
		maxS := int64(maxTimeout / time.Second)
		if f < 1 || f > float64(maxS) {
			return "", 0, false, in, fmt.Errorf("timeout_seconds must be between 1 and %d, got %s", maxS, *in.TimeoutSeconds)
		}
		timeout, asked = time.Duration(f)*time.Second, true
	}
	return *in.Code, timeout, asked, in, nil
}

// handleRunPython is the tool's handler: runPython, in its span. A call
// refused as a protocol error (the bridge is draining) ends its span as
// such.
func (s *Server) handleRunPython(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, span := s.startCall(ctx, req)
	res, err := s.runPython(ctx, req)
	endCall(span, res)
	return res, err
}

// runPython answers one call of run_python.
func (s *Server) runPython(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	start := time.Now()
	leave, err := s.enter(req.Params.RequestState != "")
	if err != nil {
		return nil, err
	}
	defer leave()
	if req.Params.RequestState != "" {
		// The answers to a detached run's questions (detached.go).
		return s.resume(ctx, req, start), nil
	}
	// The input is checked against the policy in force now; the run is
	// pinned to the policy in force when it gets a slot (below).
	limits, maxTimeout := s.limits(nil)
	scfg, sessionsOn := s.sessionConfig()
	a, err := s.parseInput(req.Params.Arguments, limits.Timeout, maxTimeout, sessionsOn)
	if err != nil {
		return failure(statusInvalid, "invalid arguments: "+err.Error(), start), nil
	}
	key := sessionKey{owner: s.principal(req), name: a.session}
	if a.session != "" {
		if err := s.sessions.check(key); err != nil {
			return failure(statusInvalid, err.Error(), start), nil
		}
	}
	if a.reset {
		existed, err := s.sessions.reset(key)
		if err != nil {
			return failure(statusInvalid, err.Error(), start), nil
		}
		a.resetEnded = existed
		if strings.TrimSpace(a.code) == "" {
			msg := fmt.Sprintf("session %q ended: its container is removed", a.session)
			if !existed {
				msg = fmt.Sprintf("there was no session %q to end", a.session)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}},
				StructuredContent: Output{Status: string(sandbox.StatusOK), DurationMS: time.Since(start).Milliseconds(), Message: msg}}, nil
		}
	}
	rs := s.newRunState(req, a.session != "")
	run := func(ctx context.Context) *mcp.CallToolResult {
		return s.execute(ctx, req, a, key, scfg, rs, start)
	}
	if tp, ok := s.taskPolicy(req); ok {
		rs.task = true
		return s.startTask(ctx, req, rs, tp, a.timeout, run, start), nil
	}
	if rs.mode == askResult {
		return s.startDetached(ctx, req, rs, run), nil
	}
	return run(ctx), nil
}

// resetNote is what session_ended says of a call with reset: true and
// code (the reset ends the session, the code then runs in a new one of
// that name): "" without reset. ran says the code was run.
func resetNote(a callArgs, ran bool) string {
	switch {
	case !a.reset:
		return ""
	case a.resetEnded && ran:
		return fmt.Sprintf("reset: session %q was ended, its state is lost; the code ran in a new session %q", a.session, a.session)
	case a.resetEnded:
		return fmt.Sprintf("reset: session %q was ended, its state is lost; the code did not run", a.session)
	case ran:
		return fmt.Sprintf("reset: there was no session %q to end; the code ran in a new session %q", a.session, a.session)
	}
	return ""
}

// noteSessionEnded adds note to a result's session_ended, and as a line
// to its text.
func noteSessionEnded(res *mcp.CallToolResult, note string) *mcp.CallToolResult {
	if note == "" {
		return res
	}
	if o, ok := res.StructuredContent.(Output); ok {
		o.SessionEnded = note
		res.StructuredContent = o
	}
	res.Content = append(res.Content, &mcp.TextContent{Text: "[" + note + "]"})
	return res
}

// artifactLimits are the limits on the files a run sends back: the
// run's policy's, else [Options]'.
func (s *Server) artifactLimits(snap *policy.Snapshot) artifacts.Limits {
	if snap == nil {
		return s.opts.Artifacts
	}
	return ArtifactsFrom(snap.Policy.Artifacts)
}

// ArtifactsFrom are the limits on a run's files that a policy sets.
func ArtifactsFrom(a policy.Artifacts) artifacts.Limits {
	return artifacts.Limits{MaxFiles: a.MaxFiles, MaxBytesInline: a.MaxBytesInline, MaxBytesTotal: a.MaxBytesTotal,
		ByReference: a.ByReference, MaxBytesStored: a.MaxBytesStored, MaxBytesRead: a.MaxBytesRead}
}

// failure is the result of a call that never ran code.
func failure(status, msg string, start time.Time) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: msg}},
		StructuredContent: Output{Status: status, ExitCode: -1, DurationMS: time.Since(start).Milliseconds(), Message: msg},
	}
}

// render turns a run's Result into the tool's result: compact text for the
// agent (stdout; stderr under a label; a status line only when the run did
// not succeed) and the same facts as structuredContent.
func render(r sandbox.Result) *mcp.CallToolResult {
	out := Output{
		Status:     string(r.Status),
		ExitCode:   r.ExitCode,
		Stdout:     r.Stdout,
		Stderr:     r.Stderr,
		DurationMS: r.Duration.Milliseconds(),
		StdoutCut:  r.StdoutCut,
		StderrCut:  r.StderrCut,
		Message:    r.Message,
	}
	var b strings.Builder
	b.WriteString(r.Stdout)
	if r.StdoutCut > 0 {
		fmt.Fprintf(&b, "\n[stdout cut: %d more bytes not shown]", r.StdoutCut)
	}
	if r.Stderr != "" || r.StderrCut > 0 {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("stderr:\n")
		b.WriteString(r.Stderr)
		if r.StderrCut > 0 {
			fmt.Fprintf(&b, "\n[stderr cut: %d more bytes not shown]", r.StderrCut)
		}
	}
	ok := r.Status == sandbox.StatusOK
	if !ok {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "[%s: %s]", r.Status, r.Message)
	}
	text := b.String()
	if text == "" {
		text = "(no output)"
	}
	return &mcp.CallToolResult{
		IsError:           !ok,
		Content:           []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: out,
	}
}

// progress sends notifications/progress while a run goes on, when the
// client asked for them with a progress token: the elapsed seconds, and the
// latest line of output as the message.
type progress struct {
	mu   sync.Mutex
	last string
	// partial is the line being written; open says it has no newline yet.
	partial string
	open    bool
	done    chan struct{}
	wg      sync.WaitGroup
	active  bool
	every   time.Duration
	start   time.Time
	// waiting, while set, is what the run waits for (an answer).
	waiting string
}

// wait says what the run waits for, "" when it no longer does.
func (p *progress) wait(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting = what
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest, every time.Duration, start time.Time, on bool) *progress {
	p := &progress{done: make(chan struct{}), every: every, start: start}
	if !on {
		// A detached run: each call waiting on it sends its own (sendFor).
		p.active = true
		return p
	}
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return p
	}
	p.active = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.send(ctx, req.Session, token, p.done)
	}()
	return p
}

// send notifies progress to ss for token every p.every until stop is
// closed or ctx ends.
func (p *progress) send(ctx context.Context, ss *mcp.ServerSession, token any, stop <-chan struct{}) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.mu.Lock()
			msg := p.last
			if p.waiting != "" {
				msg = p.waiting
			}
			p.mu.Unlock()
			elapsed := time.Since(p.start).Seconds()
			if msg == "" {
				msg = fmt.Sprintf("running for %.0f s", elapsed)
			}
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      math.Round(elapsed*10) / 10,
				Message:       msg,
			})
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// sendFor sends progress for the call req, when it asked for it, until
// the returned stop is called: for each call that waits on a detached run.
func (p *progress) sendFor(ctx context.Context, req *mcp.CallToolRequest) (stop func()) {
	token := req.Params.GetProgressToken()
	if p == nil || token == nil || req.Session == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.send(ctx, req.Session, token, done)
	}()
	return func() { close(done); wg.Wait() }
}

// output remembers the latest line of output, joining a line that arrives
// in pieces.
func (p *progress) output(_, data string) {
	if !p.active {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A chunk that does not start after a newline continues the line the
	// previous one left open.
	if !p.open || strings.Contains(strings.TrimRight(data, "\r\n"), "\n") {
		p.partial = ""
	}
	if i := strings.LastIndexByte(strings.TrimRight(data, "\r\n"), '\n'); i >= 0 {
		data = data[i+1:]
	}
	p.partial = lastLine(p.partial + data)
	p.open = !strings.HasSuffix(data, "\n")
	if p.partial != "" {
		p.last = p.partial
	}
	if !p.open {
		p.partial = ""
	}
}

// message is what a poll of the run is told it does: what it waits for,
// else its latest line of output, else how long it has run.
func (p *progress) message() string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.waiting != "":
		return p.waiting
	case p.last != "":
		return p.last
	}
	return fmt.Sprintf("running for %.0f s", time.Since(p.start).Seconds())
}

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
}

// lastLine returns the last non-empty line of s, at most 200 bytes.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\r\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		n := 200
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	return s
}
