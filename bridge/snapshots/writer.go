package snapshots

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bridge-mcp/bridge/internal/units"
)

// Writer writes one snapshot: its files.tar through Write, then Commit
// makes it appear whole under its label (replacing one of that label), or
// Abort removes it. It is not safe for concurrent use; several Writers,
// of one label too, may write at once.
type Writer struct {
	s            *Store
	owner, label string
	meta         Meta
	of           *os.File // the owner's folder
	tmp          string   // the temporary folder's name in it
	tfd          int      // the temporary folder, open and flocked until the writer ends
	f            *os.File // its files.tar
	memDir       string   // the memory folder's path, once MemoryDir made it
	n            int64
	err          error // the first failure: every later call returns it
	done         bool
}

// Saved is what Commit did.
type Saved struct {
	Entry
	// Replaced: a snapshot of the same label was replaced.
	Replaced bool
	// Evicted are the owner's oldest snapshots removed to stay within
	// MaxCount and MaxBytes, oldest first.
	Evicted []Entry
}

// Create starts writing a snapshot of owner under label. Nothing is
// visible until Commit; until then a snapshot of that label stays as it
// was, readable. The error is ErrInvalid for an owner, label or Meta the
// store does not take (see CheckLabel and the Max constants).
func (s *Store) Create(owner, label string, m Meta) (*Writer, error) {
	if err := checkOwner(owner); err != nil {
		return nil, err
	}
	if err := CheckLabel(label); err != nil {
		return nil, err
	}
	m.Extra = maps.Clone(m.Extra)
	if err := m.check(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	// Under the shared lock: Prune, under the exclusive one, never sees
	// the temporary folder before the writer holds it.
	unlock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	of, err := s.openOwner(ownerDirName(owner), true)
	if err != nil {
		return nil, err
	}
	w := &Writer{s: s, owner: owner, label: label, meta: m, of: of, tmp: tmpPrefix + randomHex(), tfd: -1}
	if err := w.start(); err != nil {
		w.cleanup()
		return nil, fmt.Errorf("starting a snapshot in %s: %w", of.Name(), err)
	}
	return w, nil
}

// start makes the temporary folder, locks it, and creates files.tar in it.
func (w *Writer) start() error {
	ofd := int(w.of.Fd())
	if err := unix.Mkdirat(ofd, w.tmp, 0o700); err != nil {
		return err
	}
	fd, err := unix.Openat(ofd, w.tmp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	w.tfd = fd
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return err
	}
	ffd, err := unix.Openat(fd, filesName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	w.f = os.NewFile(uintptr(ffd), filepath.Join(w.of.Name(), w.tmp, filesName))
	return nil
}

// Write writes the next bytes of files.tar. Past MaxBytes it writes
// nothing and fails with ErrTooLarge; after any failure the snapshot is
// abandoned (its files removed) and every call returns that error.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.done {
		return 0, errors.New("the snapshot was already committed")
	}
	if limit := w.s.maxBytes; w.n+int64(len(p)) > limit {
		w.fail(&kindError{fmt.Sprintf("snapshot %q is larger than %s, the most one client keeps (snapshots.max_bytes): keep less in /tmp, or ask the operator to raise snapshots.max_bytes",
			w.label, units.Bytes(limit)), []error{ErrTooLarge}})
		return 0, w.err
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	if err != nil {
		w.fail(fmt.Errorf("writing snapshot %q to %s: %w (is its disk full?)", w.label, w.s.dir, err))
		return n, w.err
	}
	return n, nil
}

// Abort abandons the snapshot, removing what was written. It may be
// called more than once, and after Commit (then it does nothing).
func (w *Writer) Abort() {
	if w.err == nil && !w.done {
		w.fail(errors.New("the snapshot was aborted"))
	}
}

// fail records err and removes the temporary folder.
func (w *Writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
	if !w.done {
		w.done = true
		w.cleanup()
	}
}

// cleanup removes the temporary folder and closes what the writer holds.
func (w *Writer) cleanup() {
	if w.f != nil {
		w.f.Close()
	}
	// Removed while still locked, so that Prune never takes it for a
	// writer's that died and removes it too.
	if err := removeTree(int(w.of.Fd()), w.tmp, 0); err != nil {
		w.s.log.Warn().Err(err).Str("folder", filepath.Join(w.of.Name(), w.tmp)).Msg("snapshots: could not remove an abandoned snapshot; the next sweep tries again")
	}
	if w.tfd >= 0 {
		unix.Close(w.tfd)
	}
	w.of.Close()
}

// Commit makes the snapshot appear under its label, in one rename, with
// its metadata; a snapshot of that label is replaced then, not before. It
// first removes the owner's expired snapshots, then evicts its oldest
// while the owner would keep more than MaxCount or MaxBytes (a snapshot
// counts its files.tar and its memory folder). Its files are synced
// before they appear, so a crash leaves the old snapshot or the new one,
// whole. A snapshot it must replace or evict while a restore holds it
// (OpenMemory) is waited for, up to Options.WaitHeld.
func (w *Writer) Commit() (Saved, error) {
	if w.err != nil {
		return Saved{}, w.err
	}
	if w.done {
		return Saved{}, errors.New("the snapshot was already committed")
	}
	s := w.s
	mem, err := w.memoryBytes()
	if err != nil {
		w.fail(err)
		return Saved{}, w.err
	}
	if w.n+mem > s.maxBytes {
		w.fail(&kindError{fmt.Sprintf("snapshot %q is %s (files %s, memory %s), more than %s, the most one client keeps (snapshots.max_bytes): hold less in the session, or ask the operator to raise snapshots.max_bytes",
			w.label, units.Bytes(w.n+mem), units.Bytes(w.n), units.Bytes(mem), units.Bytes(s.maxBytes)), []error{ErrTooLarge}})
		return Saved{}, w.err
	}
	created := s.now().UTC()
	e := Entry{Owner: w.owner, Label: w.label, Meta: w.meta, Size: w.n, MemoryBytes: mem, Created: created, Expires: created.Add(s.ttl)}
	if err := w.finish(e); err != nil {
		w.fail(fmt.Errorf("writing snapshot %q to %s: %w (is its disk full?)", w.label, s.dir, err))
		return Saved{}, w.err
	}
	deadline := time.Now().Add(s.waitHeldFor)
	for {
		saved, err := w.commit(e)
		h, ok := err.(*heldError)
		if !ok {
			return saved, err
		}
		if err := s.waitHeld(h, deadline); err != nil {
			w.fail(fmt.Errorf("saving snapshot %q: %w", w.label, err))
			return Saved{}, w.err
		}
	}
}

// commit is one try of publishing: a *heldError, and the writer still
// whole, if a reader holds a snapshot it must remove.
func (w *Writer) commit(e Entry) (Saved, error) {
	s := w.s
	if err := s.enter(); err != nil {
		w.fail(err)
		return Saved{}, err
	}
	defer s.leave()
	saved, retired, events, err := w.publish(e)
	if _, ok := err.(*heldError); ok {
		return Saved{}, err
	}
	if err != nil {
		w.fail(err)
	} else {
		w.done = true
		unix.Close(w.tfd)
		w.of.Close()
	}
	s.discard(retired...)
	s.emit(events...)
	return saved, err
}

// finish syncs files.tar, writes meta.json and syncs the folder.
func (w *Writer) finish(e Entry) error {
	if err := w.f.Sync(); err != nil {
		return err
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return err
	}
	if err := writeMeta(w.tfd, e); err != nil {
		return err
	}
	return unix.Fsync(w.tfd)
}

// publish, under the exclusive lock, retires the owner's expired
// snapshots, those evicted and the one replaced, and renames the
// temporary folder to the label. It returns the entries retired (for
// discard) and the events, even when it fails part way. If a reader holds
// one it must evict or replace, it changes nothing and returns a
// *heldError; expired ones held stay for a later sweep.
func (w *Writer) publish(e Entry) (Saved, []retired, []Event, error) {
	s := w.s
	unlock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return Saved{}, nil, nil, err
	}
	defer unlock()
	ofd := int(w.of.Fd())
	if fd, held := isHeld(ofd, w.label); held {
		return Saved{}, nil, nil, &heldError{label: w.label, fd: fd}
	}
	saved, gone, events, prev, err := w.plan(e)
	if err != nil {
		return Saved{}, nil, nil, err
	}
	var rs []retired
	for _, x := range gone {
		r, err := s.retire(w.of, x.Label)
		if err != nil {
			return Saved{}, rs, events, err
		}
		rs = append(rs, r)
	}
	r, err := w.rename()
	if r.name != "" {
		rs = append(rs, r)
	}
	if err != nil {
		return Saved{}, rs, events, err
	}
	ev := Event{Action: ActionSaved, Entry: e}
	if prev != nil {
		saved.Replaced = true
		ev.Reason = fmt.Sprintf("replaced the snapshot of that label saved %s", prev.Created.Format("2006-01-02 15:04:05Z07:00"))
	}
	return saved, rs, append(events, ev), nil
}

// plan says, under the exclusive lock, what publish removes: the owner's
// expired snapshots that no reader holds, and its oldest while it would
// keep more than MaxCount or MaxBytes; a *heldError if one of those is
// held. prev is the snapshot of the label, if one has not expired.
func (w *Writer) plan(e Entry) (saved Saved, gone []Entry, events []Event, prev *Entry, err error) {
	s := w.s
	ofd := int(w.of.Fd())
	now := s.now()
	var keep []Entry
	for _, x := range s.scan(w.of).entries {
		switch {
		case x.Label == w.label:
			if now.Before(x.Expires) {
				prev = &x
			}
		case !now.Before(x.Expires):
			if fd, held := isHeld(ofd, x.Label); held {
				unix.Close(fd) // a later sweep removes it
				continue
			}
			gone = append(gone, x)
			events = append(events, Event{Action: ActionExpired, Entry: x})
		default:
			keep = append(keep, x)
		}
	}
	var total int64
	for _, x := range keep {
		total += x.bytes()
	}
	saved = Saved{Entry: e}
	for len(keep) > 0 && (len(keep)+1 > s.maxCount || total+e.bytes() > s.maxBytes) {
		x := keep[0]
		if fd, held := isHeld(ofd, x.Label); held {
			return Saved{}, nil, nil, nil, &heldError{label: x.Label, fd: fd}
		}
		keep, total = keep[1:], total-x.bytes()
		gone = append(gone, x)
		saved.Evicted = append(saved.Evicted, x)
		events = append(events, Event{Action: ActionEvicted, Entry: x, Reason: fmt.Sprintf("the oldest of %s's snapshots, removed to make room for %q (snapshots.max_count %d, max_bytes %s)",
			x.Owner, e.Label, s.maxCount, units.Bytes(s.maxBytes))})
	}
	return saved, gone, events, prev, nil
}

// rename retires what has the label, if anything does, and renames the
// temporary folder to it; it returns what it retired. It unlocks the
// folder once renamed, under the store's lock still: from then on it is a
// snapshot, which a reader may hold (OpenMemory) without waiting.
func (w *Writer) rename() (retired, error) {
	ofd := int(w.of.Fd())
	var old retired
	var st unix.Stat_t
	if unix.Fstatat(ofd, w.label, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		r, err := w.s.retire(w.of, w.label)
		if err != nil {
			return retired{}, err
		}
		old = r
	}
	if err := unix.Renameat(ofd, w.tmp, ofd, w.label); err != nil {
		if old.name != "" && unix.Renameat(ofd, old.name, ofd, w.label) == nil {
			old = retired{}
		}
		return old, fmt.Errorf("naming snapshot %q in %s: %w", w.label, w.of.Name(), err)
	}
	_ = unix.Flock(w.tfd, unix.LOCK_UN)
	if err := unix.Fsync(ofd); err != nil {
		w.s.log.Warn().Err(err).Str("folder", w.of.Name()).Msg("snapshots: could not sync the folder after a save")
	}
	return old, nil
}
