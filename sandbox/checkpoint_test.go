package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// fakeCheckpointer is a fake engine that checkpoints. Its containers run
// a session's runner in Go (parkingRunner): "k=v" sets k, "?k" prints
// it; a checkpoint saves its variables and spare parks in the folder it
// is given and ends the container; a restore starts another runner from
// them, which, once woken, reads the token file the bridge wrote in the
// run folder and says hello with resumed.
type fakeCheckpointer struct {
	*fakeRuntime
	parks int // the hello.parks of a runner started fresh

	// How the runners misbehave: park is how one answers park ("" parked
	// and hangs up, "other" another frame, "silent" nothing, "open" parked
	// without hanging up); hello how a restored one says hello ("" resumed,
	// "fresh" without resumed, "wrong first" with a wrong token first).
	park, hello   string
	checkpointErr error
	restoreErr    error
	// restoreLeaves makes a failing Restore leave its container behind.
	restoreLeaves bool
	// onCheckpoint, onRestore and onWake run at the end of each
	// Checkpoint, Restore and Wake; resumed gets a value once a restored
	// runner said hello.
	onCheckpoint, onRestore, onWake func()
	resumed                         chan struct{}

	cmu         sync.Mutex
	states      map[string]*runnerState  // each run folder's runner, its state
	wake        map[string]chan struct{} // each restored container's Wake
	tokens      []string                 // what the restored runners read in the token file
	checkpoints int
}

type runnerState struct {
	Vars  map[string]string
	Parks int
}

const fakeTokenFile = ".relay-token"

func newCheckpointer(parks int) *fakeCheckpointer {
	cp := &fakeCheckpointer{parks: parks, states: map[string]*runnerState{}, wake: map[string]chan struct{}{}, resumed: make(chan struct{}, 1)}
	cp.fakeRuntime = newFake(func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState {
		st := &runnerState{Vars: map[string]string{}, Parks: cp.parks}
		cp.cmu.Lock()
		cp.states[filepath.Dir(sock)] = st
		cp.cmu.Unlock()
		r, err := dialRunner(ctx, sock)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		h := hello(token)
		h["parks"] = st.Parks
		if r.send(h) != nil {
			return ExitState{ExitCode: 1}
		}
		return cp.serve(ctx, r, st)
	})
	return cp
}

var _ Checkpointer = (*fakeCheckpointer)(nil)

// serve plays a session's runner on r until its connection ends or it
// parked.
func (cp *fakeCheckpointer) serve(ctx context.Context, r *fakeRunner, st *runnerState) ExitState {
	for {
		m, err := r.recv()
		if err != nil {
			return ExitState{}
		}
		switch m["type"] {
		case "exec":
			var out strings.Builder
			cp.cmu.Lock()
			for _, line := range strings.Split(m["code"].(string), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					st.Vars[k] = v
				} else if k, ok := strings.CutPrefix(line, "?"); ok {
					fmt.Fprintln(&out, st.Vars[k])
				}
			}
			cp.cmu.Unlock()
			_ = r.send(map[string]any{"type": "stdout", "data": out.String()})
			_ = r.send(exitOK())
		case "park":
			return cp.parkRunner(ctx, r, st)
		}
	}
}

// parkRunner answers park as cp.park says, and waits for the checkpoint
// (or a kill) to end the container.
func (cp *fakeCheckpointer) parkRunner(ctx context.Context, r *fakeRunner, st *runnerState) ExitState {
	switch cp.park {
	case "":
		cp.cmu.Lock()
		st.Parks--
		cp.cmu.Unlock()
		_ = r.send(map[string]any{"type": "parked"})
		r.conn.Close()
	case "other":
		_ = r.send(map[string]any{"type": "stdout", "data": "not parked"})
	case "open":
		_ = r.send(map[string]any{"type": "parked"})
	}
	<-ctx.Done()
	return ExitState{ExitCode: 137}
}

func (cp *fakeCheckpointer) Checkpoint(_ context.Context, id, dir string) error {
	if cp.checkpointErr != nil {
		return cp.checkpointErr
	}
	c, err := cp.get(id)
	if err != nil {
		return err
	}
	cp.cmu.Lock()
	b, err := json.Marshal(cp.states[c.spec.Mounts[0].Source])
	cp.checkpoints++
	cp.cmu.Unlock()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
		return err
	}
	c.cancel()
	<-c.done
	if cp.onCheckpoint != nil {
		cp.onCheckpoint()
	}
	return nil
}

func (cp *fakeCheckpointer) Restore(_ context.Context, id string, spec ContainerSpec, dir string) error {
	ctx, cancel := context.WithCancel(context.Background())
	c := &fakeContainer{spec: spec, cancel: cancel, done: make(chan struct{})}
	if cp.restoreErr != nil {
		if cp.restoreLeaves {
			cp.add(id, c)
			cancel()
			close(c.done)
		}
		return cp.restoreErr
	}
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return err
	}
	st := &runnerState{}
	if err := json.Unmarshal(b, st); err != nil {
		return err
	}
	runDir := spec.Mounts[0].Source
	wake := make(chan struct{})
	cp.cmu.Lock()
	cp.states[runDir], cp.wake[id] = st, wake
	cp.cmu.Unlock()
	cp.add(id, c)
	go func() {
		c.state = cp.resumeRunner(ctx, runDir, wake, st)
		close(c.done)
	}()
	if cp.onRestore != nil {
		cp.onRestore()
	}
	return nil
}

func (cp *fakeCheckpointer) add(id string, c *fakeContainer) {
	cp.fakeRuntime.mu.Lock()
	cp.containers[id] = c
	cp.fakeRuntime.mu.Unlock()
}

// resumeRunner is a restored runner: parked until woken, then back on
// the relay with the token the bridge wrote.
func (cp *fakeCheckpointer) resumeRunner(ctx context.Context, runDir string, wake chan struct{}, st *runnerState) ExitState {
	select {
	case <-wake:
	case <-ctx.Done():
		return ExitState{ExitCode: 137}
	}
	b, err := os.ReadFile(filepath.Join(runDir, fakeTokenFile))
	if err != nil {
		return ExitState{ExitCode: 3}
	}
	token := string(b)
	cp.cmu.Lock()
	cp.tokens = append(cp.tokens, token)
	parks := st.Parks
	cp.cmu.Unlock()
	sock := filepath.Join(runDir, "relay.sock")
	if cp.hello == "wrong first" {
		bad, err := dialRunner(ctx, sock)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		_ = bad.send(map[string]any{"type": "hello", "version": relay.Version, "token": "not-the-token", "python": "3.test", "resumed": true, "parks": parks})
		if _, err := bad.recv(); err == nil {
			return ExitState{ExitCode: 2} // the bridge answered an impostor
		}
	}
	r, err := dialRunner(ctx, sock)
	if err != nil {
		return ExitState{ExitCode: 1}
	}
	h := hello(token)
	h["parks"] = parks
	if cp.hello != "fresh" {
		h["resumed"] = true
	}
	if r.send(h) != nil {
		return ExitState{ExitCode: 1}
	}
	select {
	case cp.resumed <- struct{}{}:
	default:
	}
	return cp.serve(ctx, r, st)
}

func (cp *fakeCheckpointer) Wake(_ context.Context, id string) error {
	cp.cmu.Lock()
	defer cp.cmu.Unlock()
	w, ok := cp.wake[id]
	if !ok {
		return fmt.Errorf("wake %s: %w", id, ErrNotFound)
	}
	close(w)
	delete(cp.wake, id)
	if cp.onWake != nil {
		cp.cmu.Unlock()
		cp.onWake()
		cp.cmu.Lock()
	}
	return nil
}

func (cp *fakeCheckpointer) WriteToken(runDir, token string) error {
	return os.WriteFile(filepath.Join(runDir, fakeTokenFile), []byte(token), 0o644)
}

func (cp *fakeCheckpointer) TokenFile() string { return fakeTokenFile }

func (cp *fakeCheckpointer) CheckpointTag(_ context.Context, image string) (string, error) {
	return "fake 1; image " + image, nil
}

// ids lists the engine's containers.
func (cp *fakeCheckpointer) ids() []string {
	cs, _ := cp.List(context.Background(), nil)
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

// settled is cp.ids() once it holds n containers, or after 5 s: a
// checkpointed container is removed in the background.
func (cp *fakeCheckpointer) settled(n int) []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids := cp.ids()
		if len(ids) == n || time.Now().After(deadline) {
			return ids
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// memoryExecutor is an Executor on cp whose waits are short.
func memoryExecutor(t *testing.T, cp *fakeCheckpointer) *Executor {
	t.Helper()
	ex := newTestExecutor(t, cp, ExecutorOptions{StartTimeout: 3 * time.Second})
	ex.parkTimeout = time.Second
	return ex
}

// session starts a session on ex and runs code in it.
func session(t *testing.T, ex *Executor, code string) *Container {
	t.Helper()
	inst, err := ex.Start(context.Background(), testLimits(), "sess")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inst.Close(context.Background()) })
	sessionExec(t, inst, code)
	return inst
}

// sessionExec runs code as a session's call of inst: its stdout.
func sessionExec(t *testing.T, inst Instance, code string) string {
	t.Helper()
	res, err := inst.Exec(context.Background(), ExecRequest{RunID: "r", Code: code, Timeout: 5 * time.Second, OutputBytes: 1 << 10, Session: true})
	if err != nil || res.Status != StatusOK {
		t.Fatalf("exec %q: %+v, %v", code, res, err)
	}
	if !inst.Kept() {
		t.Fatalf("exec %q: the session was not kept", code)
	}
	return res.Stdout
}

// closeAndCheck closes inst and checks that nothing of it is left.
func closeAndCheck(t *testing.T, cp *fakeCheckpointer, inst *Container) {
	t.Helper()
	if err := inst.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids := cp.settled(0); len(ids) != 0 {
		t.Fatalf("containers left after Close: %v", ids)
	}
	if _, err := os.Stat(inst.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run folder left after Close: %v", err)
	}
}

// SaveMemory in place: the session goes on in a sandbox restored from
// the checkpoint, a new container; the old one is removed, the token
// file too, and the runner's spare parks count down.
func TestSaveMemoryGoesOn(t *testing.T) {
	cp := newCheckpointer(2)
	ex := memoryExecutor(t, cp)
	inst := session(t, ex, "x=41")
	old := inst.id
	tag, err := inst.MemoryTag(context.Background())
	if err != nil || tag != "fake 1; image test-image" {
		t.Fatalf("MemoryTag: %q, %v", tag, err)
	}
	if err := inst.SaveMemory(context.Background(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if !inst.Kept() {
		t.Fatal("the session was not kept after SaveMemory")
	}
	if inst.id == old {
		t.Fatalf("the session's container is still %s", old)
	}
	if ids := cp.settled(1); len(ids) != 1 || ids[0] != inst.id {
		t.Fatalf("containers %v, want only the restored %s", ids, inst.id)
	}
	if _, err := os.Stat(filepath.Join(inst.dir, fakeTokenFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the token file is left after the handshake: %v", err)
	}
	if len(cp.tokens) != 1 || cp.tokens[0] == "" {
		t.Fatalf("the restored runner read the tokens %q", cp.tokens)
	}
	if p := inst.conn.hello.Parks; p != 1 || !inst.conn.hello.Resumed {
		t.Fatalf("hello after the restore: parks %d, resumed %v; want 1 and true", p, inst.conn.hello.Resumed)
	}
	if out := sessionExec(t, inst, "?x\ny=2"); out != "41\n" {
		t.Fatalf("the restored session printed %q", out)
	}
	// Again, from the restored one: its last spare park.
	if err := inst.SaveMemory(context.Background(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if out := sessionExec(t, inst, "?x\n?y"); out != "41\n2\n" {
		t.Fatalf("the twice restored session printed %q", out)
	}
	// No spare park left: files only, and the session lives on.
	if _, err := inst.MemoryTag(context.Background()); !errors.Is(err, ErrNoParks) {
		t.Fatalf("MemoryTag without parks: %v", err)
	}
	if err := inst.SaveMemory(context.Background(), t.TempDir()); !errors.Is(err, ErrNoParks) {
		t.Fatalf("SaveMemory without parks: %v", err)
	}
	if !inst.Kept() || sessionExec(t, inst, "?x") != "41\n" {
		t.Fatal("the session did not go on after ErrNoParks")
	}
	closeAndCheck(t, cp, inst)
}

// An engine that cannot checkpoint says so, and the session lives on.
func TestSaveMemoryNoCheckpoint(t *testing.T) {
	ex := newTestExecutor(t, newFake(newCheckpointer(4).behave), ExecutorOptions{})
	inst := session(t, ex, "x=1")
	if _, err := inst.MemoryTag(context.Background()); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("MemoryTag: %v", err)
	}
	if err := inst.SaveMemory(context.Background(), t.TempDir()); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("SaveMemory: %v", err)
	}
	if _, err := ex.Restore(context.Background(), testLimits(), "again", t.TempDir()); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("Restore: %v", err)
	}
	if sessionExec(t, inst, "?x") != "1\n" {
		t.Fatal("the session did not go on")
	}
}

// SaveMemory of an instance that holds no idle session is refused.
func TestSaveMemoryNoSession(t *testing.T) {
	cp := newCheckpointer(4)
	ex := memoryExecutor(t, cp)
	inst, err := ex.Start(context.Background(), testLimits(), "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if err := inst.SaveMemory(context.Background(), t.TempDir()); err == nil {
		t.Fatal("SaveMemory of an instance that ran nothing")
	}
	closeAndCheck(t, cp, inst)
	if cp.checkpoints != 0 {
		t.Fatalf("%d checkpoints", cp.checkpoints)
	}
}

// Whatever fails in a save, the session ends (but for what the caller can
// tell apart), and Close leaves nothing.
func TestSaveMemoryFails(t *testing.T) {
	tests := []struct {
		name string
		set  func(cp *fakeCheckpointer)
		want string
	}{
		{"park answered with another frame", func(cp *fakeCheckpointer) { cp.park = "other" }, "stdout frame in answer to park"},
		{"park not answered", func(cp *fakeCheckpointer) { cp.park = "silent" }, "parking the session's runner"},
		{"parked without hanging up", func(cp *fakeCheckpointer) { cp.park = "open" }, "went on after parked"},
		{"checkpoint fails", func(cp *fakeCheckpointer) { cp.checkpointErr = errors.New("disk full") }, "disk full"},
		{"restore fails", func(cp *fakeCheckpointer) { cp.restoreErr = errors.New("bad image") }, "bad image"},
		{"restore fails and leaves its container", func(cp *fakeCheckpointer) {
			cp.restoreErr, cp.restoreLeaves = errors.New("bad image"), true
		}, "bad image"},
		{"hello without resumed", func(cp *fakeCheckpointer) { cp.hello = "fresh" }, "could not go on"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp := newCheckpointer(4)
			tt.set(cp)
			ex := memoryExecutor(t, cp)
			inst := session(t, ex, "x=1")
			start := time.Now()
			err := inst.SaveMemory(context.Background(), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SaveMemory: %v; want an error saying %q", err, tt.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("SaveMemory took %s", d)
			}
			if inst.Kept() {
				t.Fatal("the session is kept after a failed save")
			}
			closeAndCheck(t, cp, inst)
		})
	}
}

// A restored runner that first says hello with a wrong token is refused,
// and the right one is taken.
func TestSaveMemoryWrongTokenFirst(t *testing.T) {
	cp := newCheckpointer(4)
	cp.hello = "wrong first"
	ex := memoryExecutor(t, cp)
	inst := session(t, ex, "x=1")
	if err := inst.SaveMemory(context.Background(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if sessionExec(t, inst, "?x") != "1\n" {
		t.Fatal("the session did not go on")
	}
	closeAndCheck(t, cp, inst)
}

// Close while a save runs: the save fails, and nothing is left, whether
// Close comes during the checkpoint, the restore, or once the restored
// runner said hello (the bridge took its connection, or its container's
// end, first: both are tried).
func TestSaveMemoryClosed(t *testing.T) {
	for _, when := range []string{"checkpoint", "restore", "hello", "hello", "hello", "hello", "hello", "hello"} {
		t.Run(when, func(t *testing.T) {
			cp := newCheckpointer(4)
			ex := memoryExecutor(t, cp)
			inst := session(t, ex, "x=1")
			closing := func() { inst.Close(context.Background()) }
			switch when {
			case "checkpoint":
				cp.onCheckpoint = closing
			case "restore":
				cp.onRestore = closing
			case "hello":
				cp.onWake = func() {
					<-cp.resumed
					time.Sleep(20 * time.Millisecond) // the handshake
					closing()
				}
			}
			if err := inst.SaveMemory(context.Background(), t.TempDir()); err == nil {
				t.Fatal("SaveMemory went on after Close")
			}
			if inst.Kept() {
				t.Fatal("a closed session is kept")
			}
			closeAndCheck(t, cp, inst)
		})
	}
}

// Executor.Restore starts a session from a checkpoint; it fails clean.
func TestExecutorRestore(t *testing.T) {
	cp := newCheckpointer(4)
	ex := memoryExecutor(t, cp)
	inst := session(t, ex, "x=7")
	dir := t.TempDir()
	if err := inst.SaveMemory(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	// Twice from the one checkpoint: two sessions, each its own (a fork).
	var forks []*Container
	for _, name := range []string{"forka", "forkb"} {
		f, err := ex.Restore(context.Background(), testLimits(), name, dir)
		if err != nil {
			t.Fatal(err)
		}
		if !f.Kept() || f.Closed() {
			t.Fatalf("a restored session: kept %v, closed %v", f.Kept(), f.Closed())
		}
		forks = append(forks, f)
	}
	if sessionExec(t, forks[0], "?x\nx=8") != "7\n" || sessionExec(t, forks[1], "?x") != "7\n" || sessionExec(t, inst, "?x") != "7\n" {
		t.Fatal("a fork does not have the session's state, or shares it")
	}
	for _, f := range forks {
		if f.conn.hello.Parks != 3 {
			t.Errorf("a fork's hello says parks %d, want the checkpointed runner's 3", f.conn.hello.Parks)
		}
		if err := f.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	closeAndCheck(t, cp, inst)

	for name, set := range map[string]func(){
		"restore fails": func() { cp.restoreErr, cp.restoreLeaves = errors.New("bad image"), true },
		"hello fresh":   func() { cp.restoreErr, cp.hello = nil, "fresh" },
		"no checkpoint": func() { cp.restoreErr, cp.hello, dir = nil, "", t.TempDir() },
	} {
		set()
		if f, err := ex.Restore(context.Background(), testLimits(), "failed", dir); err == nil {
			f.Close(context.Background())
			t.Fatalf("%s: Restore did not fail", name)
		}
		if ids := cp.ids(); len(ids) != 0 {
			t.Fatalf("%s: containers left: %v", name, ids)
		}
		if left, _ := os.ReadDir(ex.runRoot); len(left) != 0 {
			t.Fatalf("%s: %d run folders left", name, len(left))
		}
	}
}

// Restore refuses, as Start does, to run where the engine cannot enforce
// the limits, unless told to.
func TestExecutorRestoreUnenforced(t *testing.T) {
	cp := newCheckpointer(4)
	cp.enforce = Enforcement{Memory: true, Reason: "no cpu controller"}
	ex := memoryExecutor(t, cp)
	if _, err := ex.Restore(context.Background(), testLimits(), "unenforced", t.TempDir()); !errors.Is(err, ErrLimitsNotEnforced) {
		t.Fatalf("Restore: %v", err)
	}
}
