package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// openedFake is a fake engine as opened: it can be closed.
type openedFake struct {
	*fakeRuntime
	closed atomic.Bool
}

func (o *openedFake) BuildImage(context.Context, BuildOptions) error { return nil }
func (o *openedFake) Close() error                                   { o.closed.Store(true); return nil }

// testEngine is an Engine whose opens are opens of the fake engines open
// returns (n counts its calls, from 1); opened lists those it opened.
func testEngine(t *testing.T, pool int, open func(n int) (*fakeRuntime, error)) (*Engine, func() []*openedFake) {
	t.Helper()
	tmp, err := os.MkdirTemp("", "bt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts := EngineOptions{Executor: ExecutorOptions{Image: "test-image", RunRoot: filepath.Join(tmp, "runs")}, Logger: zerolog.New(io.Discard)}
	if pool > 0 {
		opts.Pool = func() PoolOptions { return PoolOptions{Size: pool, Limits: testLimits()} }
	}
	e := NewEngine(opts)
	var mu sync.Mutex
	var opened []*openedFake
	calls := 0
	e.openRuntime = func(context.Context) (Runtime, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		rt, err := open(calls)
		if err != nil {
			return nil, err
		}
		o := &openedFake{fakeRuntime: rt}
		opened = append(opened, o)
		return o, nil
	}
	t.Cleanup(func() { e.Close(10 * time.Second) })
	return e, func() []*openedFake {
		mu.Lock()
		defer mu.Unlock()
		return append([]*openedFake(nil), opened...)
	}
}

// An engine that cannot be opened fails the Acquire with an
// UnavailableError; the next Acquire tries again, and concurrent ones open
// it once.
func TestEngineOpensOnFirstUseAndAgainAfterAFailure(t *testing.T) {
	e, opened := testEngine(t, 0, func(n int) (*fakeRuntime, error) {
		if n == 1 {
			return nil, fmt.Errorf("%w: no socket", ErrEngineUnreachable)
		}
		return newFake(pythonRunner(t)), nil
	})
	var unavailable *UnavailableError
	if _, err := e.Acquire(context.Background(), testLimits(), "r1"); !errors.As(err, &unavailable) || !errors.Is(err, ErrEngineUnreachable) {
		t.Fatalf("first Acquire: %v, want an UnavailableError wrapping ErrEngineUnreachable", err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			res, err := e.Run(context.Background(), Request{Code: "print(6 * 7)", Limits: testLimits(), RunID: fmt.Sprintf("r%d", i+2)})
			if err != nil || res.Stdout != "42\n" {
				t.Errorf("run %d: %+v, %v", i, res, err)
			}
		})
	}
	wg.Wait()
	if n := len(opened()); n != 1 {
		t.Fatalf("%d engines opened for 4 runs at once, want 1", n)
	}
}

// An Exec that finds the engine gone drops it: the next Acquire opens a
// new one, and the old one is closed.
func TestEngineReopensAfterItWentAway(t *testing.T) {
	e, opened := testEngine(t, 1, func(n int) (*fakeRuntime, error) {
		rt := newFake(pythonRunner(t))
		if n == 1 {
			rt.waitErr = fmt.Errorf("%w: the daemon stopped", ErrEngineUnreachable)
		}
		return rt, nil
	})
	if _, err := e.Run(context.Background(), Request{Code: "import time; time.sleep(0.2)", Limits: testLimits(), RunID: "r1"}); !errors.Is(err, ErrEngineUnreachable) {
		t.Fatalf("a run on an engine that went away: %v", err)
	}
	res, err := e.Run(context.Background(), Request{Code: "print(1)", Limits: testLimits(), RunID: "r2"})
	if err != nil || res.Stdout != "1\n" {
		t.Fatalf("the run after: %+v, %v", res, err)
	}
	o := opened()
	if len(o) != 2 {
		t.Fatalf("%d engines opened, want 2", len(o))
	}
	deadline := time.Now().Add(10 * time.Second)
	for !o[0].closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the engine that went away was never closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.PoolStats(); st == nil || st.Size != 1 {
		t.Errorf("the new engine's pool: %+v", st)
	}
}

// An engine dropped because one run found it gone is closed only once the
// other runs on it are done: they may be healthy (an OCI runtime's
// failure is one container's).
func TestEngineDroppedIsClosedAfterItsLastRun(t *testing.T) {
	var first *fakeRuntime
	e, opened := testEngine(t, 0, func(n int) (*fakeRuntime, error) {
		rt := newFake(pythonRunner(t))
		if n == 1 {
			first = rt
		}
		return rt, nil
	})
	ctx := context.Background()
	other, err := e.Acquire(ctx, testLimits(), "other")
	if err != nil {
		t.Fatal(err)
	}
	first.mu.Lock()
	first.createErr = fmt.Errorf("%w: the daemon stopped", ErrEngineUnreachable)
	first.mu.Unlock()
	if _, err := e.Acquire(ctx, testLimits(), "failing"); !errors.Is(err, ErrEngineUnreachable) {
		t.Fatalf("the failing run: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // a close, if it wrongly began, has run
	if opened()[0].closed.Load() {
		t.Fatal("the dropped engine was closed while a run still held a container on it")
	}
	if _, err := e.Acquire(ctx, testLimits(), "next"); err != nil { // opens the second
		t.Fatal(err)
	}
	other.Close(ctx)
	other.Close(ctx) // a second Close lets go of nothing more
	deadline := time.Now().Add(10 * time.Second)
	for !opened()[0].closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the dropped engine was not closed after its last run")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(opened()); n != 2 || opened()[1].closed.Load() {
		t.Fatalf("%d engines opened, the new one closed: %v", n, opened()[1].closed.Load())
	}
}

// Close empties the pool and closes the engine; Acquire fails after it.
func TestEngineClose(t *testing.T) {
	e, opened := testEngine(t, 2, func(int) (*fakeRuntime, error) { return newFake(pythonRunner(t)), nil })
	if e.PoolStats() != nil {
		t.Fatal("pool stats before the engine is open")
	}
	if err := e.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := e.PoolStats(); st.Ready != 2; st = e.PoolStats() {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.Close(10 * time.Second)
	o := opened()[0]
	if !o.closed.Load() {
		t.Error("the engine was not closed")
	}
	o.mu.Lock()
	left := len(o.containers)
	o.mu.Unlock()
	if left != 0 {
		t.Errorf("%d containers left after Close", left)
	}
	if _, err := e.Acquire(context.Background(), testLimits(), "late"); err == nil {
		t.Error("Acquire after Close succeeded")
	}
}

// Ready opens the engine in the background (a probe does not wait for
// it), says why the last opening failed, and once open answers from the
// engine: no container is started for it.
func TestEngineReady(t *testing.T) {
	fail := atomic.Bool{}
	fail.Store(true)
	e, opened := testEngine(t, 0, func(n int) (*fakeRuntime, error) {
		if fail.Load() {
			return nil, fmt.Errorf("%w: no socket", ErrEngineUnreachable)
		}
		return newFake(pythonRunner(t)), nil
	})
	ctx := context.Background()
	if err := e.Ready(ctx); !errors.Is(err, ErrEngineOpening) && !errors.Is(err, ErrEngineUnreachable) {
		t.Fatalf("first Ready: %v", err)
	}
	wait := func(want func(error) bool) error {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := e.Ready(ctx)
			if want(err) {
				return err
			}
			if time.Now().After(deadline) {
				t.Fatalf("Ready: %v", err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	err := wait(func(err error) bool { return errors.Is(err, ErrEngineUnreachable) })
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) {
		t.Fatalf("Ready after a failed opening: %v, want an UnavailableError", err)
	}
	fail.Store(false)
	wait(func(err error) bool { return err == nil })
	if n := len(opened()); n != 1 {
		t.Fatalf("%d openings, want 1", n)
	}
	rt := opened()[0]
	rt.mu.Lock()
	created := rt.created
	rt.mu.Unlock()
	if created != 0 {
		t.Fatalf("Ready created %d containers", created)
	}
}
