package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Sessions through the run seam, against a fake engine whose instances run
// scripted code and keep an interpreter's state across a session's calls,
// as the runner does.

// scripted is Instances whose instances run scripts: per line, "k=v" sets
// k, "?k" prints k (or <none>), "crash" loses the interpreter, "sleep N"
// sleeps N ms, cut short when the instance is closed.
type scripted struct {
	mu        sync.Mutex
	instances []*scriptedInstance
}

func (s *scripted) Acquire(_ context.Context, _ sandbox.Limits, runID string) (sandbox.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := &scriptedInstance{id: runID, vars: map[string]string{}, closing: make(chan struct{})}
	s.instances = append(s.instances, i)
	return i, nil
}

// acquired is how many instances were made, and how many of them are
// closed.
func (s *scripted) acquired() (n, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range s.instances {
		if i.Closed() {
			closed++
		}
	}
	return len(s.instances), closed
}

// awaitClosed waits until n instances were made and closed of them are
// closed (an ended session's container is removed in the background).
func (s *scripted) awaitClosed(t *testing.T, n, closed int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		gotN, gotClosed := s.acquired()
		if gotN == n && gotClosed == closed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d instances, %d closed; want %d and %d", gotN, gotClosed, n, closed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type scriptedInstance struct {
	id      string
	closing chan struct{}

	mu      sync.Mutex
	vars    map[string]string
	execs   int
	kept    bool
	closed  bool
	running bool
}

func (i *scriptedInstance) Exec(ctx context.Context, x sandbox.ExecRequest) (sandbox.Result, error) {
	i.mu.Lock()
	switch {
	case i.closed:
		i.mu.Unlock()
		return sandbox.Result{}, errors.New("this sandbox instance was closed")
	case i.running:
		i.mu.Unlock()
		return sandbox.Result{}, errors.New("this sandbox instance is running code")
	case i.execs > 0 && !(i.kept && x.Session):
		i.mu.Unlock()
		return sandbox.Result{}, errors.New("this sandbox instance already ran code")
	}
	i.execs++
	i.running, i.kept = true, false
	i.mu.Unlock()
	var out strings.Builder
	kept := x.Session
	for _, line := range strings.Split(x.Code, "\n") {
		switch {
		case line == "crash":
			kept = false
		case strings.HasPrefix(line, "sleep "):
			ms, _ := strconv.Atoi(strings.TrimPrefix(line, "sleep "))
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-i.closing:
				i.mu.Lock()
				i.running = false
				i.mu.Unlock()
				return sandbox.Result{}, errors.New("the container was removed")
			case <-ctx.Done():
			}
		case strings.HasPrefix(line, "?"):
			i.mu.Lock()
			v, ok := i.vars[line[1:]]
			i.mu.Unlock()
			if !ok {
				v = "<none>"
			}
			fmt.Fprintln(&out, v)
		case strings.Contains(line, "="):
			k, v, _ := strings.Cut(line, "=")
			i.mu.Lock()
			i.vars[k] = v
			i.mu.Unlock()
		}
	}
	i.mu.Lock()
	i.running, i.kept = false, kept
	i.mu.Unlock()
	return sandbox.Result{RunID: x.RunID, Status: sandbox.StatusOK, Stdout: out.String()}, nil
}

func (i *scriptedInstance) Kept() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.kept && !i.closed
}

func (i *scriptedInstance) Closed() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.closed
}

func (i *scriptedInstance) Close(context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.closed {
		i.closed = true
		close(i.closing)
	}
	return nil
}

// sessionServer is a Server with sessions on (the policy's sessions
// section gets extra) over a scripted engine.
func sessionServer(t *testing.T, extra string) (*Server, *scripted) {
	t.Helper()
	eng := &scripted{}
	s, _, _ := policyServer(t, "sessions:\n  enabled: true\n"+extra, nil)
	s.opts.Instances = eng
	return s, eng
}

// runIn calls run_python with code in session (none if ""), with
// timeout_seconds when timeout > 0.
func runIn(t *testing.T, cs *mcp.ClientSession, session, code string, timeout int) Output {
	t.Helper()
	args := map[string]any{"code": code}
	if session != "" {
		args["session"] = session
	}
	if timeout > 0 {
		args["timeout_seconds"] = timeout
	}
	_, out := call(t, cs, args)
	return out
}

func TestSessionKeepsItsStateAndNoOneElseSeesIt(t *testing.T) {
	s, eng := sessionServer(t, "")
	cs, other := connect(t, s, nil), connectAs(t, s, "other", nil)
	if out := runIn(t, cs, "a", "x=41", 0); out.Status != "ok" || out.SessionEnded != "" || !out.SessionNew {
		t.Fatalf("first call of a: %+v", out)
	}
	if out := runIn(t, cs, "a", "?x", 0); out.Stdout != "41\n" || out.SessionNew {
		t.Fatalf("second call of a: %+v", out)
	}
	// The principal's next connection (a reconnect, a stateless call)
	// finds its session.
	if out := runIn(t, connect(t, s, nil), "a", "?x", 0); out.Stdout != "41\n" {
		t.Fatalf("a from the principal's next connection: %+v", out)
	}
	for what, out := range map[string]Output{
		"a run without session": runIn(t, cs, "", "?x", 0),
		"session b":             runIn(t, cs, "b", "?x", 0),
		"another principal's b": runIn(t, other, "c", "?x", 0),
	} {
		if out.Stdout != "<none>\n" {
			t.Errorf("%s sees a's state: %+v", what, out)
		}
	}
	// Another principal naming a is refused, saying so: it neither runs
	// in it, nor ends it, nor gets an empty session a of its own.
	for what, args := range map[string]map[string]any{
		"a call":           {"session": "a", "code": "?x"},
		"a reset":          {"session": "a", "code": "", "reset": true},
		"a reset and code": {"session": "a", "code": "?x", "reset": true},
	} {
		res, out := call(t, other, args)
		if !res.IsError || out.Status != "invalid" || !strings.Contains(out.Message, `session "a" is held by another principal`) || out.Stdout != "" {
			t.Errorf("%s of another principal's session: %+v", what, out)
		}
	}
	if out := runIn(t, cs, "a", "?x", 0); out.Stdout != "41\n" {
		t.Fatalf("a after another principal's tries: %+v", out)
	}
	if n := s.Sessions(); n != 3 {
		t.Errorf("%d sessions, want 3 (a, b, the other's c)", n)
	}
	// a, the run without session, b, c: four instances; the run's is
	// closed.
	if n, closed := eng.acquired(); n != 4 || closed != 1 {
		t.Errorf("%d instances acquired, %d closed; want 4 and 1", n, closed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n, closed := eng.acquired(); closed != n {
		t.Errorf("after shutdown, %d of %d instances are closed", closed, n)
	}
}

// sessions.max_per_principal bounds one principal's sessions; the others
// still get theirs up to sessions.max.
func TestSessionsPerPrincipal(t *testing.T) {
	s, _ := sessionServer(t, "  max: 3\n  max_per_principal: 2\n")
	cs, other := connect(t, s, nil), connectAs(t, s, "other", nil)
	runIn(t, cs, "a", "x=1", 0)
	runIn(t, cs, "b", "x=1", 0)
	res, out := call(t, cs, map[string]any{"session": "c", "code": "x=1"})
	if !res.IsError || out.Status != "busy" || !strings.Contains(out.Message, "you hold 2 sessions, the most one principal may (sessions.max_per_principal)") {
		t.Fatalf("a principal's third session: %+v", out)
	}
	if out := runIn(t, other, "c", "x=1", 0); out.Status != "ok" {
		t.Fatalf("another principal's first session: %+v", out)
	}
	res, out = call(t, other, map[string]any{"session": "d", "code": "x=1"})
	if !res.IsError || !strings.Contains(out.Message, "(sessions.max)") {
		t.Fatalf("a session past sessions.max: %+v", out)
	}
}

func TestSessionEndsOnItsLimitsAndLostInterpreter(t *testing.T) {
	s, eng := sessionServer(t, "  max_calls: 2\n")
	cs := connect(t, s, nil)
	runIn(t, cs, "a", "x=1", 0)
	if out := runIn(t, cs, "a", "?x", 0); out.Stdout != "1\n" || !strings.Contains(out.SessionEnded, "sessions.max_calls") {
		t.Fatalf("the second of two calls: %+v", out)
	}
	if out := runIn(t, cs, "a", "?x", 0); out.Stdout != "<none>\n" || out.SessionEnded != "" {
		t.Fatalf("a call after the session ended: %+v", out)
	}
	// A lost interpreter ends the session with the call that lost it.
	if out := runIn(t, cs, "a", "x=2\ncrash", 0); out.Status != "ok" || !strings.Contains(out.SessionEnded, "its interpreter is gone") {
		t.Fatalf("the call that lost the interpreter: %+v", out)
	}
	eng.awaitClosed(t, 2, 2) // both sessions' containers, removed in the background
	if n := s.Sessions(); n != 0 {
		t.Errorf("%d sessions left", n)
	}
}

func TestSessionResetAndBusy(t *testing.T) {
	s, eng := sessionServer(t, "")
	cs := connect(t, s, nil)
	runIn(t, cs, "a", "x=1", 0)
	if r, out := call(t, cs, map[string]any{"code": "", "session": "a", "reset": true}); out.Status != "ok" || !strings.Contains(text(r), "ended") {
		t.Fatalf("reset: %+v", out)
	}
	if out := runIn(t, cs, "a", "?x", 0); out.Stdout != "<none>\n" {
		t.Fatalf("after reset: %+v", out)
	}
	// One call at a time: a second call waits for the first, then is
	// answered busy at its own timeout.
	done := make(chan Output)
	go func() { done <- runIn(t, cs, "a", "sleep 3000", 0) }()
	time.Sleep(100 * time.Millisecond)
	if out := runIn(t, cs, "a", "?x", 1); out.Status != statusBusy || !strings.Contains(out.Message, "still running another call") {
		t.Fatalf("a second call while the first runs: %+v", out)
	}
	// A reset under a running call cuts it short: the call says its
	// session ended, not that the engine failed.
	if _, out := call(t, cs, map[string]any{"code": "", "session": "a", "reset": true}); out.Status != "ok" {
		t.Fatalf("reset of a busy session: %+v", out)
	}
	out := <-done
	if out.Status != string(sandbox.StatusCancelled) || out.Message != "the session ended during the call" || !strings.Contains(out.SessionEnded, "reset by the agent") {
		t.Fatalf("the call cut short by reset: %+v", out)
	}
	eng.awaitClosed(t, 2, 2)
}

// reset: true with code ends the session, then runs the code in a new
// one of that name, and the result says both.
func TestSessionResetWithCode(t *testing.T) {
	s, eng := sessionServer(t, "")
	cs := connect(t, s, nil)
	runIn(t, cs, "a", "x=1", 0)
	r, out := call(t, cs, map[string]any{"code": "?x\ny=2", "session": "a", "reset": true})
	want := `reset: session "a" was ended, its state is lost; the code ran in a new session "a"`
	if out.Status != "ok" || out.Stdout != "<none>\n" || out.SessionEnded != want || !strings.Contains(text(r), "["+want+"]") {
		t.Fatalf("reset with code: %+v\n%s", out, text(r))
	}
	// The new session goes on.
	if out := runIn(t, cs, "a", "?y", 0); out.Stdout != "2\n" || out.SessionEnded != "" {
		t.Fatalf("the call after: %+v", out)
	}
	// No session of that name: the result says so too.
	_, out = call(t, cs, map[string]any{"code": "z=3", "session": "b", "reset": true})
	if want := `reset: there was no session "b" to end; the code ran in a new session "b"`; out.SessionEnded != want {
		t.Fatalf("reset with code of no session: %+v", out)
	}
	// The new session's own end is said after the reset's.
	_, out = call(t, cs, map[string]any{"code": "crash", "session": "b", "reset": true})
	if !strings.HasPrefix(out.SessionEnded, `reset: session "b" was ended, its state is lost; the code ran in a new session "b"; then session "b" ended: its interpreter is gone`) {
		t.Fatalf("reset with code that loses the interpreter: %+v", out)
	}
	eng.awaitClosed(t, 4, 3)
}

// A call that restores starts a new session: when another call opened
// that name after the restore's check, the restore does not join it (its
// archive would land in the live session's /tmp) but is refused.
func TestSessionFreshDoesNotJoin(t *testing.T) {
	ss := newSessions(zerolog.Nop())
	cfg := policy.Sessions{Enabled: true, Max: 4, MaxLifetime: time.Hour, IdleTimeout: time.Hour, MaxCalls: 10}
	key := sessionKey{name: "a"}
	eng := &scripted{}
	start := func(id string) (sandbox.Instance, error) {
		return eng.Acquire(context.Background(), sandbox.Limits{}, id)
	}
	s, err := ss.open(context.Background(), key, cfg, time.Second, false, start)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.inst.Exec(context.Background(), sandbox.ExecRequest{Code: "x=1", Session: true, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	ss.done(s, cfg, true)
	if _, err := ss.open(context.Background(), key, cfg, time.Second, true, start); !errors.Is(err, errSessionExists) {
		t.Fatalf("a fresh open of an existing session: %v, want errSessionExists", err)
	}
	if n, _ := eng.acquired(); n != 1 {
		t.Errorf("%d instances started, want 1", n)
	}
	// A name that is free is opened fresh.
	if s, err := ss.open(context.Background(), sessionKey{name: "b"}, cfg, time.Second, true, start); err != nil {
		t.Fatal(err)
	} else {
		ss.done(s, cfg, true)
	}
	if err := ss.closeAll(context.Background()); err != nil {
		t.Fatal(err)
	}
}
