package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// newTestPool returns a pool of size on an Executor of rt, closed (and
// checked to have removed everything) when the test ends.
func newTestPool(t *testing.T, rt *fakeRuntime, size int, l Limits) *Pool {
	t.Helper()
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	p, err := NewPool(ex, PoolOptions{Size: size, Limits: l, Logger: ex.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return p
}

// waitReady waits until the pool holds n ready containers.
func waitReady(t *testing.T, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Ready != n {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never had %d ready: %+v", n, p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPoolRunsWarmOnceEach(t *testing.T) {
	rt := newFake(pythonRunner(t))
	p := newTestPool(t, rt, 2, testLimits())
	waitReady(t, p, 2)
	for i := range 6 {
		res, err := p.Run(context.Background(), Request{Code: "print('hi')", Limits: testLimits()})
		if err != nil || res.Status != StatusOK || res.Stdout != "hi\n" {
			t.Fatalf("run %d: %+v, %v", i, res, err)
		}
		if !res.Warm {
			t.Fatalf("run %d with a full pool started cold: %+v", i, p.Stats())
		}
		if res.Startup > 2*time.Second {
			t.Errorf("a warm run's startup counts from the container's start: %s", res.Startup)
		}
		waitReady(t, p, 2)
		deadline := time.Now().Add(5 * time.Second)
		for p.Stats().Removing > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		// Each run took a container of its own, which is gone; the two
		// left are new and ready.
		rt.mu.Lock()
		n, created := len(rt.containers), rt.created
		for id, c := range rt.containers {
			if c.spec.Labels[LabelPooled] != "true" {
				t.Errorf("container %s lacks the pooled label: %v", id, c.spec.Labels)
			}
		}
		rt.mu.Unlock()
		if n != 2 || created != 3+i {
			t.Fatalf("after run %d: %d containers, %d created; want 2 and %d", i, n, created, 3+i)
		}
	}
	if s := p.Stats(); s.Hits != 6 || s.Misses != 0 || s.Started < 8 {
		t.Fatalf("stats %+v: want 6 hits, no miss, at least 8 started", s)
	}
}

func TestPoolOtherLimitsStartCold(t *testing.T) {
	rt := newFake(pythonRunner(t))
	p := newTestPool(t, rt, 1, testLimits())
	waitReady(t, p, 1)
	l := testLimits()
	l.Memory *= 2
	res, err := p.Run(context.Background(), Request{Code: "pass", Limits: l})
	if err != nil || res.Status != StatusOK || res.Warm {
		t.Fatalf("%+v, %v: want a cold run", res, err)
	}
	// A timeout or an output cap of its own is not another shape.
	l = testLimits()
	l.Timeout, l.OutputBytes = 3*time.Second, 2048
	res, err = p.Run(context.Background(), Request{Code: "pass", Limits: l})
	if err != nil || res.Status != StatusOK || !res.Warm {
		t.Fatalf("%+v, %v: want a warm run", res, err)
	}
	if s := p.Stats(); s.Hits != 1 || s.Misses != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Every field of Limits but those each Exec sets is part of the shape.
func TestSameShapeCoversLimits(t *testing.T) {
	perExec := map[string]bool{"Timeout": true, "OutputBytes": true}
	base := testLimits()
	typ := reflect.TypeOf(base)
	for i := range typ.NumField() {
		f := typ.Field(i)
		l := testLimits()
		v := reflect.ValueOf(&l).Elem().Field(i)
		switch v.Kind() {
		case reflect.Int, reflect.Int64:
			v.SetInt(v.Int() + 1)
		case reflect.Uint64:
			v.SetUint(v.Uint() + 1)
		case reflect.Float64:
			v.SetFloat(v.Float() + 0.5)
		case reflect.Slice:
			v.Set(reflect.ValueOf([]DataMount{{Host: "/srv/x", Path: "/data/x"}}))
		default:
			t.Fatalf("field %s of kind %s: teach this test and sameShape about it", f.Name, v.Kind())
		}
		if got := sameShape(base, l); got != perExec[f.Name] {
			t.Errorf("changing %s: sameShape = %v, want %v", f.Name, got, perExec[f.Name])
		}
	}
}

func TestPoolConfigureReplacesContainers(t *testing.T) {
	rt := newFake(pythonRunner(t))
	p := newTestPool(t, rt, 2, testLimits())
	waitReady(t, p, 2)
	l := testLimits()
	l.Memory = 256 << 20
	if err := p.Configure(PoolOptions{Size: 2, Limits: l}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rt.mu.Lock()
		n, old := 0, 0
		for _, c := range rt.containers {
			n++
			if c.spec.Memory != l.Memory {
				old++
			}
		}
		rt.mu.Unlock()
		if n == 2 && old == 0 && p.Stats().Ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d containers, %d of the old limits: %+v", n, old, p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	res, err := p.Run(context.Background(), Request{Code: "pass", Limits: l})
	if err != nil || !res.Warm {
		t.Fatalf("%+v, %v: want a warm run with the new limits", res, err)
	}
	// Size 0 empties the pool.
	if err := p.Configure(PoolOptions{Size: 0, Limits: l}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, p, 0)
	res, err = p.Run(context.Background(), Request{Code: "pass", Limits: l})
	if err != nil || res.Warm || res.Status != StatusOK {
		t.Fatalf("%+v, %v: want a cold run", res, err)
	}
}

func TestPoolBacksOffAndRecovers(t *testing.T) {
	rt := newFake(pythonRunner(t))
	rt.createErr = errors.New("engine down")
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	p, err := NewPool(ex, PoolOptions{Size: 1, Limits: testLimits(), Logger: ex.log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Failures == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no failure recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Backoff: not a start per tick.
	time.Sleep(1500 * time.Millisecond)
	if f := p.Stats().Failures; f > 2 {
		t.Errorf("%d failed starts in 1.5 s: no backoff", f)
	}
	_, warm, miss, err := p.take(context.Background(), testLimits(), "r1")
	if err == nil || warm {
		t.Fatalf("acquire with the engine down: warm %v, err %v", warm, err)
	}
	if want := "engine down"; !strings.Contains(miss, want) {
		t.Errorf("miss reason %q does not say %q", miss, want)
	}
	rt.mu.Lock()
	rt.createErr = nil
	rt.mu.Unlock()
	p.mu.Lock()
	p.retryAt = time.Time{} // skip the rest of the backoff
	p.mu.Unlock()
	p.poke()
	waitReady(t, p, 1)
	if s := p.Stats(); s.LastError != "" {
		t.Errorf("last error kept after recovery: %+v", s)
	}
}

// A ready container whose runner went away is not given the code: the run
// goes to a fresh container.
func TestPoolDeadReadyContainer(t *testing.T) {
	real := pythonRunner(t)
	dropped := make(chan struct{}, 8)
	rt := newFake(func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState {
		if spec.Labels[LabelPooled] != "true" {
			return real(ctx, sock, token, spec)
		}
		// Says hello, then drops the connection but lives on.
		r, err := dialRunner(ctx, sock)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		_ = r.send(hello(token))
		time.Sleep(50 * time.Millisecond)
		r.conn.Close()
		dropped <- struct{}{}
		<-ctx.Done()
		return ExitState{ExitCode: 137}
	})
	p := newTestPool(t, rt, 1, testLimits())
	waitReady(t, p, 1)
	<-dropped // the ready container's runner has hung up, not a sleep's guess
	res, err := p.Run(context.Background(), Request{Code: "print(7)", Limits: testLimits()})
	if err != nil || res.Status != StatusOK || res.Stdout != "7\n" || res.Warm {
		t.Fatalf("%+v, %v: want the code run cold", res, err)
	}
}

// A lease closed (a session reset, its client gone) while it starts a
// fresh container for a ready one that had died: the code does not run,
// and nothing is left behind. The fresh container is named for the run
// the lease was acquired for.
func TestPoolLeaseClosedWhileItReplacesADeadContainer(t *testing.T) {
	real := pythonRunner(t)
	dropped := make(chan struct{}, 8)
	coldStarting := make(chan string, 1)
	goOn := make(chan struct{})
	rt := newFake(func(ctx context.Context, sock, token string, spec ContainerSpec) ExitState {
		if spec.Labels[LabelPooled] != "true" {
			coldStarting <- spec.Labels[LabelRunID]
			<-goOn
			return real(ctx, sock, token, spec)
		}
		r, err := dialRunner(ctx, sock)
		if err != nil {
			return ExitState{ExitCode: 1}
		}
		_ = r.send(hello(token))
		time.Sleep(50 * time.Millisecond)
		r.conn.Close()
		dropped <- struct{}{}
		<-ctx.Done()
		return ExitState{ExitCode: 137}
	})
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	p, err := NewPool(ex, PoolOptions{Size: 1, Limits: testLimits(), Logger: ex.log})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p, 1)
	<-dropped

	ctx := context.Background()
	inst, err := p.Acquire(ctx, testLimits(), "session1")
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := inst.Exec(ctx, ExecRequest{RunID: "call1", Code: "print('ran')", Timeout: 10 * time.Second, OutputBytes: 1 << 10, Session: true})
		done <- outcome{res, err}
	}()
	if name := <-coldStarting; name != "session1" {
		t.Errorf("the fresh container is named %q, want the lease's session1", name)
	}
	inst.Close(ctx)
	close(goOn)
	o := <-done
	if !errors.Is(o.err, errLeaseClosed) || o.res.Stdout != "" {
		t.Fatalf("exec after the lease closed: %+v, %v; want errLeaseClosed and nothing run", o.res, o.err)
	}
	if !inst.Closed() || inst.Kept() {
		t.Errorf("closed %v, kept %v", inst.Closed(), inst.Kept())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, _ := rt.List(ctx, nil); len(ids) != 0 {
		t.Fatalf("containers left after the lease and the pool closed: %v", ids)
	}
}

func TestPoolCloseRemovesAllAndLeavesNoGoroutine(t *testing.T) {
	rt := newFake(pythonRunner(t))
	before := runtime.NumGoroutine()
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	p, err := NewPool(ex, PoolOptions{Size: 3, Limits: testLimits(), Logger: ex.log})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p, 3)
	if _, err := p.Run(context.Background(), Request{Code: "pass", Limits: testLimits()}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ids, _ := rt.List(context.Background(), nil); len(ids) != 0 {
		t.Fatalf("containers left after Close: %v", ids)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A session's first call takes a ready container; the pool refills behind
// it, and the session's later calls run in that same container.
func TestPoolServesASessionsFirstCall(t *testing.T) {
	rt := newFake(pythonRunner(t))
	p := newTestPool(t, rt, 1, testLimits())
	waitReady(t, p, 1)
	inst, err := p.Acquire(context.Background(), testLimits(), "sess")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	if s := p.Stats(); s.Hits != 1 || s.Misses != 0 {
		t.Fatalf("stats %+v: want the session served warm", s)
	}
	for i, code := range []string{"x = 41", "print(x + 1)"} {
		res, err := inst.Exec(context.Background(), ExecRequest{RunID: fmt.Sprintf("r%d", i), Code: code, Timeout: 10 * time.Second, OutputBytes: 1 << 10, Session: true})
		if err != nil || res.Status != StatusOK {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
		if i == 1 && res.Stdout != "42\n" {
			t.Fatalf("the second call printed %q", res.Stdout)
		}
	}
	waitReady(t, p, 1) // refilled, while the session keeps its own
}

// mountPool is a pool of size 2, up to max, of containers that mount a
// folder of their own, its pooled creates through a gate, open.
func mountPool(t *testing.T, max int) (p *Pool, rt *fakeRuntime, g *startGate, data string, l Limits) {
	t.Helper()
	data = filepath.Join(t.TempDir(), "sales")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	l = testLimits()
	l.Mounts = []DataMount{{Host: data, Path: "/data/sales"}}
	rt = newFake(pythonRunner(t))
	g = gate(rt, 0)
	g.release()
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	p, err := NewPool(ex, PoolOptions{Size: 2, Max: max, Limits: l, Logger: ex.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	waitReady(t, p, 2)
	return p, rt, g, data, l
}

// replaceDir replaces the folder dir by another of the same path. An
// engine's mount holds the old folder, so its inode number is not reused
// meanwhile: so does an open handle, until the test ends (the fake mounts
// nothing).
func replaceDir(t *testing.T, dir string) {
	t.Helper()
	old, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { old.Close() })
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// A ready container whose mount's host folder was replaced (another inode)
// or deleted since it was made never runs code: the run starts cold, which
// sees the folder as it is now and, when it is gone, fails as a run
// without the pool does; the stale containers are discarded, not kept.
func TestPoolMountReplacedOrDeleted(t *testing.T) {
	p, rt, g, data, l := mountPool(t, 2)
	if res, err := p.Run(context.Background(), Request{Code: "pass", Limits: l}); err != nil || !res.Warm {
		t.Fatalf("a run with the folder in place: %+v, %v; want warm", res, err)
	}
	waitReady(t, p, 2)

	// Replaced. The run or the pool's check (each second) finds it first;
	// either way, the run is cold and says why. The refill waits at the
	// gate until then: a container of the new folder may run the code.
	g.hold()
	replaceDir(t, data)
	res, err := p.Run(context.Background(), Request{Code: "print('ran')", Limits: l})
	if err != nil || res.Status != StatusOK || res.Warm || !strings.Contains(res.Cold, "mount "+data+" was deleted or replaced") {
		t.Fatalf("a run after the folder was replaced: %+v, %v; want a cold run that says why", res, err)
	}
	// The pool refills with containers of the new folder, and runs warm.
	g.release()
	waitReady(t, p, 2)
	if res, err := p.Run(context.Background(), Request{Code: "pass", Limits: l}); err != nil || !res.Warm {
		t.Fatalf("a run once the pool refilled: %+v, %v; want warm", res, err)
	}
	waitReady(t, p, 2)
	before := p.Stats()

	// Deleted: every run fails as a cold one does, naming the folder.
	if err := os.Remove(data); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		res, err := p.Run(context.Background(), Request{Code: "print('ran')", Limits: l})
		if err == nil || !strings.Contains(err.Error(), "the policy's mount "+data+" → /data/sales: the host folder no longer exists") || res.Stdout != "" {
			t.Fatalf("run %d after the folder was deleted: %+v, %v; want the cold path's error", i, res, err)
		}
	}
	after := p.Stats()
	if after.Hits != before.Hits || after.Ready != 0 || after.Discarded < before.Discarded+2 {
		t.Fatalf("stats before the deletion %+v, after 3 runs %+v: want no hit, nothing ready, the 2 ready discarded", before, after)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rt.mu.Lock()
		n := len(rt.containers)
		rt.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d containers left after the folder was deleted: the stale ones leak", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// When the pool's check finds the replaced folder before a run does, the
// next run misses as it would have had it found them itself: cold, saying
// why, and no sign of load (the pool does not grow for it). It said "no
// ready container" and grew.
func TestPoolMountReplacedSeenByTheCheck(t *testing.T) {
	p, _, g, data, l := mountPool(t, 4)
	g.hold()
	replaceDir(t, data)
	waitReady(t, p, 0) // the check removed them; the refill waits at the gate
	res, err := p.Run(context.Background(), Request{Code: "print('ran')", Limits: l})
	if err != nil || res.Status != StatusOK || res.Warm || !strings.Contains(res.Cold, "mount "+data+" was deleted or replaced") {
		t.Fatalf("a run after the check found the folder replaced: %+v, %v; want a cold run that says why", res, err)
	}
	if s := p.Stats(); s.Grown != 0 || s.Target != 2 || s.Discarded != 2 {
		t.Fatalf("%+v: want the 2 discarded, not grown", s)
	}
	// A second miss is demand again, as after a run that found them.
	res, err = p.Run(context.Background(), Request{Code: "print('ran')", Limits: l})
	if err != nil || res.Warm || res.Cold != "no ready container" {
		t.Fatalf("a second run before the refill: %+v, %v; want a miss", res, err)
	}
	if s := p.Stats(); s.Grown != 1 || s.Target != 3 {
		t.Fatalf("%+v: want grown by the second miss", s)
	}
	g.release()
	waitReady(t, p, 3)
	if res, err := p.Run(context.Background(), Request{Code: "pass", Limits: l}); err != nil || !res.Warm {
		t.Fatalf("a run once the pool refilled: %+v, %v; want warm", res, err)
	}
}

// TestPoolHandsReadyToARunWithNoRoom: on an engine with room for so many
// containers (a Kubernetes node's CPU), a run that missed waits for room;
// when the pool's refill gets that room first, the run takes the refill's
// container rather than wait for room the idle pool holds, which no run
// would ever free.
func TestPoolHandsReadyToARunWithNoRoom(t *testing.T) {
	rt := newFake(pythonRunner(t))
	rt.room = 1
	p := newTestPool(t, rt, 1, testLimits())
	waitReady(t, p, 1)
	ctx := context.Background()
	// A takes the ready container and holds the room; the refill waits.
	a, err := p.Acquire(ctx, testLimits(), "runa")
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("never %s: %+v, %d waiting for room", what, p.Stats(), rt.waiting())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitFor("the refill waiting for room", func() bool { return rt.waiting() == 1 })
	// B finds nothing ready, and waits behind the refill.
	type got struct {
		inst Instance
		err  error
	}
	bc := make(chan got, 1)
	bctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() {
		inst, err := p.Acquire(bctx, testLimits(), "runb")
		bc <- got{inst, err}
	}()
	waitFor("B waiting for room", func() bool { return rt.waiting() == 2 })
	// A ends: the refill, first in line, gets the room and is ready; B
	// takes it.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var b got
	select {
	case b = <-bc:
	case <-time.After(10 * time.Second):
		t.Fatalf("B still waits for room the pool's ready container holds: %+v", p.Stats())
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	defer b.inst.Close(ctx)
	res, err := b.inst.Exec(ctx, ExecRequest{RunID: "runb", Code: "print(6*7)", Timeout: 10 * time.Second, OutputBytes: 1 << 20})
	if err != nil || res.Status != StatusOK || res.Stdout != "42\n" {
		t.Fatalf("B in the handed-over container: %+v, %v", res, err)
	}
	if !res.Warm {
		t.Errorf("B ran in the pool's container, yet is not warm: %+v", res)
	}
	if s := p.Stats(); s.Hits != 2 || s.Misses != 0 {
		t.Errorf("%+v: want 2 hits (A, and B handed the refill's container), 0 misses", s)
	}
}
