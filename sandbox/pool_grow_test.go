package sandbox

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// The pool's concurrent refill, its growth under misses and its shrink
// when idle, on the fake engine: pooled creates go through a gate the
// test opens, so that what is in flight at once can be counted.

// idleRunner says hello and waits to be killed: a ready container for
// tests that never give it code.
func idleRunner(ctx context.Context, sock, token string, _ ContainerSpec) ExitState {
	r, err := dialRunner(ctx, sock)
	if err != nil {
		return ExitState{ExitCode: 1}
	}
	_ = r.send(hello(token))
	<-ctx.Done()
	r.conn.Close()
	return ExitState{ExitCode: 137}
}

// startGate holds the pool's creates (those of pooled containers) while
// it is closed, and counts how many are in flight at once. A create whose
// ctx ends makes its container anyway and fails, as a real engine cut off
// mid-request does.
type startGate struct {
	free     int // creates let through before the gate holds them
	mu       sync.Mutex
	open     chan struct{} // closed while the gate is open
	opened   bool
	inFlight int
	most     int
	passed   int
}

func gate(rt *fakeRuntime, free int) *startGate {
	g := &startGate{open: make(chan struct{}), free: free}
	rt.createHook = func(ctx context.Context, spec ContainerSpec) bool {
		if spec.Labels[LabelPooled] != "true" {
			return false
		}
		g.mu.Lock()
		if g.free > 0 {
			g.free--
			g.mu.Unlock()
			return false
		}
		g.inFlight++
		g.most = max(g.most, g.inFlight)
		open := g.open
		g.mu.Unlock()
		var cut bool
		select {
		case <-open:
		case <-ctx.Done():
			cut = true
		}
		g.mu.Lock()
		g.inFlight--
		g.passed++
		g.mu.Unlock()
		return cut
	}
	return g
}

// release opens the gate: the creates it holds go on, and the next ones
// pass.
func (g *startGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		g.opened = true
		close(g.open)
	}
}

// hold closes the gate again: the pool's next creates wait at it, so that
// no container of the pool becomes ready until release.
func (g *startGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened {
		g.opened = false
		g.open = make(chan struct{})
	}
}

func (g *startGate) counts() (inFlight, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.most
}

// waitInFlight waits until n pooled creates wait at the gate at once.
func (g *startGate) waitInFlight(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, most := g.counts()
		if in == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pool starts in flight (at most %d so far), want %d", in, most, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stays checks for d that the pool never has more than n starts in
// flight.
func (g *startGate) stays(t *testing.T, n int, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if in, most := g.counts(); most > n {
			t.Fatalf("%d pool starts in flight (at most %d), want no more than %d", in, most, n)
		}
	}
}

func pooledCount(rt *fakeRuntime) int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := 0
	for _, c := range rt.containers {
		if c.spec.Labels[LabelPooled] == "true" {
			n++
		}
	}
	return n
}

// newGrowPool returns a pool on rt, closed when the test ends (g opened
// first, so that a failed test does not leave Close waiting at it).
func newGrowPool(t *testing.T, rt *fakeRuntime, g *startGate, o PoolOptions) *Pool {
	t.Helper()
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	o.Limits, o.Logger = testLimits(), ex.log
	p, err := NewPool(ex, o)
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
	return p
}

// hit takes a ready container from p, and gives it back.
func hit(t *testing.T, p *Pool) {
	t.Helper()
	inst, warm, _, err := p.take(context.Background(), testLimits(), NewRunID())
	if err == nil {
		p.Release(inst)
	}
	if err != nil || !warm {
		t.Fatalf("take: warm %v, %v; want a ready container", warm, err)
	}
}

// miss takes a container from p that must not be a ready one, and gives
// it back.
func miss(t *testing.T, p *Pool) {
	t.Helper()
	inst, warm, why, err := p.take(context.Background(), testLimits(), NewRunID())
	if err == nil {
		p.Release(inst)
	}
	if err != nil || warm {
		t.Fatalf("take: warm %v, %v; want a cold start", warm, err)
	}
	if why != "no ready container" {
		t.Errorf("miss reason %q", why)
	}
}

// The refill starts several containers at once, and never more than
// Starts.
func TestPoolRefillConcurrentBounded(t *testing.T) {
	if d := DefaultPoolStarts(); d < 2 || d > maxPoolStarts {
		t.Errorf("DefaultPoolStarts() = %d, want 2 .. %d", d, maxPoolStarts)
	}
	rt := newFake(idleRunner)
	g := gate(rt, 0)
	p := newGrowPool(t, rt, g, PoolOptions{Size: 6, Starts: 3})
	g.waitInFlight(t, 3)
	if s := p.Stats(); s.Starting != 3 || s.StartsLimit != 3 || s.Ready != 0 || s.Target != 6 {
		t.Errorf("stats %+v: want 3 starting of a limit of 3, none ready, target 6", s)
	}
	g.stays(t, 3, 200*time.Millisecond)
	g.release()
	waitReady(t, p, 6)
	g.stays(t, 3, 50*time.Millisecond)
	if s := p.Stats(); s.Started != 6 || s.Starting != 0 || s.Discarded != 0 {
		t.Errorf("stats %+v: want 6 started, none starting or discarded", s)
	}
}

// Misses raise the target one at a time up to Max and never beyond: the
// starts in flight, the ready containers and the engine's pooled
// containers all stay within it.
func TestPoolGrowsUnderMissesUpToMax(t *testing.T) {
	rt := newFake(idleRunner)
	g := gate(rt, 1)
	p := newGrowPool(t, rt, g, PoolOptions{Size: 1, Max: 3, Starts: 4})
	waitReady(t, p, 1) // filled once; its refill is held from now on
	hit(t, p)
	g.waitInFlight(t, 1)
	miss(t, p)
	if s := p.Stats(); s.Target != 2 || s.Grown != 1 || s.Misses != 1 {
		t.Fatalf("after one miss: %+v; want target 2, grown 1", s)
	}
	g.waitInFlight(t, 2)
	for range 6 {
		miss(t, p)
	}
	s := p.Stats()
	if s.Target != 3 || s.Max != 3 || s.Grown != 2 || s.Misses != 7 || s.Hits != 1 {
		t.Fatalf("after 7 misses: %+v; want target 3 (the max), grown 2", s)
	}
	g.waitInFlight(t, 3)
	g.stays(t, 3, 100*time.Millisecond)
	g.release()
	waitReady(t, p, 3)
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if n := pooledCount(rt); n > 3 {
			t.Fatalf("%d pooled containers on the engine, max 3", n)
		}
	}
	if s := p.Stats(); s.Started != 4 || s.Ready != 3 || s.Target != 3 {
		t.Fatalf("%+v: want 4 started, 3 ready", s)
	}
	// Hits that empty the pool while it refills stay within the max.
	for range 3 {
		hit(t, p)
	}
	waitReady(t, p, 3)
	if s := p.Stats(); s.Target != 3 || s.Grown != 2 || s.Hits != 4 {
		t.Fatalf("%+v: want target 3, grown 2 still, 3 hits", s)
	}
	g.stays(t, 3, 0)
}

// Once the demand is gone, the pool shrinks back to its size after
// ShrinkAfter: the ready containers beyond it are removed.
func TestPoolShrinksWhenIdle(t *testing.T) {
	rt := newFake(idleRunner)
	g := gate(rt, 1)
	shrink := 300 * time.Millisecond
	p := newGrowPool(t, rt, g, PoolOptions{Size: 1, Max: 4, ShrinkAfter: shrink, Starts: 4})
	waitReady(t, p, 1)
	hit(t, p)
	g.waitInFlight(t, 1)
	for range 3 {
		miss(t, p)
	}
	grownAt := time.Now()
	g.release()
	waitReady(t, p, 4)
	if s := p.Stats(); s.Target != 4 || s.Grown != 3 {
		t.Fatalf("%+v: want target 4, grown 3", s)
	}
	// No run comes: after ShrinkAfter, the containers beyond the size go.
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Target != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never shrank: %+v", p.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if since := time.Since(grownAt); since < shrink {
		t.Errorf("shrank %s after growing, before shrink_after (%s)", since, shrink)
	}
	waitReady(t, p, 1)
	s := p.Stats()
	if s.Shrunk != 3 || s.Discarded != 3 || s.Target != 1 || s.Size != 1 {
		t.Fatalf("%+v: want shrunk 3, 3 discarded, back to 1", s)
	}
	deadline = time.Now().Add(5 * time.Second)
	for pooledCount(rt) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d pooled containers on the engine after the shrink, want 1", pooledCount(rt))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pool that keeps missing does not shrink: the window ends with a miss
// in it.
func TestPoolDoesNotShrinkUnderLoad(t *testing.T) {
	rt := newFake(idleRunner)
	g := gate(rt, 1)
	shrink := 200 * time.Millisecond
	p := newGrowPool(t, rt, g, PoolOptions{Size: 1, Max: 3, ShrinkAfter: shrink, Starts: 4})
	waitReady(t, p, 1)
	hit(t, p)
	g.waitInFlight(t, 1)
	for end := time.Now().Add(4 * shrink); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		miss(t, p)
	}
	if s := p.Stats(); s.Target != 3 || s.Shrunk != 0 {
		t.Fatalf("%+v: want target 3, never shrunk, while runs miss", s)
	}
	g.release()
}

// Close while the pool grows and its refill has starts in flight: every
// container, ready or half made, is removed, and no goroutine is left.
func TestPoolCloseDuringRefillLeaksNothing(t *testing.T) {
	rt := newFake(idleRunner)
	g := gate(rt, 2)
	before := runtime.NumGoroutine()
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	p, err := NewPool(ex, PoolOptions{Size: 2, Max: 8, Starts: 4, Limits: testLimits(), Logger: ex.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.release(); p.Close(context.Background()) })
	waitReady(t, p, 2)
	hit(t, p)
	hit(t, p)
	for range 4 {
		miss(t, p)
	}
	g.waitInFlight(t, 4)
	if s := p.Stats(); s.Starting != 4 || s.Target < 6 {
		t.Fatalf("%+v: want 4 starting, target 6 or more", s)
	}
	// The engine finishes the creates it took (the executor does not cut
	// a create short): Close waits for them, and removes what they made.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- p.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with 4 creates in flight: what they make would be left behind", err)
	case <-time.After(200 * time.Millisecond):
	}
	g.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if ids, _ := rt.List(context.Background(), nil); len(ids) != 0 {
		t.Fatalf("containers left after Close during the refill: %v", ids)
	}
	if in, _ := g.counts(); in != 0 {
		t.Fatalf("%d creates still in flight after Close", in)
	}
	if s := p.Stats(); s.Starting != 0 || s.Ready != 0 || s.Removing != 0 {
		t.Fatalf("stats after Close: %+v", s)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The pool's options are checked: max below size is refused, size 0
// turns growth off too.
func TestPoolOptionsChecked(t *testing.T) {
	if _, err := poolConfig(PoolOptions{Size: 4, Max: 2, Limits: testLimits()}); err == nil {
		t.Error("max 2 below size 4 accepted")
	}
	if _, err := poolConfig(PoolOptions{Size: 1, Max: MaxPoolSize + 1, Limits: testLimits()}); err == nil {
		t.Error("max beyond MaxPoolSize accepted")
	}
	o, err := poolConfig(PoolOptions{Size: 0, Max: 8, Limits: testLimits()})
	if err != nil || o.Max != 0 {
		t.Errorf("size 0, max 8: %+v, %v; want max 0 (the pool off)", o, err)
	}
	o, err = poolConfig(PoolOptions{Size: 3, Limits: testLimits()})
	if err != nil || o.Max != 3 || o.Starts != DefaultPoolStarts() || o.ShrinkAfter != DefaultShrinkAfter {
		t.Errorf("defaults: %+v, %v", o, err)
	}
}

// Runs that miss while the pool fills for the first time (the engine just
// opened, or a reload changed the limits) are no sign of load: the pool
// does not grow for them.
func TestPoolFirstFillDoesNotGrow(t *testing.T) {
	rt := newFake(idleRunner)
	g := gate(rt, 0)
	p := newGrowPool(t, rt, g, PoolOptions{Size: 2, Max: 8, Starts: 2})
	g.waitInFlight(t, 2)
	for range 3 {
		miss(t, p)
	}
	if s := p.Stats(); s.Target != 2 || s.Grown != 0 || s.Misses != 3 {
		t.Fatalf("%+v: want target 2, not grown, before the pool first filled", s)
	}
	g.release()
	waitReady(t, p, 2)
	// The refill behind the two hits must not make a container ready
	// before the third take, which is to miss: its creates wait at the
	// gate (a refill that outran the test made that take warm).
	g.hold()
	hit(t, p)
	hit(t, p)
	miss(t, p)
	if s := p.Stats(); s.Target < 3 || s.Grown == 0 {
		t.Fatalf("%+v: want grown once the pool had filled", s)
	}
}
