package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// EngineOptions configure an [Engine].
type EngineOptions struct {
	// Name is the engine to open: "auto" (or ""), "docker", "podman" or
	// "kubernetes", as Open understands it.
	Name string
	// Open opens the engine called name whose containers can run with the
	// OCI runtime ociRuntime ("": the engine's default). The core links no
	// engine: cmd/bridge passes sandbox/detect's OpenFor, a test its fake.
	Open func(ctx context.Context, name, ociRuntime string, log zerolog.Logger) (Runtime, error)
	// Executor configures the [Executor] on the engine once it is open; its
	// OCIRuntime also picks the engine.
	Executor ExecutorOptions
	// Pool says how the warm pool is made when the engine opens (its
	// Logger is the [Engine]'s); nil keeps no pool.
	Pool   func() PoolOptions
	Logger zerolog.Logger
}

// Engine is where runs go: the container engine ([Runtime]) opened on first use (a
// bridge answers its client at once even when no engine runs; the call
// that needs one says what is wrong), with its [Executor] and warm pool, and
// opened again after it went away: an Acquire or an Exec that fails
// because the engine is unreachable, or no longer has the OCI runtime it
// must run with, drops it (closed once the runs on it are done), and the
// next Acquire opens one anew (maybe another one). It is safe for
// concurrent use.
type Engine struct {
	opts EngineOptions
	log  zerolog.Logger
	// openRuntime opens the engine: opts.Open, for Name and the executor's
	// OCI runtime.
	openRuntime func(ctx context.Context) (Runtime, error)
	// opening is held while the engine is being opened; unlike a mutex, a
	// caller waiting for it can give up when its ctx ends.
	opening chan struct{}

	// opener is set while Ready has an open going on in the background.
	opener atomic.Bool

	mu     sync.Mutex
	open   *openEngine
	closed bool
	// openErr is why the last opening failed; nil once one succeeded.
	openErr error
}

// openEngine is one opening of the engine. Once dropped (its engine went
// away) it is closed when its last instance is: other runs on it may be
// healthy. users and closing are under Engine.mu.
type openEngine struct {
	rt   Runtime
	ex   *Executor
	pool *Pool

	users   int  // instances not closed yet, and Acquires under way
	dropped bool // no longer the Engine's: closed once users is 0
	closing bool // its close began
}

// openTimeout bounds opening the engine: a wedged engine must not hold
// every call.
const openTimeout = 30 * time.Second

// errEngineClosed is Acquire's error once Close was called.
var errEngineClosed = errors.New("the bridge is shutting down")

// UnavailableError is an [Engine]'s error when it could not be opened: no
// engine answers, the image is missing, the OCI runtime is not there. The
// next Acquire tries again.
type UnavailableError struct{ Err error }

func (e *UnavailableError) Error() string { return e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// NewEngine returns an [Engine] that opens on first use. It opens nothing.
// The [Executor] logs with opts.Logger.
func NewEngine(opts EngineOptions) *Engine {
	opts.Executor.Logger = opts.Logger
	e := &Engine{opts: opts, log: opts.Logger, opening: make(chan struct{}, 1)}
	e.openRuntime = func(ctx context.Context) (Runtime, error) {
		if opts.Open == nil {
			return nil, errors.New("no way to open a container engine was given (EngineOptions.Open)")
		}
		return opts.Open(ctx, opts.Name, opts.Executor.OCIRuntime, e.log)
	}
	return e
}

// Open opens the engine now rather than at the first Acquire (a warm pool
// then starts filling). A failure is returned, and tried again by the
// next Open or Acquire.
func (e *Engine) Open(ctx context.Context) error {
	o, err := e.acquire(ctx)
	if err == nil {
		e.release(o)
	}
	return err
}

// Acquire returns an [Instance] of limits l for the run runID: from the
// warm pool when the engine has one, else a container started for it.
func (e *Engine) Acquire(ctx context.Context, l Limits, runID string) (Instance, error) {
	o, err := e.acquire(ctx)
	if err != nil {
		return nil, err
	}
	var inst Instance
	if o.pool != nil {
		inst, err = o.pool.Acquire(ctx, l, runID)
	} else {
		inst, err = o.ex.Acquire(ctx, l, runID)
	}
	if err != nil {
		e.failed(o, err)
		e.release(o)
		return nil, err
	}
	return &engineInstance{Instance: inst, e: e, o: o}, nil
}

// Run runs req in an [Instance] of the engine: Acquire, Exec, Close.
func (e *Engine) Run(ctx context.Context, req Request) (Result, error) {
	return run(ctx, e.Acquire, req)
}

// engineInstance tells its [Engine] when an Exec found the engine gone,
// and when it no longer uses the engine's opening (Close).
type engineInstance struct {
	Instance
	e        *Engine
	o        *openEngine
	released atomic.Bool // Close was called
}

func (i *engineInstance) Exec(ctx context.Context, x ExecRequest) (Result, error) {
	res, err := i.Instance.Exec(ctx, x)
	if err != nil {
		i.e.failed(i.o, err)
	}
	return res, err
}

// Close closes the instance, then lets go of its opening of the engine.
func (i *engineInstance) Close(ctx context.Context) error {
	if i.released.Swap(true) {
		return nil
	}
	err := i.Instance.Close(ctx)
	i.e.release(i.o)
	return err
}

// failed drops o when err says its engine went away: unreachable, or
// without the OCI runtime it must run with. It is closed once its last
// instance is.
func (e *Engine) failed(o *openEngine, err error) {
	if !errors.Is(err, ErrEngineUnreachable) && !errors.Is(err, ErrOCIRuntime) {
		return
	}
	e.mu.Lock()
	if e.open != o {
		e.mu.Unlock()
		return // dropped already, maybe opened anew
	}
	e.open = nil
	o.dropped = true
	e.mu.Unlock()
	e.log.Warn().Err(err).Msg("the container engine went away: the next run opens it again")
}

// release gives up one use of o; the last use of a dropped one closes it.
func (e *Engine) release(o *openEngine) {
	e.mu.Lock()
	o.users--
	last := o.users == 0 && o.dropped && !o.closing
	if last {
		o.closing = true
	}
	e.mu.Unlock()
	if last {
		go e.closeOpen(o, 2*time.Minute, "the previous engine connection")
	}
}

// acquire returns the open engine, opening it when there is none.
func (e *Engine) acquire(ctx context.Context) (*openEngine, error) {
	select {
	case e.opening <- struct{}{}:
		defer func() { <-e.opening }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, err // both were ready; a cancelled call opens nothing
	}
	e.mu.Lock()
	o, closed := e.open, e.closed
	if o != nil && !closed {
		o.users++
	}
	e.mu.Unlock()
	switch {
	case closed:
		return nil, errEngineClosed
	case o != nil:
		return o, nil
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	o, err := e.openNew(octx)
	if err != nil {
		if ctx.Err() == nil {
			e.mu.Lock()
			e.openErr = err
			e.mu.Unlock()
		}
		return nil, &UnavailableError{Err: err}
	}
	e.mu.Lock()
	e.openErr = nil
	if e.closed {
		e.mu.Unlock()
		e.closeOpen(o, 10*time.Second, "an engine opened during shutdown")
		return nil, errEngineClosed
	}
	e.open = o
	o.users++
	e.mu.Unlock()
	return o, nil
}

// openNew opens the engine, its [Executor] and its pool.
func (e *Engine) openNew(ctx context.Context) (*openEngine, error) {
	rt, err := e.openRuntime(ctx)
	if err != nil {
		return nil, err
	}
	ex, err := NewExecutor(ctx, rt, e.opts.Executor)
	if err != nil {
		rt.Close()
		return nil, err
	}
	o := &openEngine{rt: rt, ex: ex}
	if e.opts.Pool == nil {
		return o, nil
	}
	po := e.opts.Pool()
	po.Logger = e.log
	if o.pool, err = NewPool(ex, po); err != nil {
		_ = ex.Close(ctx)
		rt.Close()
		return nil, err
	}
	if po.Size > 0 {
		e.log.Info().Int("size", po.Size).Int("max", po.Max).Str("max_age", po.MaxAge.String()).Msg("pool: filling")
	}
	return o, nil
}

// ErrEngineOpening is Ready's error while the engine is being opened.
var ErrEngineOpening = errors.New("the container engine is being opened")

// Ready reports whether a run could start now, starting nothing: the
// engine is open, answers, and holds the runner image. An engine found
// gone is dropped, as a run would drop it. Before the engine is open,
// Ready opens it in the background, one opening at a time and not bounded
// by ctx (a probe's short deadline must not cancel an opening that takes
// longer: it reaps what dead bridges left), and returns why the last
// opening failed, or [ErrEngineOpening].
func (e *Engine) Ready(ctx context.Context) error {
	e.mu.Lock()
	o, closed, openErr := e.open, e.closed, e.openErr
	if o != nil && !closed {
		o.users++
	}
	e.mu.Unlock()
	switch {
	case closed:
		return errEngineClosed
	case o == nil:
		if e.opener.CompareAndSwap(false, true) {
			go func() {
				defer e.opener.Store(false)
				_ = e.Open(context.Background())
			}()
		}
		if openErr != nil {
			return &UnavailableError{Err: openErr}
		}
		return ErrEngineOpening
	}
	defer e.release(o)
	if _, err := o.rt.ImageInfo(ctx, e.opts.Executor.Image); err != nil {
		e.failed(o, err)
		if errors.Is(err, ErrImageNotFound) {
			return fmt.Errorf("runner image %s: %w; %s", e.opts.Executor.Image, err, imageHint(e.opts.Executor, o.rt.Name()))
		}
		return err
	}
	return nil
}

// Configure gives the warm pool new options (a reload of the policy):
// size, max, maximum age, container limits. Before the engine is open it
// does nothing: the pool is made as [EngineOptions.Pool] says when it
// opens.
func (e *Engine) Configure(opts PoolOptions) error {
	e.mu.Lock()
	o := e.open
	e.mu.Unlock()
	if o == nil || o.pool == nil {
		return nil
	}
	return o.pool.Configure(opts)
}

// PoolStats are the warm pool's, nil before the engine is open.
func (e *Engine) PoolStats() *PoolStats {
	e.mu.Lock()
	o := e.open
	e.mu.Unlock()
	if o == nil || o.pool == nil {
		return nil
	}
	st := o.pool.Stats()
	return &st
}

// Close empties the pool, gives failed removals one last try within
// timeout, and closes the engine's client. Acquire fails after it.
func (e *Engine) Close(timeout time.Duration) {
	e.mu.Lock()
	o := e.open
	e.open, e.closed = nil, true
	if o != nil {
		o.dropped, o.closing = true, true
	}
	e.mu.Unlock()
	if o != nil {
		e.closeOpen(o, timeout, "at shutdown")
	}
}

// closeOpen closes one opening of the engine within timeout; what ends
// badly is logged with why.
func (e *Engine) closeOpen(o *openEngine, timeout time.Duration, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if o.pool != nil {
		st := o.pool.Stats()
		if err := o.pool.Close(ctx); err != nil {
			e.log.Warn().Err(err).Msg(why)
		}
		e.log.Info().Int64("hits", st.Hits).Int64("misses", st.Misses).Int64("started", st.Started).Int64("failures", st.Failures).
			Int64("grown", st.Grown).Int64("shrunk", st.Shrunk).Msg("pool: closed")
	}
	if err := o.ex.Close(ctx); err != nil {
		e.log.Warn().Err(err).Msg(why)
	}
	o.rt.Close()
}

// RuntimeName is the open engine's name ("docker", "podman"); "" before
// it is open.
func (e *Engine) RuntimeName() string {
	e.mu.Lock()
	o := e.open
	e.mu.Unlock()
	if o == nil || o.rt == nil {
		return ""
	}
	return o.rt.Name()
}
