package snapshots

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

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
	if w.tfd >= 0 {
		_ = unix.Unlinkat(w.tfd, filesName, 0)
		_ = unix.Unlinkat(w.tfd, metaName, 0)
		unix.Close(w.tfd)
	}
	_ = unix.Unlinkat(int(w.of.Fd()), w.tmp, unix.AT_REMOVEDIR)
	w.of.Close()
}

// Commit makes the snapshot appear under its label, in one rename, with
// its metadata; a snapshot of that label is replaced then, not before. It
// first removes the owner's expired snapshots, then evicts its oldest
// while the owner would keep more than MaxCount or MaxBytes. Its files
// are synced before they appear, so a crash leaves the old snapshot or
// the new one, whole.
func (w *Writer) Commit() (Saved, error) {
	if w.err != nil {
		return Saved{}, w.err
	}
	if w.done {
		return Saved{}, errors.New("the snapshot was already committed")
	}
	s := w.s
	created := s.now().UTC()
	e := Entry{Owner: w.owner, Label: w.label, Meta: w.meta, Size: w.n, Created: created, Expires: created.Add(s.ttl)}
	if err := w.finish(e); err != nil {
		w.fail(fmt.Errorf("writing snapshot %q to %s: %w (is its disk full?)", w.label, s.dir, err))
		return Saved{}, w.err
	}
	if err := s.enter(); err != nil {
		w.fail(err)
		return Saved{}, err
	}
	defer s.leave()
	saved, retired, events, err := w.publish(e)
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
// temporary folder to the label. It returns the paths retired (for
// discard) and the events, even when it fails part way.
func (w *Writer) publish(e Entry) (Saved, []string, []Event, error) {
	s := w.s
	unlock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return Saved{}, nil, nil, err
	}
	defer unlock()
	now := s.now()
	var keep, gone []Entry
	var prev *Entry
	for _, x := range s.scan(w.of).entries {
		switch {
		case x.Label == w.label:
			if now.Before(x.Expires) {
				prev = &x
			}
		case !now.Before(x.Expires):
			gone = append(gone, x)
		default:
			keep = append(keep, x)
		}
	}
	var events []Event
	for _, x := range gone {
		events = append(events, Event{Action: ActionExpired, Entry: x})
	}
	var total int64
	for _, x := range keep {
		total += x.Size
	}
	saved := Saved{Entry: e}
	for len(keep) > 0 && (len(keep)+1 > s.maxCount || total+e.Size > s.maxBytes) {
		x := keep[0]
		keep, total = keep[1:], total-x.Size
		gone = append(gone, x)
		saved.Evicted = append(saved.Evicted, x)
		events = append(events, Event{Action: ActionEvicted, Entry: x, Reason: fmt.Sprintf("the oldest of %s's snapshots, removed to make room for %q (snapshots.max_count %d, max_bytes %s)",
			x.Owner, e.Label, s.maxCount, units.Bytes(s.maxBytes))})
	}
	var retired []string
	for _, x := range gone {
		p, err := s.retire(w.of, x.Label)
		if err != nil {
			return Saved{}, retired, events, err
		}
		retired = append(retired, p)
	}
	p, err := w.rename()
	if p != "" {
		retired = append(retired, p)
	}
	if err != nil {
		return Saved{}, retired, events, err
	}
	ev := Event{Action: ActionSaved, Entry: e}
	if prev != nil {
		saved.Replaced = true
		ev.Reason = fmt.Sprintf("replaced the snapshot of that label saved %s", prev.Created.Format("2006-01-02 15:04:05Z07:00"))
	}
	return saved, retired, append(events, ev), nil
}

// rename retires what has the label, if anything does, and renames the
// temporary folder to it; it returns the path retired.
func (w *Writer) rename() (string, error) {
	ofd := int(w.of.Fd())
	var old string
	var st unix.Stat_t
	if unix.Fstatat(ofd, w.label, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		p, err := w.s.retire(w.of, w.label)
		if err != nil {
			return "", err
		}
		old = p
	}
	if err := unix.Renameat(ofd, w.tmp, ofd, w.label); err != nil {
		if old != "" && unix.Renameat(ofd, filepath.Base(old), ofd, w.label) == nil {
			old = ""
		}
		return old, fmt.Errorf("naming snapshot %q in %s: %w", w.label, w.of.Name(), err)
	}
	if err := unix.Fsync(ofd); err != nil {
		w.s.log.Warn().Err(err).Str("folder", w.of.Name()).Msg("snapshots: could not sync the folder after a save")
	}
	return old, nil
}
