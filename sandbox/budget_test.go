package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// answeringTools answers every request at once with a result of size
// bytes, or an error with a message of errSize bytes, and counts them.
type answeringTools struct {
	size, errSize int
	answered      atomic.Int64
}

func (a *answeringTools) result(id int64) relay.ToolResult {
	a.answered.Add(1)
	if a.errSize > 0 {
		return relay.ToolResult{ID: id, Error: &relay.ToolError{Type: relay.ErrUpstream, Message: strings.Repeat("e", a.errSize)}}
	}
	js, _ := json.Marshal(strings.Repeat("x", a.size))
	return relay.ToolResult{ID: id, Result: js}
}

func (a *answeringTools) CallTool(_ context.Context, _ string, c relay.ToolCall) relay.ToolResult {
	return a.result(c.ID)
}

func (a *answeringTools) Query(_ context.Context, _ string, q relay.Query) relay.ToolResult {
	return a.result(q.ID)
}

// floodWithoutReading is a runner that sends n queries as fast as the
// bridge takes them and never reads an answer.
func floodWithoutReading(n int, sent chan<- int) func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
	return func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		i := 0
		for ; i < n; i++ {
			if r.send(map[string]any{"type": "query", "id": i + 1, "op": "servers", "args": map[string]any{}}) != nil {
				break
			}
		}
		sent <- i
		<-ctx.Done()
		return ExitState{ExitCode: 137}
	}
}

// The attack of issue 9: queries in a loop, answers never read. The run is
// cut off with a clear message long before its timeout, and the answers the
// bridge computed are bounded by the requests in flight plus what the
// socket's buffer took.
func TestRunnerThatStopsReadingIsCutOff(t *testing.T) {
	sent := make(chan int, 1)
	rt := newFake(floodWithoutReading(1_000_000, sent))
	tools := &answeringTools{size: 64 << 10}
	ex := newTestExecutor(t, rt, ExecutorOptions{Tools: tools})
	ex.writeTimeout = 300 * time.Millisecond
	l := testLimits()
	l.Timeout = 30 * time.Second
	before := runtime.NumGoroutine()
	res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusError || !strings.Contains(res.Message, ErrRunnerStalled.Error()) {
		t.Fatalf("got status %s, message %q; want an error saying the code stopped reading", res.Status, res.Message)
	}
	if res.Duration > 10*time.Second {
		t.Fatalf("the run took %s: the stalled runner was not cut off", res.Duration)
	}
	n := <-sent
	// A unix socket buffers a few hundred KiB: a handful of 64 KiB answers.
	if got := tools.answered.Load(); got > maxRequests+32 {
		t.Fatalf("the bridge computed %d answers for a runner that read none (%d requests in flight allowed)", got, maxRequests)
	}
	if n >= 1_000_000 {
		t.Fatal("the bridge read every request: no backpressure")
	}
	if got := ex.pending.inUse(); got != 0 {
		t.Fatalf("%d bytes of answers still counted as pending after the run", got)
	}
	waitGoroutines(t, before)
	t.Logf("runner sent %d queries, the bridge answered %d, message: %s", n, tools.answered.Load(), res.Message)
}

// waitGoroutines waits for the goroutine count to come back to about n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n+2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the run, %d before", runtime.NumGoroutine(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reads answers and collects them until it has n.
func readAnswers(n int, got chan<- []relay.ToolResult, send func(r *fakeRunner, i int) error) func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
	return func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		var mu sync.Mutex
		var out []relay.ToolResult
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range n {
				m, err := r.recv()
				if err != nil {
					return
				}
				js, _ := json.Marshal(m)
				var tr relay.ToolResult
				_ = json.Unmarshal(js, &tr)
				mu.Lock()
				out = append(out, tr)
				mu.Unlock()
			}
		}()
		for i := range n {
			if send(r, i) != nil {
				break
			}
		}
		<-done
		got <- out
		_ = r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0})
		<-ctx.Done()
		return ExitState{}
	}
}

func sendQuery(r *fakeRunner, i int) error {
	return r.send(map[string]any{"type": "query", "id": i + 1, "op": "servers", "args": map[string]any{}})
}

func TestAnswersAreBounded(t *testing.T) {
	t.Run("error messages are cut", func(t *testing.T) {
		got := make(chan []relay.ToolResult, 1)
		rt := newFake(readAnswers(1, got, sendQuery))
		ex := newTestExecutor(t, rt, ExecutorOptions{Tools: &answeringTools{errSize: 1 << 20}})
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
		if err != nil || res.Status != StatusOK {
			t.Fatalf("got %+v, %v", res, err)
		}
		a := <-got
		if len(a) != 1 || a[0].Error == nil {
			t.Fatalf("answers: %+v", a)
		}
		if m := a[0].Error.Message; len(m) > maxErrorMessage+64 || !strings.Contains(m, "bytes cut") {
			t.Fatalf("an error message of 1 MiB reached the runner as %d bytes", len(m))
		}
	})
	t.Run("an answer over the frame limit is refused, not dropped", func(t *testing.T) {
		got := make(chan []relay.ToolResult, 1)
		rt := newFake(readAnswers(1, got, sendQuery))
		ex := newTestExecutor(t, rt, ExecutorOptions{Tools: &answeringTools{size: relay.MaxFrameSize}})
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
		if err != nil || res.Status != StatusOK {
			t.Fatalf("got %+v, %v", res, err)
		}
		a := <-got
		if len(a) != 1 || a[0].Error == nil || a[0].Error.Type != relay.ErrLimit || a[0].ID != 1 {
			t.Fatalf("answers: %+v", a)
		}
	})
	t.Run("the bridge's buffer for unread answers", func(t *testing.T) {
		got := make(chan []relay.ToolResult, 1)
		rt := newFake(readAnswers(4, got, sendQuery))
		ex := newTestExecutor(t, rt, ExecutorOptions{Tools: &answeringTools{size: 1 << 20}})
		ex.pending.limit = 512 << 10
		res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
		if err != nil || res.Status != StatusOK {
			t.Fatalf("got %+v, %v", res, err)
		}
		a := <-got
		if len(a) != 4 {
			t.Fatalf("%d answers", len(a))
		}
		for _, r := range a {
			if r.Error == nil || r.Error.Type != relay.ErrLimit || !strings.Contains(r.Error.Message, "all runs") {
				t.Fatalf("an answer over the bridge's buffer: %+v", r)
			}
		}
	})
}

func TestHostMeter(t *testing.T) {
	m := NewHostMeter(30 * time.Millisecond)
	var spent atomic.Int64
	m.spent = &spent
	ran, refused := 0, 0
	for range 10 {
		if err := m.Do(func() { ran++; time.Sleep(10 * time.Millisecond) }); err != nil {
			if !errors.Is(err, ErrHostBudget) {
				t.Fatal(err)
			}
			refused++
		}
	}
	// A sleep of 10 ms takes at least that (more on a busy machine): at
	// most 3 pieces fit, and every later one is refused.
	if ran < 1 || ran > 3 || ran+refused != 10 {
		t.Fatalf("ran %d times within 30 ms of 10 ms pieces (refused %d), want 1 to 3", ran, refused)
	}
	if spent.Load() != 1 {
		t.Errorf("the meter counted %d runs out of host time, want 1", spent.Load())
	}
	if m.Used() < 30*time.Millisecond {
		t.Fatalf("used %s", m.Used())
	}
	var none *HostMeter
	if err := none.Do(func() {}); err != nil {
		t.Fatal(err)
	}
	ctx := WithHostMeter(context.Background(), m)
	if HostMeterFrom(ctx) != m || HostMeterFrom(context.Background()) != nil {
		t.Fatal("the meter does not travel in the context")
	}
}

// Tool calls in flight are bounded by the result capacity they reserve:
// 64 MiB a run, so 8 calls at once at 8 MiB a result and 16 at 4 MiB; and
// 128 MiB for all runs of an Executor.
func TestToolCallsReserveResultCapacity(t *testing.T) {
	flood := func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		for i := range 60 {
			if r.send(map[string]any{"type": "tool_call", "id": i + 1, "server": "s", "tool": "t"}) != nil {
				break
			}
		}
		<-ctx.Done()
		return ExitState{ExitCode: 137}
	}
	for _, c := range []struct {
		resultBytes int64
		runs, want  int
	}{
		{0, 1, 8},        // the default, 8 MiB
		{4 << 20, 1, 16}, // a lower result limit lets more run
		{2 << 20, 3, 67}, // 32 a run, but 64 for the Executor, plus each run's own call
	} {
		tools := &blockingTools{}
		ex := newTestExecutor(t, newFake(flood), ExecutorOptions{Tools: tools, ResultBytes: c.resultBytes})
		l := testLimits()
		l.Timeout = 1500 * time.Millisecond
		var wg sync.WaitGroup
		for range c.runs {
			wg.Go(func() {
				if res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l}); err != nil || res.Status != StatusTimeout {
					t.Errorf("got %+v, %v", res, err)
				}
			})
		}
		wg.Wait()
		if tools.most != c.want {
			t.Errorf("result bytes %d, %d run(s): %d tool calls in flight at most, want %d", c.resultBytes, c.runs, tools.most, c.want)
		}
		if n := ex.results.inUse(); n != 0 {
			t.Errorf("%d bytes of result capacity still taken after the runs", n)
		}
	}
}

// slowFastTools holds the calls of tool "slow" until their run ends and
// answers tool "fast" at once, noting how many slow calls were in flight.
type slowFastTools struct {
	mu         sync.Mutex
	slow       int
	slowAtFast []int
}

func (s *slowFastTools) CallTool(ctx context.Context, _ string, call relay.ToolCall) relay.ToolResult {
	s.mu.Lock()
	if call.Tool == "fast" {
		s.slowAtFast = append(s.slowAtFast, s.slow)
		s.mu.Unlock()
		return relay.ToolResult{ID: call.ID, Result: json.RawMessage(`{"content":[]}`)}
	}
	s.slow++
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	s.slow--
	s.mu.Unlock()
	return relay.ToolResult{ID: call.ID, Error: &relay.ToolError{Type: "timeout", Message: "cancelled"}}
}

func (s *slowFastTools) Query(ctx context.Context, runID string, q relay.Query) relay.ToolResult {
	return relay.ToolResult{ID: q.ID, Error: &relay.ToolError{Type: "invalid", Message: "no queries"}}
}

func (s *slowFastTools) slowNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slow
}

// Two runs whose slow calls take every byte of the bridge's shared result
// capacity do not hold up a third run's call: each run's first call in
// flight is its own (issue finding: a third client's echo waited 32.7 s).
func TestOneRunCannotStarveAnother(t *testing.T) {
	tools := &slowFastTools{}
	flood := func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		for i := range 20 {
			if r.send(map[string]any{"type": "tool_call", "id": i + 1, "server": "s", "tool": "slow"}) != nil {
				break
			}
		}
		<-ctx.Done()
		return ExitState{ExitCode: 137}
	}
	one := func(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
		r, err := connectAndExec(ctx, sock, token)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		if r.send(map[string]any{"type": "tool_call", "id": 1, "server": "s", "tool": "fast"}) != nil {
			return ExitState{ExitCode: 1}
		}
		if m, err := r.recv(); err != nil || m["type"] != "tool_result" {
			return ExitState{ExitCode: 1}
		}
		r.send(map[string]any{"type": "exit", "status": "ok", "exit_code": 0, "stdout_cut": 0, "stderr_cut": 0, "files_skipped": 0})
		return ExitState{ExitCode: 0}
	}
	var started atomic.Int32
	rt := newFake(func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState {
		if started.Add(1) <= 2 {
			return flood(ctx, sock, token, spec)
		}
		return one(ctx, sock, token, spec)
	})
	ex := newTestExecutor(t, rt, ExecutorOptions{Tools: tools})
	l := testLimits()
	l.Timeout = 3 * time.Second
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { ex.Run(context.Background(), Request{Code: "pass", Limits: l}) })
	}
	deadline := time.Now().Add(2 * time.Second)
	for tools.slowNow() < 16 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := tools.slowNow(); n != 16 {
		t.Fatalf("%d slow calls in flight, want 16 (8 a run: the shared capacity taken)", n)
	}
	res, err := ex.Run(context.Background(), Request{Code: "pass", Limits: l})
	wg.Wait()
	if err != nil || res.Status != StatusOK {
		t.Fatalf("the third run: %+v, %v", res, err)
	}
	if len(tools.slowAtFast) != 1 || tools.slowAtFast[0] != 16 {
		t.Errorf("slow calls in flight when the third run's call ran: %v, want [16] (it ran while they held the capacity)", tools.slowAtFast)
	}
}
