package sandbox

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// The warm pool: containers created and started ahead of time, each with
// its runner connected and waiting for exactly one piece of code. A run
// takes one, runs once in it, and it is removed after the run's answer is
// out: never reused, so nothing passes from one run to the next. [Limits]
// are fixed when a container is created, so the pool holds containers of
// one shape (the limits but Timeout and OutputBytes, which each Exec
// sets); a run of another shape starts cold.

// PoolOptions configure a [Pool].
type PoolOptions struct {
	// Size is how many started containers the pool keeps ready when idle;
	// 0 keeps none, and every run starts cold.
	Size int
	// Max is how many ready containers the pool grows to while runs take
	// them faster than it refills (misses); it shrinks back to Size when
	// idle. Size when zero (no growth); at least Size. Not used when Size
	// is 0: the pool is off.
	Max int
	// ShrinkAfter is how long the pool's demand must stay below its target
	// before the ready containers beyond what was used (down to Size) are
	// removed; a minute when zero.
	ShrinkAfter time.Duration
	// Starts bounds the pool's starts in flight at once; [DefaultPoolStarts]
	// when zero.
	Starts int
	// MaxAge is how long a ready container may wait before it is replaced
	// with a fresh one; 10 minutes when zero.
	MaxAge time.Duration
	// Limits is the shape of the containers the pool keeps.
	Limits Limits
	Logger zerolog.Logger
}

// PoolStats is the pool's state and what it did so far, for logs,
// /debug/stats and metrics. [Pool.Stats] copies it under one lock, so it
// is cheap to read at every scrape. The int fields are gauges (now); the
// int64 ones are counters that only grow over the pool's life (an engine
// reopened after a restart makes a new pool, whose counters start at 0).
type PoolStats struct {
	// Size is the configured number of ready containers when idle
	// (pool.size), Max the most the pool grows to (pool.max), and Target
	// how many it aims to hold now: Size, or more after misses.
	Size   int `json:"size"`
	Max    int `json:"max"`
	Target int `json:"target"`
	// Ready containers wait for a run; Starting are being started for the
	// pool now, at most StartsLimit at once.
	Ready       int `json:"ready"`
	Starting    int `json:"starting"`
	StartsLimit int `json:"starts_limit"`
	// Hits are runs that took a ready container; Misses found none of
	// their shape (or the pool off) and started cold.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// Started counts containers started for the pool; Discarded those
	// removed unused (dead, too old, beyond the target, or of a shape no
	// longer wanted).
	Started   int64 `json:"started"`
	Discarded int64 `json:"discarded"`
	// Removed counts removals the pool finished, of used and unused
	// containers alike; Removing those not finished yet.
	Removed  int64 `json:"removed"`
	Removing int   `json:"removing"`
	// Grown counts steps of one the target took up under demand, Shrunk
	// steps of one it took back down when idle (a reload that sets the
	// size counts in neither).
	Grown  int64 `json:"grown"`
	Shrunk int64 `json:"shrunk"`
	// Failures counts pool starts that failed; LastError is the latest,
	// cleared when a start succeeds again.
	Failures  int64  `json:"failures"`
	LastError string `json:"last_error,omitempty"`
}

// Pool runs code in containers it started ahead of time when it has one of
// the run's shape, and in a fresh one otherwise. It answers before the
// used container is removed; Close waits for every removal. It is safe
// for concurrent use.
//
// Its target starts at Size. Once it held that many, a run that finds no
// ready container (a miss), or takes the last one while the refill is
// still under way, raises the target by one, up to Max. The refill starts up to Starts
// containers at once, never more than the target lacks. Each ShrinkAfter
// the pool looks back: with no miss in that window, the ready containers
// no run needed (the fewest that were ready at any time of it) are
// removed and the target lowered by as many, never below Size; a window
// with no run at all brings it back to Size.
type Pool struct {
	e   *Executor
	log zerolog.Logger
	// ctx ends at Close: it cancels the starts in flight.
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // a token asks the filler to look again
	filler sync.WaitGroup
	// removing tracks background removals; starts, the pool's own starts.
	removing sync.WaitGroup
	starts   sync.WaitGroup

	mu          sync.Mutex
	size, max   int
	target      int
	startsMax   int
	shrinkAfter time.Duration
	maxAge      time.Duration
	shape       Limits
	gen         int // bumped when the shape changes: older containers go
	ready       []pooled
	starting    int // the pool's starts in flight
	// filled: the pool has held its target since it began or its shape
	// last changed. Before that, runs miss because it is still filling
	// for the first time, which is no sign of load: it does not grow.
	filled bool
	// lost: ready containers were removed unused, dead, too old or with
	// a mount changed under them (lostMount, the mount's folder), and
	// since then no run missed and none was ready. The next run that
	// misses is no sign of load, and its reason is the mount: the same,
	// whether that run found them itself or the pool's check did first.
	lost      bool
	lostMount string
	closed    bool
	retryAt   time.Time // no pool start before this (backoff)
	backoff   time.Duration
	// The current shrink window: since when, whether a run missed or took
	// a container in it, and the fewest ready at any time of it.
	winStart time.Time
	winMiss  bool
	winTakes bool
	winMin   int
	stats    PoolStats
}

type pooled struct {
	inst *Container
	born time.Time
	gen  int
}

// Backoff of the pool's starts after a failure: doubled at each failure
// in a row, from poolBackoffMin up to poolBackoffMax.
const (
	poolBackoffMin = time.Second
	poolBackoffMax = 30 * time.Second
	// poolCheck is how often ready containers are checked for age, and
	// the shrink window for its end.
	poolCheck = time.Second
	// MaxPoolSize bounds [PoolOptions.Size] and [PoolOptions.Max].
	MaxPoolSize = 32
	// DefaultShrinkAfter is [PoolOptions.ShrinkAfter] when zero.
	DefaultShrinkAfter = time.Minute
	// maxPoolStarts bounds [DefaultPoolStarts].
	maxPoolStarts = 4
)

// DefaultPoolStarts is how many containers the pool starts at once by
// default: one per two cores, at least 2 and at most 4. A container start
// is mostly the engine's and the OCI runtime's (runc's) CPU time. Measured
// on 2 cores (docs/performance.md, "The warm pool"): Podman started 12
// containers 1.3 to 1.7 times as fast with 2 in flight as with 1, and no
// faster with 3 or 4; Docker no faster with 2 than with 1; and a run that
// started its own container meanwhile took 1.5 to 2 times as long with 2
// in flight, up to 3 times with 4. So the refill uses about what the
// engine sustains, and leaves it hands for the rest: cold runs, removals.
func DefaultPoolStarts() int {
	return min(max(2, runtime.NumCPU()/2), maxPoolStarts)
}

// poolConfig is o checked, with its defaults filled in.
func poolConfig(o PoolOptions) (PoolOptions, error) {
	if o.Size < 0 || o.Size > MaxPoolSize {
		return o, fmt.Errorf("pool size must be 0 to %d, got %d", MaxPoolSize, o.Size)
	}
	switch {
	case o.Size == 0:
		o.Max = 0 // the pool is off: it does not grow either
	case o.Max == 0:
		o.Max = o.Size
	}
	if o.Max < o.Size || o.Max > MaxPoolSize {
		return o, fmt.Errorf("pool max must be %d (the size) to %d, got %d", o.Size, MaxPoolSize, o.Max)
	}
	if o.Starts < 0 {
		return o, fmt.Errorf("pool starts must be at least 1, got %d", o.Starts)
	}
	if o.Starts == 0 {
		o.Starts = DefaultPoolStarts()
	}
	if o.ShrinkAfter <= 0 {
		o.ShrinkAfter = DefaultShrinkAfter
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 10 * time.Minute
	}
	if err := o.Limits.Validate(); err != nil {
		return o, fmt.Errorf("pool limits: %w", err)
	}
	return o, nil
}

// NewPool returns a pool of e's containers and starts filling it in the
// background.
func NewPool(e *Executor, opts PoolOptions) (*Pool, error) {
	opts, err := poolConfig(opts)
	if err != nil {
		return nil, err
	}
	p := &Pool{e: e, log: opts.Logger.With().Str("component", "pool").Logger(), wake: make(chan struct{}, 1),
		shape: shapeOf(opts.Limits), winStart: time.Now()}
	p.set(opts)
	p.target = opts.Size
	p.stats.Target = p.target
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.filler.Add(1)
	go p.fill()
	return p, nil
}

// set takes opts' numbers (not its limits), keeping the target between
// the new size and max. p.mu is held, or p is new.
func (p *Pool) set(o PoolOptions) {
	p.size, p.max, p.startsMax, p.shrinkAfter, p.maxAge = o.Size, o.Max, o.Starts, o.ShrinkAfter, o.MaxAge
	p.target = min(max(p.target, p.size), p.max)
	p.stats.Size, p.stats.Max, p.stats.StartsLimit, p.stats.Target = p.size, p.max, p.startsMax, p.target
}

// shapeOf is l, owned by the pool; its Timeout and OutputBytes are not
// used (each Exec sets its own).
func shapeOf(l Limits) Limits {
	l.Mounts = slices.Clone(l.Mounts)
	return l
}

// sameShape reports whether a container made with limits a can run code
// that asks for limits b.
func sameShape(a, b Limits) bool {
	return a.Memory == b.Memory && a.CPUs == b.CPUs && a.Pids == b.Pids && a.TmpfsSize == b.TmpfsSize &&
		a.NoFile == b.NoFile && a.NProc == b.NProc && slices.Equal(a.Mounts, b.Mounts)
}

// Configure changes the pool's size, max, shrink period, starts in
// flight, the age at which a ready container is replaced, and the shape
// of its containers (a policy reload): ready containers of another shape,
// or beyond the new max, are removed and new ones started.
func (p *Pool) Configure(opts PoolOptions) error {
	opts, err := poolConfig(opts)
	if err != nil {
		return err
	}
	l := opts.Limits
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("the pool is closed")
	}
	changed := !sameShape(p.shape, l)
	if changed {
		p.gen++
		p.shape = shapeOf(l)
		p.filled = false
		p.clearLost()
		// A failing engine may work with the new limits: try at once.
		p.retryAt, p.backoff = time.Time{}, 0
	}
	p.set(opts)
	target := p.target
	drop := p.takeStale(time.Now())
	p.mu.Unlock()
	if changed || len(drop) > 0 {
		p.log.Info().Int("size", opts.Size).Int("max", opts.Max).Int("target", target).Bool("limits_changed", changed).Int("removed", len(drop)).Msg("pool: reconfigured")
	}
	p.discard(drop)
	p.poke()
	return nil
}

// takeStale removes from ready the containers that are dead, too old, of
// an old shape, beyond the target, or whose data mounts' folders were
// deleted or replaced on the host, and returns them. p.mu is held.
func (p *Pool) takeStale(now time.Time) []*Container {
	var drop []*Container
	keep := p.ready[:0]
	for _, r := range p.ready {
		if r.gen != p.gen || len(keep) >= p.target {
			drop = append(drop, r.inst)
			continue
		}
		if p.unusable(r, now) {
			drop = append(drop, r.inst)
			continue
		}
		keep = append(keep, r)
	}
	if len(keep) > 0 {
		p.clearLost()
	}
	clear(p.ready[len(keep):])
	p.ready = keep
	p.winMin = min(p.winMin, len(p.ready))
	return drop
}

// unusable reports whether the ready container r must not run code: it
// died, is too old, or a mount's folder was deleted or replaced since it
// was made (it would show the code an empty or old folder), and notes it
// in lost and lostMount. p.mu is held.
func (p *Pool) unusable(r pooled, now time.Time) bool {
	h := ""
	if !r.inst.ended() && now.Sub(r.born) < p.maxAge {
		if h = r.inst.mountsChanged(); h == "" {
			return false
		}
	}
	p.lost = true
	if h != "" {
		p.lostMount = h
	}
	return true
}

// clearLost notes that the ready containers lost are behind the pool: a
// run missed for them, or it holds one that can run code. p.mu is held.
func (p *Pool) clearLost() {
	p.lost, p.lostMount = false, ""
}

// grow raises the target by one, up to max: a run missed, or took the
// last ready container while the refill was behind. p.mu is held.
func (p *Pool) grow() {
	if p.target < p.max {
		p.target++
		p.stats.Grown++
		p.stats.Target = p.target
	}
}

// shrinkCheck ends the shrink window when it is ShrinkAfter old: with no
// miss in it, the target loses the containers no run needed (the fewest
// ready at any time of the window), or goes back to the size when no run
// came at all; takeStale then removes the ready ones beyond it. p.mu is
// held. It returns by how much the target went down.
func (p *Pool) shrinkCheck(now time.Time) int {
	if now.Sub(p.winStart) < p.shrinkAfter {
		return 0
	}
	down := 0
	if !p.winMiss && p.target > p.size {
		spare := p.winMin
		if !p.winTakes {
			spare = p.target
		}
		down = min(spare, p.target-p.size)
		p.target -= down
		p.stats.Shrunk += int64(down)
		p.stats.Target = p.target
	}
	p.winStart, p.winMiss, p.winTakes, p.winMin = now, false, false, len(p.ready)
	return down
}

// discard removes unused containers in the background.
func (p *Pool) discard(insts []*Container) {
	if len(insts) == 0 {
		return
	}
	p.mu.Lock()
	p.stats.Discarded += int64(len(insts))
	p.mu.Unlock()
	for _, inst := range insts {
		p.Release(inst)
	}
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps the pool at its target until Close, with at most startsMax
// starts in flight, so that a refill never takes all the engine's hands
// from the runs.
func (p *Pool) fill() {
	defer p.filler.Done()
	tick := time.NewTicker(poolCheck)
	defer tick.Stop()
	for {
		now := time.Now()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		down := p.shrinkCheck(now)
		drop := p.takeStale(now)
		n := 0
		if !now.Before(p.retryAt) {
			n = max(0, min(p.target-len(p.ready)-p.starting, p.startsMax-p.starting))
		}
		p.starting += n
		p.stats.Starting = p.starting
		gen, shape, target := p.gen, p.shape, p.target
		// Added under p.mu, before Close can see closed and wait.
		p.starts.Add(n)
		p.mu.Unlock()
		if down > 0 {
			p.log.Info().Int("target", target).Int("by", down).Msg("pool: shrunk, idle")
		}
		p.discard(drop)
		for range n {
			go func() {
				defer p.starts.Done()
				p.startOne(gen, shape)
				p.poke()
			}()
		}
		select {
		case <-p.ctx.Done():
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// startOne starts one container of shape for the pool's generation gen.
func (p *Pool) startOne(gen int, shape Limits) {
	inst, err := p.e.start(p.ctx, shape, NewRunID(), true)
	p.mu.Lock()
	p.starting--
	p.stats.Starting = p.starting
	if err != nil {
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.stats.Failures++
		p.backoff = min(max(2*p.backoff, poolBackoffMin), poolBackoffMax)
		p.retryAt = time.Now().Add(p.backoff)
		p.stats.LastError = err.Error()
		backoff := p.backoff
		p.mu.Unlock()
		p.log.Warn().Err(err).Dur("retry_in", backoff).Msg("pool: starting a container failed; runs start cold until it works again")
		return
	}
	recovered := p.stats.LastError != ""
	p.stats.LastError, p.backoff, p.retryAt = "", 0, time.Time{}
	p.stats.Started++
	if p.closed || gen != p.gen || len(p.ready) >= p.target {
		p.stats.Discarded++
		p.mu.Unlock()
		p.Release(inst)
		return
	}
	p.ready = append(p.ready, pooled{inst: inst, born: time.Now(), gen: gen})
	p.clearLost()
	ready, target := len(p.ready), p.target
	p.filled = p.filled || ready >= target
	p.mu.Unlock()
	ev := p.log.Debug()
	if recovered {
		ev = p.log.Info()
	}
	ev.Int("ready", ready).Int("target", target).Bool("recovered", recovered).Msg("pool: container ready")
}

// take returns a started container of limits l: a ready one of the pool
// when it has one of that shape (warm is true), else a new one, and why
// not in miss. The caller gives it back with Release.
func (p *Pool) take(ctx context.Context, l Limits, name string) (inst *Container, warm bool, miss string, err error) {
	now := time.Now()
	var drop []*Container
	p.mu.Lock()
	switch {
	case p.closed:
		miss = "the pool is closed"
	case p.size == 0:
		miss = "the pool is off"
	case !sameShape(p.shape, l):
		miss = "the run's limits differ from the pool's"
	}
	if miss == "" {
		inst, drop = p.popReady(now)
	}
	// A miss for ready containers the pool lost, this run's own finding
	// or its check's, says why.
	lost, changed := miss == "" && inst == nil && p.lost, p.lostMount
	if miss == "" {
		p.clearLost()
	}
	if miss == "" && p.filled {
		// A run of the pool's shape, the pool on and filled once:
		// demand, for the shrink window, and growth when the pool
		// could not keep up.
		p.winTakes = true
		p.winMin = min(p.winMin, len(p.ready))
		if lost {
			// The ready containers could not be used (dead, too old, a
			// mount changed under them), whether this run or the
			// pool's check found it: a miss, but not demand the pool
			// lacked; it refills them.
		} else if inst == nil {
			p.winMiss = true
			p.grow()
		} else if len(p.ready) == 0 && p.starting > 0 {
			p.grow()
		}
	}
	if inst != nil {
		p.stats.Hits++
	} else {
		p.stats.Misses++
		switch {
		case lost && changed != "":
			miss = "the ready containers' mount " + changed + " was deleted or replaced on the host"
		case miss == "":
			miss = "no ready container"
			if p.stats.LastError != "" {
				miss += " (the pool's starts fail: " + p.stats.LastError + ")"
			}
		}
	}
	p.mu.Unlock()
	p.discard(drop)
	p.poke()
	if inst != nil {
		inst.claim(name)
		return inst, true, "", nil
	}
	// While the engine has no room for the run's container, the pool's
	// ready ones may hold it (a Kubernetes node's CPU and memory): the
	// run takes the first that is ready then, rather than wait for room
	// that no run would free.
	var handed *Container
	inst, err = p.e.Start(WithNoRoom(ctx, func(string) bool {
		handed = p.handOver(l)
		return handed != nil
	}), l, name)
	if handed != nil {
		if err == nil {
			p.Release(inst) // an engine that started it anyway
		}
		handed.claim(name)
		return handed, true, "", nil
	}
	return inst, false, miss, err
}

// popReady takes the first ready container that can run code, and returns
// those found unusable on the way (the cold start instead meets a changed
// mount's folder as it is now, and fails naming it when it is gone). p.mu
// is held.
func (p *Pool) popReady(now time.Time) (inst *Container, drop []*Container) {
	for len(p.ready) > 0 {
		r := p.ready[0]
		p.ready = slices.Delete(p.ready, 0, 1)
		if p.unusable(r, now) {
			drop = append(drop, r.inst)
			continue
		}
		return r.inst, drop
	}
	return nil, drop
}

// handOver is a ready container of limits l for a run that missed and
// whose engine has no room for a container of its own, or nil; the run
// counts as a hit then.
func (p *Pool) handOver(l Limits) *Container {
	p.mu.Lock()
	if p.closed || p.size == 0 || !sameShape(p.shape, l) {
		p.mu.Unlock()
		return nil
	}
	inst, drop := p.popReady(time.Now())
	if inst != nil {
		p.clearLost()
		p.stats.Misses--
		p.stats.Hits++
		p.winMin = min(p.winMin, len(p.ready))
	}
	p.mu.Unlock()
	p.discard(drop)
	if inst != nil {
		p.poke()
	}
	return inst
}

// Acquire returns an [Instance] of limits l for the run runID: a container
// the pool had ready when it has one of that shape, else one started for
// the run. The pool refills behind it. Its Close hands the container back
// to be removed in the background.
func (p *Pool) Acquire(ctx context.Context, l Limits, runID string) (Instance, error) {
	began := time.Now()
	inst, warm, miss, err := p.take(ctx, l, runID)
	if err != nil {
		return nil, err
	}
	return &Lease{p: p, c: inst, warm: warm, miss: miss, limits: l, name: runID, began: began}, nil
}

// errLeaseClosed is a [Lease]'s Exec error once Close was called: the
// container is gone, or was never started for it.
var errLeaseClosed = errors.New("the sandbox was closed")

// Lease is an [Instance] a run got from a [Pool] ([Pool.Acquire]).
type Lease struct {
	p      *Pool
	warm   bool
	miss   string // why the run is not warm
	limits Limits
	name   string // the run's id, or the session's, that names the container
	began  time.Time
	execs  int // Execs begun: a session's container runs more than one

	mu     sync.Mutex
	c      *Container // nil once closed, or while the lease starts another
	closed bool
}

// Exec runs x in the leased container. When that was a ready one that had
// died before it took the code (an engine restart kills them all), the
// code runs in a container started for it instead. The first Exec's
// [Result] says whether the run was warm, and else why not. Execs of one
// [Lease] do not overlap (the container refuses a second one at once).
func (l *Lease) Exec(ctx context.Context, x ExecRequest) (Result, error) {
	l.execs++
	l.mu.Lock()
	c := l.c
	l.mu.Unlock()
	if c == nil {
		return Result{}, errLeaseClosed
	}
	if l.execs > 1 {
		return c.Exec(ctx, x)
	}
	x.Began = l.began
	res, err := c.Exec(ctx, x)
	if l.warm && errors.Is(err, errNotHandedOver) {
		c.log.Warn().Err(err).Msg("pool: a ready container had died; running the code in a fresh one")
		l.warm, l.miss = false, "a ready container had died"
		res, err = l.retry(ctx, c, x)
	}
	res.Warm, res.Cold = l.warm, l.miss
	return res, err
}

// retry gives back dead, the ready container that died, and runs x in a
// container started for it, unless the lease is closed meanwhile (the
// new container is then given back unused).
func (l *Lease) retry(ctx context.Context, dead *Container, x ExecRequest) (Result, error) {
	l.mu.Lock()
	l.c = nil
	closed := l.closed
	l.mu.Unlock()
	l.p.Release(dead)
	if closed {
		return Result{}, errLeaseClosed
	}
	c, err := l.p.e.Start(ctx, l.limits, l.name)
	if err != nil {
		return startFailed(Result{RunID: x.RunID}, err, l.began)
	}
	l.mu.Lock()
	if closed = l.closed; !closed {
		l.c = c
	}
	l.mu.Unlock()
	if closed {
		l.p.Release(c)
		return Result{}, errLeaseClosed
	}
	return c.Exec(ctx, x)
}

// Kept reports whether the leased container keeps a session's interpreter.
func (l *Lease) Kept() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c != nil && l.c.Kept()
}

// Closed reports whether Close was called.
func (l *Lease) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close hands the container back to the pool, which removes it in the
// background ([Pool.Close] waits for that).
func (l *Lease) Close(context.Context) error {
	l.mu.Lock()
	c, closed := l.c, l.closed
	l.closed = true
	l.mu.Unlock()
	if !closed && c != nil {
		l.p.Release(c)
	}
	return nil
}

// Release removes inst in the background; Close waits for it. After
// Close (a run that outlived the pool's engine) it removes inst before
// it returns.
func (p *Pool) Release(inst *Container) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if err := inst.Close(context.Background()); err != nil {
			inst.log.Warn().Err(err).Msg("removing a used container")
		}
		return
	}
	p.stats.Removing++
	p.removing.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.removing.Done()
		if err := inst.Close(context.Background()); err != nil {
			inst.log.Warn().Err(err).Msg("removing a used container")
		}
		p.mu.Lock()
		p.stats.Removing--
		p.stats.Removed++
		p.mu.Unlock()
	}()
}

// Stats returns the pool's state and what it did so far: a copy taken
// under the pool's lock, cheap enough for every metrics scrape.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Ready = len(p.ready)
	return s
}

// Run runs req in a ready container when the pool has one of its shape,
// else in a fresh one, and answers before the container's removal is
// done (Close waits for it): Acquire, Exec, Close.
func (p *Pool) Run(ctx context.Context, req Request) (Result, error) {
	return run(ctx, p.Acquire, req)
}

// Close stops filling, removes the ready containers, and waits until every
// removal it started is done or ctx ends. Runs must not be started after
// Close.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	drop := make([]*Container, 0, len(p.ready))
	for _, r := range p.ready {
		drop = append(drop, r.inst)
	}
	p.ready = nil
	p.mu.Unlock()
	p.cancel()
	p.discard(drop)
	done := make(chan struct{})
	go func() {
		p.filler.Wait()
		p.starts.Wait()
		p.removing.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the pool's containers were not all removed in time (the next start of the bridge removes them): %w", ctx.Err())
	}
}
