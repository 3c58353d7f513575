package snapshots

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bridge-mcp/bridge/internal/units"
)

const (
	// memoryName is the folder of a memory snapshot's checkpoint files.
	memoryName = "memory"
	// maxTreeDepth bounds how deep a memory folder nests (gVisor writes a
	// flat one): deeper is refused at Commit, and left to the operator by
	// a removal rather than recursing without end.
	maxTreeDepth = 16
	// heldPoll is how often a save or Remove looks again at a snapshot a
	// reader holds.
	heldPoll = 20 * time.Millisecond
)

// MemoryDir makes the folder memory/ (mode 0700) in the snapshot being
// written, on the first call, and returns its absolute path, the same on
// later calls: the engine writes the checkpoint of the session's memory
// there (runsc checkpoint --image-path). Only regular files and folders
// may be in it at Commit, which counts their bytes. Only for a Writer of
// KindMemory.
func (w *Writer) MemoryDir() (string, error) {
	if w.err != nil {
		return "", w.err
	}
	if w.done {
		return "", errors.New("the snapshot was already committed")
	}
	if w.meta.Kind != KindMemory {
		return "", invalidf("snapshot %q is of kind %s: only a snapshot created with kind %s holds a memory folder", w.label, w.meta.Kind, KindMemory)
	}
	if w.memDir == "" {
		if err := unix.Mkdirat(w.tfd, memoryName, 0o700); err != nil {
			w.fail(fmt.Errorf("creating the memory folder of snapshot %q in %s: %w (is its disk full?)", w.label, w.s.dir, err))
			return "", w.err
		}
		w.memDir = filepath.Join(w.of.Name(), w.tmp, memoryName)
	}
	return w.memDir, nil
}

// memoryBytes counts and syncs what the engine wrote in memory/, for
// Commit: 0 for a snapshot of files.
func (w *Writer) memoryBytes() (int64, error) {
	if w.meta.Kind != KindMemory {
		return 0, nil
	}
	if w.memDir == "" {
		return 0, fmt.Errorf("snapshot %q is of kind %s but nothing was written to its memory folder: call MemoryDir and checkpoint into it before Commit", w.label, KindMemory)
	}
	fd, err := unix.Openat(w.tfd, memoryName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("opening the memory folder of snapshot %q: %w (it must stay a folder)", w.label, err)
	}
	defer unix.Close(fd)
	n, err := walkMemory(fd, memoryName, 0, true)
	if err != nil {
		return 0, fmt.Errorf("snapshot %q: %w", w.label, err)
	}
	return n, unix.Fsync(fd)
}

// walkMemory counts the bytes of the regular files under the folder dfd
// (named rel, for errors), syncing each if sync. Links are never
// followed, and anything but a regular file or a folder is refused: a
// restore reads these files as root, so a link or a device in them could
// make it read what the session was never given.
func walkMemory(dfd int, rel string, depth int, sync bool) (int64, error) {
	if depth > maxTreeDepth {
		return 0, fmt.Errorf("%s nests more than %d folders deep", rel, maxTreeDepth)
	}
	names, err := readNames(dfd)
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", rel, err)
	}
	var total int64
	for _, name := range names {
		p := path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		var n int64
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			n, err = walkChild(dfd, name, p, unix.O_DIRECTORY, func(fd int) (int64, error) { return walkMemory(fd, p, depth+1, sync) }, sync)
		case unix.S_IFREG:
			n = st.Size
			if sync {
				_, err = walkChild(dfd, name, p, 0, func(fd int) (int64, error) { return 0, checkRegular(fd, st) }, true)
			}
		default:
			return 0, fmt.Errorf("%s in the memory folder is a %s: only regular files and folders may be there (a checkpoint writes nothing else)", p, fileType(st.Mode))
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// walkChild opens name of the folder dfd (with flags, never following a
// link), calls f with it, and syncs it if sync.
func walkChild(dfd int, name, p string, flags int, f func(fd int) (int64, error), sync bool) (int64, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return 0, fmt.Errorf("opening %s: %w", p, err)
	}
	defer unix.Close(fd)
	n, err := f(fd)
	if err == nil && sync {
		err = unix.Fsync(fd)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p, err)
	}
	return n, nil
}

// checkRegular says whether fd is still the regular file st described
// (not swapped between the stat and the open).
func checkRegular(fd int, st unix.Stat_t) error {
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return err
	}
	if now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev {
		return errors.New("changed while it was read")
	}
	return nil
}

// fileType names a mode's type for an error.
func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	case unix.S_IFSOCK:
		return "socket"
	}
	return fmt.Sprintf("file of type %o", mode&unix.S_IFMT)
}

// removeTree removes name from the folder pfd, and all it holds if it is
// a folder, through descriptors: each folder is opened without following
// a link and emptied by unlinkat under its own descriptor, so a link
// swapped in anywhere is removed, never followed. A missing name is no
// error.
func removeTree(pfd int, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return ignoreMissing(unix.Unlinkat(pfd, name, 0))
	}
	if depth > maxTreeDepth {
		return fmt.Errorf("%s nests more than %d folders deep: remove it by hand", name, maxTreeDepth)
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ignoreMissing(err)
	}
	names, err := readNames(fd)
	for _, n := range names {
		if e := removeTree(fd, n, depth+1); e != nil && err == nil {
			err = fmt.Errorf("%s: %w", name, e)
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return ignoreMissing(unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR))
}

func ignoreMissing(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// isHeld says whether a reader holds (OpenMemory) the snapshot folder
// name of the owner folder odfd, and if so returns the folder open, to
// wait on. A reader starts holding only under the store's shared lock,
// so under the exclusive one the answer stays until that is released.
func isHeld(odfd int, name string) (int, bool) {
	fd, err := unix.Openat(odfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false
	}
	if errors.Is(unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB), unix.EWOULDBLOCK) {
		return fd, true
	}
	unix.Close(fd)
	return -1, false
}

// heldError is a snapshot a save or Remove must remove, held by a reader:
// the caller leaves the store's lock, waits (waitHeld), and tries again.
type heldError struct {
	label string
	fd    int // its folder, open
}

func (e *heldError) Error() string {
	return fmt.Sprintf("snapshot %q is being restored (its memory is held by a reader)", e.label)
}

// waitHeld waits until no reader holds h's folder, or until deadline, and
// closes it. The caller holds neither the store's lock nor enter, so a
// Close or another call is not kept waiting behind a restore.
func (s *Store) waitHeld(h *heldError, deadline time.Time) error {
	defer unix.Close(h.fd)
	for {
		if err := unix.Flock(h.fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w for more than %s, and is not removed or replaced while it is: try again once the restore is done", h, units.FormatDuration(s.waitHeldFor))
		}
		time.Sleep(heldPoll)
	}
}

// OpenMemory opens a memory snapshot of owner for a restore: its entry,
// the absolute path of its memory folder (the checkpoint files, for runsc
// restore --image-path) and release, which ends the hold (call it once
// the files are read; more calls do nothing). Until release the
// snapshot's folder stays as it is: a save of its label, an eviction,
// Remove, Prune and the TTL sweep wait for it (a save or Remove, up to
// Options.WaitHeld) or skip it until a later sweep. Call it before Get of
// the same label, and compare the Created of both: equal, they are one
// snapshot. The errors are Get's, and ErrNotFound for a snapshot of
// files, which holds no memory.
func (s *Store) OpenMemory(owner, label string) (Entry, string, func(), error) {
	if err := checkOwner(owner); err != nil {
		return Entry{}, "", nil, err
	}
	if err := CheckLabel(label); err != nil {
		return Entry{}, "", nil, err
	}
	if err := s.enter(); err != nil {
		return Entry{}, "", nil, err
	}
	defer s.leave()
	unlock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return Entry{}, "", nil, err
	}
	defer unlock()
	oname := ownerDirName(owner)
	of, err := s.openOwner(oname, false)
	if errors.Is(err, errNoOwner) {
		return Entry{}, "", nil, notFound(label)
	}
	if err != nil {
		return Entry{}, "", nil, err
	}
	defer of.Close()
	return s.holdMemory(int(of.Fd()), oname, label)
}

// holdMemory opens the snapshot label of the owner folder odfd, locks it
// shared (the hold), and checks its memory folder against its meta.json.
func (s *Store) holdMemory(odfd int, oname, label string) (Entry, string, func(), error) {
	ldfd, err := unix.Openat(odfd, label, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return Entry{}, "", nil, notFound(label)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("label", label).Str("folder", oname).Msg("snapshots: a snapshot's folder could not be opened (a symbolic link?)")
		return Entry{}, "", nil, notFound(label)
	}
	// Removers lock it exclusive only under the store's exclusive lock,
	// and a writer unlocks it before it leaves that lock: under the shared
	// one, this never waits.
	if err := unix.Flock(ldfd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		unix.Close(ldfd)
		return Entry{}, "", nil, fmt.Errorf("snapshot %q is locked by another process: %w (try again)", label, err)
	}
	e, err := s.checkMemory(ldfd, oname, label)
	if err != nil {
		unix.Close(ldfd)
		return Entry{}, "", nil, err
	}
	return e, filepath.Join(s.dir, oname, label, memoryName), sync.OnceFunc(func() { unix.Close(ldfd) }), nil
}

// checkMemory reads the meta.json of the snapshot folder ldfd and checks
// that it is a memory snapshot, not expired, whose memory folder holds
// what meta.json says.
func (s *Store) checkMemory(ldfd int, oname, label string) (Entry, error) {
	e, err := s.readMeta(ldfd, oname, label)
	if err != nil {
		s.log.Warn().Err(err).Str("label", label).Str("folder", oname).Msg("snapshots: a snapshot is damaged and not served: remove it (bridge snapshots rm)")
		return Entry{}, notFound(label)
	}
	if e.Kind != KindMemory {
		return Entry{}, &kindError{fmt.Sprintf("snapshot %q is of the session's files only and holds no memory: restore it as files, or save a snapshot of kind %s", label, KindMemory), []error{ErrNotFound}}
	}
	if !s.now().Before(e.Expires) {
		return Entry{}, expired(e, units.FormatDuration(s.ttl))
	}
	mfd, err := unix.Openat(ldfd, memoryName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		var n int64
		n, err = walkMemory(mfd, memoryName, 0, false)
		unix.Close(mfd)
		if err == nil && n != e.MemoryBytes {
			err = fmt.Errorf("%s holds %d bytes, %s says %d", memoryName, n, metaName, e.MemoryBytes)
		}
	}
	if err != nil {
		s.log.Warn().Err(err).Str("label", label).Str("folder", oname).Msg("snapshots: a snapshot's memory changed on disk; not served")
		return Entry{}, notFound(label)
	}
	return e, nil
}
