package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// Memory snapshots: where the engine can checkpoint a running sandbox
// (gVisor's runsc, [Checkpointer]), a session's whole state, its
// processes and memory with its files, is saved between two calls and
// restored later, once or more (a fork). The runner first parks (relay
// protocol 7, docs/protocol.md "Parking"): it closes the relay and waits
// for a signal, so that nothing outside the sandbox is open when it is
// checkpointed; woken in the restored sandbox, it reads a new token and
// connects again from one of the spare sockets it made before it was
// confined.

// Checkpointer is a [Runtime] that can save a running container whole
// and start others from what it saved: sandbox/runsc.
type Checkpointer interface {
	// Checkpoint writes container id's whole state into the folder dir;
	// the container ends.
	Checkpoint(ctx context.Context, id, dir string) error
	// Restore starts container id from the checkpoint in dir with spec
	// (the checkpointed one's; its run folder the same one, for a session
	// that goes on, or its own); its runner stays parked until Wake.
	Restore(ctx context.Context, id string, spec ContainerSpec, dir string) error
	// Wake tells a restored container's parked runner to connect again.
	Wake(ctx context.Context, id string) error
	// WriteToken puts the relay token a woken runner says hello with in
	// the run folder runDir.
	WriteToken(runDir, token string) error
	// TokenFile is the token's file in the run folder: removed once the
	// runner said hello (the code can read the run folder).
	TokenFile() string
	// CheckpointTag names what a checkpoint of a container of image can
	// be restored into: a checkpoint restores only where the tag is the
	// same (the runtime's version, the image's id).
	CheckpointTag(ctx context.Context, image string) (string, error)
}

// MemorySaver is an [Instance] whose session can be saved whole between
// two calls ([Container.SaveMemory]).
type MemorySaver interface {
	// MemoryTag is the [Checkpointer.CheckpointTag] of the instance's
	// sandbox, or an error saying why its memory cannot be saved.
	MemoryTag(ctx context.Context) (string, error)
	// SaveMemory checkpoints the session into the folder dir and goes on
	// in a sandbox restored from it at once.
	SaveMemory(ctx context.Context, dir string) error
}

// ErrNoCheckpoint is the error of a memory save or restore on an engine
// that cannot checkpoint (runc under Docker or Podman, Kubernetes): only
// files can be kept there.
var ErrNoCheckpoint = errors.New("this engine cannot checkpoint a sandbox's memory (only the runsc engine, gVisor, can)")

// ErrNoParks is SaveMemory's error for a session whose runner has no
// spare connection left to come back with: it lives on, but from now on
// only its files can be saved.
var ErrNoParks = errors.New("this session was saved or restored as often as its runner can come back (each time uses one of the spare connections it made at its start)")

// ResumeError is SaveMemory's error when the checkpoint was written whole
// but the session could not go on in a sandbox restored from it: the
// snapshot is good, the session is over.
type ResumeError struct{ Err error }

func (e *ResumeError) Error() string {
	return "the session's memory was saved, but the session could not go on from it: " + e.Err.Error()
}
func (e *ResumeError) Unwrap() error { return e.Err }

// checkpointTimeout bounds a checkpoint: runsc writes the sandbox's
// memory (a second for 200 MB here; a few GiB take tens of seconds).
const checkpointTimeout = 5 * time.Minute

// parkTimeoutDefault bounds the runner's answer to park.
const parkTimeoutDefault = 10 * time.Second

// MemoryTag implements [MemorySaver].
func (i *Container) MemoryTag(ctx context.Context) (string, error) {
	cp, ok := i.e.rt.(Checkpointer)
	if !ok {
		return "", ErrNoCheckpoint
	}
	if i.conn == nil || i.conn.hello.Parks == 0 {
		return "", ErrNoParks
	}
	return cp.CheckpointTag(ctx, i.e.opts.Image)
}

// SaveMemory parks the session's runner, checkpoints the sandbox into dir
// and restores it from there as a new container of the same name and run
// folder, whose runner comes back with a new token: the session goes on
// where it was. On an error the session is ended (the instance is no
// longer Kept), but for ErrNoCheckpoint, ErrNoParks and an instance that
// holds no idle session. It holds the instance as an Exec does.
func (i *Container) SaveMemory(ctx context.Context, dir string) (err error) {
	cp, ok := i.e.rt.(Checkpointer)
	if !ok {
		return ErrNoCheckpoint
	}
	i.mu.Lock()
	ok = i.session && i.kept && !i.busy && !i.closed && !i.ended()
	if ok {
		i.busy = true
	}
	i.mu.Unlock()
	if !ok {
		return errNoIdleSession
	}
	broken := true
	defer func() {
		i.mu.Lock()
		i.busy = false
		if broken {
			i.kept = false
		}
		i.mu.Unlock()
	}()
	if i.conn.hello.Parks == 0 {
		broken = false
		return ErrNoParks
	}
	began := time.Now()
	if err := i.park(ctx); err != nil {
		return err
	}
	parked := time.Now()
	old := i.id
	// The checkpoint and the resume run to their end whatever the call's
	// deadline says: cut short, they leave a session that is lost and a
	// checkpoint that may be whole. Each has its own bound.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkpointTimeout)
	err = cp.Checkpoint(cctx, old, dir)
	cancel()
	if err != nil {
		return fmt.Errorf("saving the session's memory: %w", err)
	}
	checkpointed := time.Now()
	// Once a restored container took its place (even one that then
	// failed), Close removes that one: the checkpointed one is ours to.
	defer func() {
		i.mu.Lock()
		swapped := i.id != old
		i.mu.Unlock()
		if !swapped {
			return
		}
		// In the background (runsc takes a second or more to delete a
		// sandbox of a few GiB's limit): the call does not wait for it,
		// and the Executor's Close does.
		if !i.e.removals.add(old) { // the Executor is closing: now
			_ = i.e.remove(context.WithoutCancel(ctx), old, i.log)
		}
	}()
	// The checkpoint ended the sandbox: its wait is over.
	i.stopWait()
	<-i.exited
	ln, err := i.listen()
	if err != nil {
		return err
	}
	defer ln.Close()
	i.restores++
	if err := i.resume(context.WithoutCancel(ctx), cp, ln, dir, i.name+"-r"+strconv.Itoa(i.restores)); err != nil {
		return &ResumeError{Err: err}
	}
	broken = false
	i.log.Info().Dur("park", parked.Sub(began)).Dur("checkpoint", checkpointed.Sub(parked)).Dur("resume", time.Since(checkpointed)).
		Msg("session saved whole")
	return nil
}

// park asks the runner to park, and waits for parked and the relay's end.
func (i *Container) park(ctx context.Context) error {
	conn := i.conn
	unhook := context.AfterFunc(ctx, func() { conn.Close() })
	defer unhook()
	deadline := time.Now().Add(i.e.parkTimeout)
	conn.mu.Lock()
	_ = conn.SetWriteDeadline(deadline)
	err := conn.enc.Park()
	conn.mu.Unlock()
	if err != nil {
		conn.Close()
		return fmt.Errorf("parking the session's runner: %w", err)
	}
	_ = conn.SetReadDeadline(deadline)
	m, err := conn.dec.Decode()
	if err == nil && m.Type != relay.TypeParked {
		err = fmt.Errorf("%w: %s frame in answer to park", relay.ErrProtocol, m.Type)
	}
	if err == nil {
		// Parked, the runner closes its end: nothing more may come.
		if _, eof := conn.dec.Decode(); !errors.Is(eof, io.EOF) {
			err = fmt.Errorf("%w: the runner went on after parked (%v)", relay.ErrProtocol, eof)
		}
	}
	conn.Close()
	if err != nil {
		return fmt.Errorf("parking the session's runner: %w", err)
	}
	return nil
}

// listen makes the relay socket of the run folder anew, for a restored
// runner to connect to.
func (i *Container) listen() (*net.UnixListener, error) {
	sock := filepath.Join(i.dir, "relay.sock")
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("renewing the relay socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("renewing the relay socket: %w", err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// resume starts container id from the checkpoint in dir, wakes its
// runner and takes its connection on ln, with a new token: the
// instance's container from then on.
func (i *Container) resume(ctx context.Context, cp Checkpointer, ln *net.UnixListener, dir, id string) error {
	e := i.e
	engineCtx := context.WithoutCancel(ctx)
	token := newID(16)
	if err := cp.WriteToken(i.dir, token); err != nil {
		return fmt.Errorf("writing the relay token: %w", err)
	}
	defer os.Remove(filepath.Join(i.dir, cp.TokenFile()))
	rctx, cancel := context.WithTimeout(engineCtx, e.opts.StartTimeout)
	began := time.Now()
	err := cp.Restore(rctx, id, i.spec(token, false), dir)
	cancel()
	restored := time.Now()
	if err != nil {
		// A restore cut short may still have made the container, as a
		// create may.
		e.remove(engineCtx, id, i.log)
		return e.withHint(fmt.Errorf("restoring the sandbox: %w", err))
	}
	e.host.created(id)
	i.mu.Lock()
	i.id = id
	closed := i.closed
	if !closed {
		i.watch(engineCtx)
	}
	i.mu.Unlock()
	if closed { // Close ran meanwhile, on the container before this one
		if rerr := e.remove(engineCtx, id, i.log); rerr != nil {
			i.log.Warn().Err(rerr).Msg("removing a restored sandbox of a closed session")
		}
		return errors.New("this sandbox instance was closed")
	}
	done := make(chan struct{})
	defer close(done)
	accepted := make(chan *runnerConn)
	go acceptRunner(ln, token, true, accepted, done, i.log)
	wctx, cancel := context.WithTimeout(engineCtx, e.opts.StartTimeout)
	err = cp.Wake(wctx, id)
	cancel()
	if err != nil {
		return fmt.Errorf("waking the restored runner: %w", err)
	}
	timer := time.NewTimer(e.opts.StartTimeout)
	defer timer.Stop()
	select {
	case conn := <-accepted:
		i.log.Debug().Dur("restore", restored.Sub(began)).Dur("wake", time.Since(restored)).Str("container", id).Msg("restored sandbox connected")
		i.mu.Lock()
		closed := i.closed
		if !closed {
			i.conn = conn
		}
		i.mu.Unlock()
		if closed { // Close ran meanwhile: it would not close this one
			conn.Close()
			return errors.New("this sandbox instance was closed")
		}
		return nil
	case w := <-i.exited:
		return e.earlyExit(ctx, id, w, i.limits)
	case <-timer.C:
		return fmt.Errorf("the restored runner did not connect within %s", e.opts.StartTimeout)
	case <-ctx.Done():
		return ErrStartCancelled
	}
}

// Restore starts a session's container from the checkpoint in dir (what
// [Container.SaveMemory] saved, of a container of the same image and
// engine), its runner connected and the session's interpreter there for
// the next Exec. name names it as Start's does. On any error, what was
// made is removed.
func (e *Executor) Restore(ctx context.Context, l Limits, name, dir string) (inst *Container, err error) {
	cp, ok := e.rt.(Checkpointer)
	if !ok {
		return nil, ErrNoCheckpoint
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("invalid limits: %w", err)
	}
	if !validRunID(name) {
		return nil, fmt.Errorf("invalid run id %q: 1 to 32 lower-case letters and digits", name)
	}
	if !e.enforce.All() && !e.opts.AllowUnenforcedLimits {
		// As Start: a restored sandbox runs without the limits the engine
		// cannot enforce (spec drops them).
		return nil, fmt.Errorf("%w on %s: %s (to run anyway without these limits, pass --allow-unenforced-limits, or set require_enforced_limits: false in the policy)",
			ErrLimitsNotEnforced, e.rt.Name(), e.enforce.Reason)
	}
	log := e.log.With().Str("run_id", name).Str("engine", e.rt.Name()).Logger()
	i := &Container{e: e, name: name, log: log, start: time.Now(), limits: l}
	defer func() {
		if err != nil {
			if cerr := i.Close(ctx); cerr != nil {
				log.Warn().Err(cerr).Msg("cleaning up a sandbox that failed to restore")
			}
		}
	}()
	ln, err := i.makeRunDir()
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	i.mounted = statDataMounts(l.Mounts)
	if err := i.resume(ctx, cp, ln, dir, name); err != nil {
		return nil, err
	}
	i.mu.Lock()
	i.used, i.session, i.kept = true, true, true
	i.mu.Unlock()
	return i, nil
}

// MemoryTag implements [MemorySaver] for the leased container.
func (l *Lease) MemoryTag(ctx context.Context) (string, error) {
	c := l.container()
	if c == nil {
		return "", errLeaseClosed
	}
	return c.MemoryTag(ctx)
}

// SaveMemory implements [MemorySaver] for the leased container.
func (l *Lease) SaveMemory(ctx context.Context, dir string) error {
	c := l.container()
	if c == nil {
		return errLeaseClosed
	}
	return c.SaveMemory(ctx, dir)
}

// container is the leased container, nil once the lease is closed.
func (l *Lease) container() *Container {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c
}

// MemoryTag implements [MemorySaver], if the instance can.
func (ei *engineInstance) MemoryTag(ctx context.Context) (string, error) {
	m, ok := ei.Instance.(MemorySaver)
	if !ok {
		return "", ErrNoCheckpoint
	}
	return m.MemoryTag(ctx)
}

// SaveMemory implements [MemorySaver], if the instance can.
func (ei *engineInstance) SaveMemory(ctx context.Context, dir string) error {
	m, ok := ei.Instance.(MemorySaver)
	if !ok {
		return ErrNoCheckpoint
	}
	return m.SaveMemory(ctx, dir)
}

// CheckpointTag is the engine's [Checkpointer.CheckpointTag] for its
// runner image: a memory snapshot whose tag is another is restored as
// files only. ErrNoCheckpoint where the engine cannot checkpoint.
func (e *Engine) CheckpointTag(ctx context.Context) (string, error) {
	o, err := e.acquire(ctx)
	if err != nil {
		return "", err
	}
	defer e.release(o)
	cp, ok := o.rt.(Checkpointer)
	if !ok {
		return "", ErrNoCheckpoint
	}
	return cp.CheckpointTag(ctx, o.ex.opts.Image)
}

// Restore starts a session's sandbox from the checkpoint in dir
// ([Executor.Restore]); the warm pool is not used.
func (e *Engine) Restore(ctx context.Context, l Limits, runID, dir string) (Instance, error) {
	o, err := e.acquire(ctx)
	if err != nil {
		return nil, err
	}
	inst, err := o.ex.Restore(ctx, l, runID, dir)
	if err != nil {
		e.failed(o, err)
		e.release(o)
		return nil, err
	}
	return &engineInstance{Instance: inst, e: e, o: o}, nil
}
