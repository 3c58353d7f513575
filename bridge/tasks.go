package bridge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/policy"
)

// A client on MCP 2026-07-28 that declares the Tasks extension
// (io.modelcontextprotocol/tasks) in a call's capabilities gets, for a
// run still going after tasks.after, a task handle instead of the result:
// the run goes on detached (detached.go), its questions become the task's
// inputRequests, answered by tasks/update, and tasks/get reports its state
// and then its result. The go-sdk has no Tasks code: tasks/get,
// tasks/update and tasks/cancel are custom methods, and a receiving
// middleware swaps the call's placeholder result for the CreateTaskResult.

// TasksExtension names the MCP Tasks extension in capabilities.
const TasksExtension = "io.modelcontextprotocol/tasks"

// taskPollInterval is how often a client is told to poll tasks/get.
const taskPollInterval = time.Second

// Task states (the extension's).
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskFailed        = "failed"
	taskCancelled     = "cancelled"
)

// task is one run_python call answered by a task handle.
type task struct {
	id      string
	owner   string // the principal that made it
	created time.Time
	timeout time.Duration // the run's

	mu        sync.Mutex
	d         *detached // the run; nil once it ended (its result is kept, not its state)
	updated   time.Time
	status    string
	message   string
	result    *mcp.CallToolResult // once completed
	bytes     int64               // result's, as JSON
	ended     time.Time
	cancelled bool
	expire    *time.Timer // removes it result_ttl after it ended
}

// taskStore holds a Server's tasks.
type taskStore struct {
	// boot names this start of the bridge in every task id, so that a
	// task of an earlier start is told apart from one never made.
	boot string
	// instance names this bridge among others behind one balancer, first
	// in every task id ([Options.Instance]).
	instance string

	mu sync.Mutex
	m  map[string]*task
}

func newTaskStore(instance string) *taskStore {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &taskStore{boot: hex.EncodeToString(b[:]), instance: instance, m: map[string]*task{}}
}

// instancePattern is what an instance name may be ([Options.Instance]).
var instancePattern = regexp.MustCompile(`^[A-Za-z0-9_.]{1,32}$`)

// taskIDPattern is a task id: [INSTANCE-]BOOT RANDOM, in hex.
var taskIDPattern = regexp.MustCompile(`^(?:([A-Za-z0-9_.]{1,32})-)?([0-9a-f]{8})[0-9a-f]{32}$`)

// newID makes an unguessable task id naming this bridge and its start.
func (ts *taskStore) newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := ts.boot + hex.EncodeToString(b[:])
	if ts.instance != "" {
		id = ts.instance + "-" + id
	}
	return id
}

// taskPolicy is the tasks section in force, and whether req may be
// answered by a task: the extension is on, and the call's client
// declares it (MCP 2026-07-28 or later).
func (s *Server) taskPolicy(req *mcp.CallToolRequest) (policy.Tasks, bool) {
	t, on := s.taskSettings()
	if !on || req.ProtocolVersion() < "2026-07-28" {
		return t, false
	}
	return t, declaresTasks(req)
}

// admitTask refuses a new task past the policy's bounds on running tasks,
// saying which.
func (ts *taskStore) admitTask(owner string, t policy.Tasks) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	running, own := 0, 0
	for _, k := range ts.m {
		if k.live() {
			running++
			if k.owner == owner {
				own++
			}
		}
	}
	switch {
	case own >= t.PerPrincipal():
		return fmt.Errorf("%w: you have %d tasks running, the most one principal may (tasks.max_per_principal): wait for one to end, or cancel one (tasks/cancel)", ErrBusy, own)
	case running >= t.Max:
		return fmt.Errorf("%w: %d tasks are running, the most this bridge takes (tasks.max): try again later", ErrBusy, running)
	}
	return nil
}

// live reports whether the task's run goes on.
func (k *task) live() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ended.IsZero()
}

// startTask runs the call detached and answers it with its result if the
// run ends within tasks.after, else with a task handle (a placeholder the
// tools/call middleware turns into the CreateTaskResult).
func (s *Server) startTask(ctx context.Context, req *mcp.CallToolRequest, rs *runState, tp policy.Tasks, timeout time.Duration, run func(context.Context) *mcp.CallToolResult, start time.Time) *mcp.CallToolResult {
	owner := s.principal(req)
	if err := s.tasks.admitTask(owner, tp); err != nil {
		return failure(statusBusy, err.Error(), start)
	}
	d := s.detach(ctx, rs, run)
	stop := d.rs.progress().sendFor(ctx, req)
	wait := time.NewTimer(tp.After)
	select {
	case <-d.done:
		wait.Stop()
		stop()
		return s.collect(d)
	case <-ctx.Done():
		wait.Stop()
		stop()
		d.cancel()
		<-d.done
		return s.collect(d)
	case <-wait.C:
		stop()
	}
	now := time.Now()
	k := &task{id: s.tasks.newID(), owner: owner, created: start, d: d, timeout: timeout, updated: now, status: taskWorking}
	s.tasks.mu.Lock()
	s.tasks.m[k.id] = k
	s.tasks.mu.Unlock()
	s.detached.remove(d) // reached by its task id, not by a requestState
	s.log.Info().Str("task", k.id).Str("principal", owner).Msg("task: the run goes on after its call")
	go s.watchTask(k, tp)
	return &mcp.CallToolResult{StructuredContent: taskHandle{k}}
}

// taskHandle is the placeholder result of a call answered by a task.
type taskHandle struct{ k *task }

// watchTask follows the task's run: its questions make it input_required,
// its end completes it; then it is kept for tasks.result_ttl.
func (s *Server) watchTask(k *task, tp policy.Tasks) {
	d := k.run()
	for {
		select {
		case p := <-d.rs.pending:
			d.mu.Lock()
			d.next++
			id := fmt.Sprintf("approve-%d", d.next)
			d.asked[id] = p
			d.abandon = time.AfterFunc(p.timeout+answerGrace, d.cancel)
			d.mu.Unlock()
			k.set(taskInputRequired, "waiting for the human's answer")
		case <-d.done:
			s.endTask(k, tp)
			return
		}
	}
}

// endTask records the run's end in its task, bounds the principal's kept
// results, and removes the task tasks.result_ttl later.
func (s *Server) endTask(k *task, tp policy.Tasks) {
	res := s.collect(k.run())
	b, _ := json.Marshal(res)
	k.mu.Lock()
	k.d = nil
	k.ended, k.updated = time.Now(), time.Now()
	switch {
	case k.cancelled:
		k.status, k.message = taskCancelled, "cancelled by the client (tasks/cancel)"
	case int64(len(b)) > tp.MaxResultBytes:
		k.status = taskCompleted
		msg := fmt.Sprintf("the run ended, but its result (%d bytes) is larger than one principal's tasks may keep (tasks.max_result_bytes, %d): print less, or hand files back by reference", len(b), tp.MaxResultBytes)
		k.result, k.bytes, k.message = failure(statusInvalid, msg, k.created), int64(len(msg)), msg
	default:
		k.status, k.result, k.bytes = taskCompleted, res, int64(len(b))
		if o, ok := res.StructuredContent.(Output); ok {
			k.message = "the run ended: " + o.Status
		}
	}
	k.expire = time.AfterFunc(tp.ResultTTL, func() { s.tasks.drop(k, "expired") })
	k.mu.Unlock()
	s.log.Info().Str("task", k.id).Str("status", k.status).Int64("result_bytes", k.bytes).Msg("task ended")
	s.tasks.bound(k.owner, tp.MaxResultBytes, s)
}

// bound drops owner's oldest ended tasks while their results together
// are over most bytes.
func (ts *taskStore) bound(owner string, most int64, s *Server) {
	ts.mu.Lock()
	var ended []*task
	total := int64(0)
	for _, k := range ts.m {
		if k.owner != owner {
			continue
		}
		k.mu.Lock()
		if !k.ended.IsZero() {
			ended = append(ended, k)
			total += k.bytes
		}
		k.mu.Unlock()
	}
	ts.mu.Unlock()
	slices.SortFunc(ended, func(a, b *task) int { return a.ended.Compare(b.ended) })
	for _, k := range ended {
		if total <= most {
			return
		}
		total -= k.bytes
		ts.drop(k, "over tasks.max_result_bytes")
		s.log.Info().Str("task", k.id).Str("principal", owner).Msg("task dropped: its principal's kept results are over tasks.max_result_bytes")
	}
}

// drop forgets k.
func (ts *taskStore) drop(k *task, why string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m[k.id] == k {
		delete(ts.m, k.id)
	}
	k.mu.Lock()
	if k.expire != nil {
		k.expire.Stop()
	}
	k.mu.Unlock()
	_ = why
}

// run is the task's run, nil once it ended.
func (k *task) run() *detached {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.d
}

// set changes a running task's state.
func (k *task) set(status, message string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ended.IsZero() {
		k.status, k.message, k.updated = status, message, time.Now()
	}
}

// taskWire is a Task on the wire.
type taskWire struct {
	TaskID         string `json:"taskId"`
	Status         string `json:"status"`
	StatusMessage  string `json:"statusMessage,omitempty"`
	CreatedAt      string `json:"createdAt"`
	LastUpdatedAt  string `json:"lastUpdatedAt"`
	TTLMs          int64  `json:"ttlMs"`
	PollIntervalMs int64  `json:"pollIntervalMs"`
}

// createTaskResult answers a call with a task handle.
type createTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	taskWire
}

// getTaskResult answers tasks/get: the task, and its questions or result.
type getTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
	taskWire
	InputRequests mcp.InputRequestMap `json:"inputRequests,omitempty"`
	Result        *taskResult         `json:"result,omitempty"`
	Error         *jsonrpc.Error      `json:"error,omitempty"`
}

// taskResult is a completed task's result as tasks/get carries it: the
// CallToolResult the call would have been answered with, shaped as
// 2026-07-28 shapes it, resultType "complete" included. The go-sdk stamps
// resultType only on what a handler returns to a 2026-07-28 client, and a
// task's result reaches the client inside tasks/get's instead; the Tasks
// extension's TypeScript client refuses a result without it.
type taskResult struct{ *mcp.CallToolResult }

// MarshalJSON is the result's JSON with resultType "complete".
func (r taskResult) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(r.CallToolResult)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m["resultType"] = json.RawMessage(`"complete"`)
	return json.Marshal(m)
}

// emptyTaskResult acknowledges tasks/update and tasks/cancel.
type emptyTaskResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// taskParams are the params of tasks/get and tasks/cancel.
type taskParams struct {
	mcp.ParamsBase
	TaskID string `json:"taskId"`
}

// updateTaskParams are the params of tasks/update.
type updateTaskParams struct {
	mcp.ParamsBase
	TaskID         string               `json:"taskId"`
	InputResponses mcp.InputResponseMap `json:"inputResponses"`
}

// wire is the task as the extension shows it, with its ttl: from its
// creation to when it will be dropped (for a running task, its run's
// timeout and the result's keep).
func (k *task) wire(ttl time.Duration) taskWire {
	k.mu.Lock()
	defer k.mu.Unlock()
	end := k.created.Add(k.timeout)
	if !k.ended.IsZero() {
		end = k.ended
	}
	return taskWire{TaskID: k.id, Status: k.status, StatusMessage: k.message,
		CreatedAt: k.created.UTC().Format(time.RFC3339Nano), LastUpdatedAt: k.updated.UTC().Format(time.RFC3339Nano),
		TTLMs: end.Add(ttl).Sub(k.created).Milliseconds(), PollIntervalMs: taskPollInterval.Milliseconds()}
}

// taskOf finds the task id names for the principal calling, or says
// clearly why there is none (-32602, as the extension says for an
// unknown id): another principal's task is as unknown as one never made.
func (s *Server) taskOf(ctx context.Context, id string) (*task, error) {
	owner := s.principal(requestOf(ctx))
	s.tasks.mu.Lock()
	k := s.tasks.m[id]
	s.tasks.mu.Unlock()
	if k != nil && k.owner == owner {
		return k, nil
	}
	msg := fmt.Sprintf("no task %q: it ended more than tasks.result_ttl ago, was dropped to keep its principal's results under tasks.max_result_bytes, or never was yours", id)
	if m := taskIDPattern.FindStringSubmatch(id); m != nil {
		switch {
		case m[1] != s.tasks.instance:
			msg = fmt.Sprintf("no task %q here: it was made by bridge instance %q, and this is %q; the balancer must send tasks/* by their Mcp-Name to the bridge that made the task", id, m[1], s.tasks.instance)
		case m[2] != s.tasks.boot:
			msg = fmt.Sprintf("task %q was lost: the bridge restarted since it made it, and its run ended then; run the code again", id)
		}
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

// getTask answers tasks/get.
func (s *Server) getTask(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*getTaskResult, error) {
	k, err := s.taskOf(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	tp, _ := s.taskSettings()
	out := &getTaskResult{ResultType: "complete", taskWire: k.wire(tp.ResultTTL)}
	d := k.run()
	switch {
	case out.Status == taskWorking && d != nil:
		if msg := d.rs.progress().message(); msg != "" {
			out.StatusMessage = msg
		}
	case out.Status == taskInputRequired && d != nil:
		d.mu.Lock()
		out.InputRequests = mcp.InputRequestMap{}
		for id, q := range d.asked {
			out.InputRequests[id] = q.params
		}
		d.mu.Unlock()
	case out.Status == taskCompleted:
		k.mu.Lock()
		if k.result != nil {
			out.Result = &taskResult{k.result}
		}
		k.mu.Unlock()
	}
	return out, nil
}

// updateTask answers tasks/update: the answers to the task's questions.
func (s *Server) updateTask(ctx context.Context, _ *mcp.ServerSession, p *updateTaskParams) (*emptyTaskResult, error) {
	k, err := s.taskOf(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	d := k.run()
	if d == nil {
		return &emptyTaskResult{ResultType: "complete"}, nil // it ended: nothing is outstanding
	}
	d.mu.Lock()
	for id, resp := range p.InputResponses {
		q := d.asked[id]
		if q == nil {
			continue // not outstanding: ignored, as the extension says
		}
		delete(d.asked, id)
		r, _ := resp.(*mcp.ElicitResult)
		q.answer <- r
	}
	outstanding := len(d.asked)
	if outstanding == 0 && d.abandon != nil {
		d.abandon.Stop()
	}
	d.mu.Unlock()
	if outstanding == 0 {
		k.set(taskWorking, "")
	}
	return &emptyTaskResult{ResultType: "complete"}, nil
}

// cancelTask answers tasks/cancel: the run is stopped, its container
// removed, and the task ends cancelled.
func (s *Server) cancelTask(ctx context.Context, _ *mcp.ServerSession, p *taskParams) (*emptyTaskResult, error) {
	k, err := s.taskOf(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	d := k.d
	if k.ended.IsZero() {
		k.cancelled = true
	}
	k.mu.Unlock()
	if d != nil {
		d.cancel()
	}
	s.log.Info().Str("task", k.id).Msg("task: cancel asked")
	return &emptyTaskResult{ResultType: "complete"}, nil
}

// taskSettings are the tasks section in force.
func (s *Server) taskSettings() (policy.Tasks, bool) {
	if s.opts.Policy != nil {
		t := s.opts.Policy.Current().Policy.Tasks
		return t, t.Enabled
	}
	return s.opts.Tasks, s.opts.Tasks.Enabled
}

// requestKey carries a tasks/* request to its handler, whose signature
// (a custom method's) has no room for it: its principal is in it.
type requestKey struct{}

func requestOf(ctx context.Context) mcp.Request {
	r, _ := ctx.Value(requestKey{}).(mcp.Request)
	return r
}

// tasksMiddleware hands tasks/* handlers their request, refuses them to a
// client that does not declare the extension (-32021), and answers a
// call made a task with its CreateTaskResult.
func (s *Server) tasksMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if strings.HasPrefix(method, "tasks/") {
			if !declaresTasks(req) {
				return nil, &jsonrpc.Error{Code: codeMissingCapability, Message: "Missing required client capability: " + TasksExtension,
					Data: json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + TasksExtension + `":{}}}}`)}
			}
			return next(context.WithValue(ctx, requestKey{}, req), method, req)
		}
		res, err := next(ctx, method, req)
		if ctr, ok := res.(*mcp.CallToolResult); ok && err == nil {
			if h, ok := ctr.StructuredContent.(taskHandle); ok {
				tp, _ := s.taskSettings()
				return &createTaskResult{ResultType: "task", taskWire: h.k.wire(tp.ResultTTL)}, nil
			}
		}
		return res, err
	}
}

// codeMissingCapability is MCP's "Missing required client capability".
const codeMissingCapability = -32021

// declaresTasks reports whether req's client declares the extension in
// the request's capabilities.
func declaresTasks(req mcp.Request) bool {
	m := req.GetParams().GetMeta()
	caps, _ := m[mcp.MetaKeyClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[TasksExtension]
	return ok
}

// addTaskMethods registers tasks/get, tasks/update and tasks/cancel.
func (s *Server) addTaskMethods() error {
	if err := mcp.AddReceivingCustomMethod(s.mcp, "tasks/get", s.getTask); err != nil {
		return err
	}
	if err := mcp.AddReceivingCustomMethod(s.mcp, "tasks/update", s.updateTask); err != nil {
		return err
	}
	return mcp.AddReceivingCustomMethod(s.mcp, "tasks/cancel", s.cancelTask)
}
