package snapshots

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/bridge-mcp/bridge/internal/units"
)

// Defaults of the zero values of [Options].
const (
	DefaultMaxCount       = 20
	DefaultMaxBytes int64 = 1 << 30
	DefaultTTL            = 7 * 24 * time.Hour
	DefaultSweep          = 10 * time.Minute
	DefaultWaitHeld       = time.Minute
)

// Names in the folder. Labels start with a letter or digit, so none is
// one of these.
const (
	lockName    = ".lock"
	ownerPrefix = "o-"
	tmpPrefix   = ".tmp-"
	oldPrefix   = ".old-"
	metaName    = "meta.json"
	filesName   = "files.tar"
)

// Options configure a [Store].
type Options struct {
	// Dir is the folder (snapshots.dir): an absolute path, created with
	// mode 0700 if missing.
	Dir string
	// MaxBytes bounds one owner's snapshots together (and so each one);
	// 0 means DefaultMaxBytes.
	MaxBytes int64
	// MaxCount bounds how many snapshots one owner keeps; 0 means
	// DefaultMaxCount.
	MaxCount int
	// TTL is how long a snapshot is kept after it was saved; 0 means
	// DefaultTTL.
	TTL time.Duration
	// SweepEvery is how often expired snapshots are removed from disk
	// (they are not found from the moment they expire); 0 means
	// DefaultSweep, negative never but on Prune and Commit.
	SweepEvery time.Duration
	// WaitHeld is how long a save or Remove waits for a memory snapshot
	// it must replace, evict or remove while a restore holds it
	// (OpenMemory) before it fails; 0 means DefaultWaitHeld.
	WaitHeld time.Duration
	// Logger receives removals and the entries skipped as damaged.
	Logger zerolog.Logger
	// OnEvent, if set, is called for each snapshot saved, evicted,
	// expired or removed (for the audit), after the change, outside the
	// folder's lock, from the goroutine that made it: it must not block.
	OnEvent func(Event)
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
}

// The actions of an [Event].
const (
	ActionSaved   = "saved"
	ActionEvicted = "evicted"
	ActionExpired = "expired"
	ActionRemoved = "removed"
)

// Event is a change of the snapshots kept, for the audit: never content.
type Event struct {
	Action string // ActionSaved, ActionEvicted, ActionExpired or ActionRemoved
	Entry  Entry
	// Reason says why, for evicted and for a save that replaced a
	// snapshot of the same label ("" otherwise).
	Reason string
}

// Store keeps snapshots in a folder, one subfolder per owner (named by a
// hash of the owner, mode 0700), one per snapshot in it (named by its
// label), each written to a temporary folder, synced, and renamed to its
// label once whole. Everything the store knows is on disk: it re-reads the
// folder on each call, so it survives a restart, and several processes
// may share the folder (a lock file, DIR/.lock, serialises the changes:
// flock exclusive to change, shared to read). Nothing in the folder is
// followed if it is a symbolic link; a snapshot whose meta.json is
// damaged is skipped, with a log line. Safe for concurrent use.
//
// Bounds are per owner, so that one client can only ever crowd out its
// own snapshots: MaxBytes bounds one snapshot as it is written (ErrTooLarge
// past it, and nothing is kept), and a commit that would pass MaxCount or
// MaxBytes evicts the owner's oldest snapshots to make room, saying which.
// Evicting rather than refusing: the agent has no way to remove a snapshot
// itself, snapshots expire anyway (TTL), and the one it saves now is the
// one it means to come back to; a save that fails evicts nothing.
type Store struct {
	dir         string // Dir with symbolic links resolved
	maxBytes    int64
	maxCount    int
	ttl         time.Duration
	sweepEvery  time.Duration
	waitHeldFor time.Duration
	log         zerolog.Logger
	onEvent     func(Event)
	now         func() time.Time

	mu     sync.RWMutex // held for reading by each call, so fd stays open; for writing by Close
	fd     int          // dir, open; -1 after Close
	closed bool
	timer  *time.Timer
}

// Open opens (or creates, mode 0700) the folder opts.Dir. It refuses a
// folder that is not a directory, is not owned by this user, or is
// writable by its group or others. Unless opts.SweepEvery is negative, it
// removes expired snapshots and what earlier writers left, at once in the
// background and then every SweepEvery.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" || !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("snapshots.dir %q is not an absolute path: name the folder from the root, e.g. /var/lib/bridge/snapshots", opts.Dir)
	}
	if opts.MaxBytes < 0 || opts.MaxCount < 0 || opts.TTL < 0 || opts.WaitHeld < 0 {
		return nil, errors.New("snapshots: max_bytes, max_count, ttl and the wait for a held snapshot must not be negative (0 means the default)")
	}
	opts.MaxBytes = orDefault(opts.MaxBytes, DefaultMaxBytes)
	opts.MaxCount = orDefault(opts.MaxCount, DefaultMaxCount)
	opts.TTL = orDefault(opts.TTL, DefaultTTL)
	opts.SweepEvery = orDefault(opts.SweepEvery, DefaultSweep)
	opts.WaitHeld = orDefault(opts.WaitHeld, DefaultWaitHeld)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	dir, fd, err := openOwnFolder(opts.Dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir: dir, fd: fd, maxBytes: opts.MaxBytes, maxCount: opts.MaxCount, ttl: opts.TTL, sweepEvery: opts.SweepEvery, waitHeldFor: opts.WaitHeld,
		log: opts.Logger, onEvent: opts.OnEvent, now: opts.Now,
	}
	if s.sweepEvery > 0 {
		s.mu.Lock() // sweep resets the timer: set it first
		s.timer = time.AfterFunc(0, s.sweep)
		s.mu.Unlock()
	}
	return s, nil
}

// orDefault is v, or def when v is zero.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// openOwnFolder creates dir if missing, resolves it, and opens it if it
// is a directory of this user's that only this user may write.
func openOwnFolder(given string) (string, int, error) {
	if _, err := os.Lstat(given); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(given, 0o700); err != nil {
			return "", -1, fmt.Errorf("creating snapshots.dir: %w: create it yourself (mode 0700), or name another folder", err)
		}
	}
	dir, err := filepath.EvalSymlinks(given)
	if err != nil {
		return "", -1, fmt.Errorf("snapshots.dir: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return "", -1, fmt.Errorf("snapshots.dir %s is not a directory: name a folder", given)
	}
	if err != nil {
		return "", -1, fmt.Errorf("opening snapshots.dir %s: %w", given, err)
	}
	if err := checkOwn(fd); err != nil {
		unix.Close(fd)
		return "", -1, fmt.Errorf("snapshots.dir %s %w", given, err)
	}
	return dir, fd, nil
}

// checkOwn says what is wrong with the folder fd: not this user's, or
// writable by others.
func checkOwn(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf(": %w", err)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("belongs to uid %d, not to this user (uid %d): name a folder of your own", st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("is writable by its group or others (mode %04o): chmod 700 it, or name a folder only you can write", st.Mode&0o7777)
	}
	return nil
}

// Dir is the folder, symbolic links resolved.
func (s *Store) Dir() string { return s.dir }

// Close stops the sweep. Snapshots stay on disk; writers not yet
// committed fail on Commit (their temporary folders are removed).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}

// enter starts a call: the store is open until leave.
func (s *Store) enter() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return errClosed()
	}
	return nil
}

func (s *Store) leave() { s.mu.RUnlock() }

// lock takes the folder's lock (unix.LOCK_SH or LOCK_EX) on an open file
// of its own, so that calls of this process exclude each other as those
// of two processes do; closing it unlocks.
func (s *Store) lock(how int) (unlock func(), err error) {
	fd, err := unix.Openat(s.fd, lockName, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file %s: %w", filepath.Join(s.dir, lockName), err)
	}
	for {
		err = unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("locking %s: %w", filepath.Join(s.dir, lockName), err)
	}
	return func() { unix.Close(fd) }, nil
}

// errNoOwner: the owner has no folder (so no snapshots).
var errNoOwner = errors.New("no such owner folder")

// openOwner opens an owner's folder, named oname, creating it if create.
func (s *Store) openOwner(oname string, create bool) (*os.File, error) {
	if create {
		if err := unix.Mkdirat(s.fd, oname, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("creating a folder in %s: %w", s.dir, err)
		}
	}
	fd, err := unix.Openat(s.fd, oname, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, errNoOwner
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil, fmt.Errorf("%s in %s is not a folder (a symbolic link?): remove it", oname, s.dir)
	case err != nil:
		return nil, fmt.Errorf("opening %s in %s: %w", oname, s.dir, err)
	}
	if err := checkOwn(fd); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s in %s %w", oname, s.dir, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(s.dir, oname)), nil
}

// ownerFolder is what scan found in an owner's folder.
type ownerFolder struct {
	entries    []Entry  // valid, expired ones too, oldest first
	tmps, olds []string // leftovers: being written (or left by a writer that died), being removed
	damaged    []string // labels whose snapshot is not valid
}

// scan reads an owner's folder. Damaged snapshots are logged and listed
// apart.
func (s *Store) scan(of *os.File) ownerFolder {
	var out ownerFolder
	names, err := readNames(int(of.Fd()))
	if err != nil {
		s.log.Warn().Err(err).Str("folder", of.Name()).Msg("snapshots: could not list a folder")
	}
	oname := filepath.Base(of.Name())
	for _, name := range names {
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			out.tmps = append(out.tmps, name)
		case strings.HasPrefix(name, oldPrefix):
			out.olds = append(out.olds, name)
		case CheckLabel(name) == nil:
			e, err := s.readSnapshot(int(of.Fd()), oname, name)
			if err != nil {
				s.log.Warn().Err(err).Str("folder", filepath.Join(of.Name(), name)).Msg("snapshots: a snapshot is damaged and skipped: remove it (bridge snapshots rm)")
				out.damaged = append(out.damaged, name)
				continue
			}
			out.entries = append(out.entries, e)
		}
	}
	slices.SortFunc(out.entries, older)
	return out
}

// older orders entries oldest first, then by label.
func older(a, b Entry) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.Label, b.Label)
}

// readSnapshot reads the snapshot label of the owner folder odfd.
func (s *Store) readSnapshot(odfd int, oname, label string) (Entry, error) {
	ldfd, err := unix.Openat(odfd, label, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Entry{}, fmt.Errorf("not a folder (a symbolic link?): %w", err)
	}
	defer unix.Close(ldfd)
	return s.readMeta(ldfd, oname, label)
}

// List returns the snapshots of owner that have not expired, oldest
// first.
func (s *Store) List(owner string) ([]Entry, error) {
	if err := checkOwner(owner); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	unlock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	of, err := s.openOwner(ownerDirName(owner), false)
	if errors.Is(err, errNoOwner) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer of.Close()
	return s.live(s.scan(of).entries), nil
}

// live is the entries that have not expired.
func (s *Store) live(es []Entry) []Entry {
	now := s.now()
	return slices.DeleteFunc(es, func(e Entry) bool { return !now.Before(e.Expires) })
}

// ListAll returns the snapshots of every owner that have not expired, by
// owner, then oldest first. It reads every snapshot's metadata: it is for
// the operator (bridge snapshots list), not for each call.
func (s *Store) ListAll() ([]Entry, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	unlock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out []Entry
	err = s.eachOwner(func(of *os.File) {
		out = append(out, s.live(s.scan(of).entries)...)
	})
	slices.SortStableFunc(out, func(a, b Entry) int { return strings.Compare(a.Owner, b.Owner) })
	return out, err
}

// eachOwner calls f with each owner folder, open; f must not keep it.
func (s *Store) eachOwner(f func(of *os.File)) error {
	names, err := readNames(s.fd)
	if err != nil {
		return fmt.Errorf("listing %s: %w", s.dir, err)
	}
	for _, name := range names {
		if !isOwnerDirName(name) {
			continue
		}
		of, err := s.openOwner(name, false)
		if err != nil {
			if !errors.Is(err, errNoOwner) {
				s.log.Warn().Err(err).Msg("snapshots: an owner's folder is skipped")
			}
			continue
		}
		f(of)
		of.Close()
	}
	return nil
}

// readNames lists the folder fd, on a descriptor of its own (so that fd's
// offset and open state are not the os.File's).
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	return f.Readdirnames(-1)
}

// Get opens a snapshot of owner for reading: its entry and its files.tar.
// The error is ErrNotFound for a label this owner has not (whether no
// owner has it, another has, or its folder is damaged: the same message),
// ErrExpired (also ErrNotFound) for one past the TTL, ErrInvalid for a
// label LabelRule refuses. What it returns stays whole and readable even
// if the snapshot is replaced or removed meanwhile.
func (s *Store) Get(owner, label string) (Entry, io.ReadCloser, error) {
	if err := checkOwner(owner); err != nil {
		return Entry{}, nil, err
	}
	if err := CheckLabel(label); err != nil {
		return Entry{}, nil, err
	}
	if err := s.enter(); err != nil {
		return Entry{}, nil, err
	}
	defer s.leave()
	unlock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return Entry{}, nil, err
	}
	defer unlock()
	oname := ownerDirName(owner)
	of, err := s.openOwner(oname, false)
	if errors.Is(err, errNoOwner) {
		return Entry{}, nil, notFound(label)
	}
	if err != nil {
		return Entry{}, nil, err
	}
	defer of.Close()
	return s.openSnapshot(int(of.Fd()), oname, label)
}

// openSnapshot opens the snapshot label of the owner folder odfd.
func (s *Store) openSnapshot(odfd int, oname, label string) (Entry, io.ReadCloser, error) {
	ldfd, err := unix.Openat(odfd, label, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return Entry{}, nil, notFound(label)
	}
	if err != nil {
		s.log.Warn().Err(err).Str("label", label).Str("folder", oname).Msg("snapshots: a snapshot's folder could not be opened (a symbolic link?)")
		return Entry{}, nil, notFound(label)
	}
	defer unix.Close(ldfd)
	e, err := s.readMeta(ldfd, oname, label)
	if err != nil {
		s.log.Warn().Err(err).Str("label", label).Str("folder", oname).Msg("snapshots: a snapshot is damaged and not served: remove it (bridge snapshots rm)")
		return Entry{}, nil, notFound(label)
	}
	if !s.now().Before(e.Expires) {
		return Entry{}, nil, expired(e, units.FormatDuration(s.ttl))
	}
	fd, err := unix.Openat(ldfd, filesName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		s.log.Warn().Err(err).Str("label", label).Str("folder", oname).Msg("snapshots: a snapshot's data could not be opened")
		return Entry{}, nil, notFound(label)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.Size {
		unix.Close(fd)
		s.log.Warn().Str("label", label).Str("folder", oname).Msg("snapshots: a snapshot's data changed on disk; not served")
		return Entry{}, nil, notFound(label)
	}
	return e, os.NewFile(uintptr(fd), filepath.Join(s.dir, oname, label, filesName)), nil
}

// Remove removes a snapshot of owner: ErrNotFound if owner has no such
// label. A damaged one is removed too. One a restore holds (OpenMemory)
// is removed once it is released: Remove waits up to Options.WaitHeld.
func (s *Store) Remove(owner, label string) error {
	if err := checkOwner(owner); err != nil {
		return err
	}
	if err := CheckLabel(label); err != nil {
		return err
	}
	deadline := time.Now().Add(s.waitHeldFor)
	for {
		err := s.remove(owner, label)
		h, ok := err.(*heldError)
		if !ok {
			return err
		}
		if err := s.waitHeld(h, deadline); err != nil {
			return err
		}
	}
}

// remove is one try of Remove: a *heldError if a reader holds the
// snapshot.
func (s *Store) remove(owner, label string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	unlock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return err
	}
	oname := ownerDirName(owner)
	of, err := s.openOwner(oname, false)
	if errors.Is(err, errNoOwner) {
		unlock()
		return notFound(label)
	}
	if err != nil {
		unlock()
		return err
	}
	defer of.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(of.Fd()), label, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unlock()
		return notFound(label)
	}
	if fd, held := isHeld(int(of.Fd()), label); held {
		unlock()
		return &heldError{label: label, fd: fd}
	}
	e, rerr := s.readSnapshot(int(of.Fd()), oname, label)
	old, err := s.retire(of, label)
	unlock()
	if err != nil {
		return err
	}
	s.discard(old)
	if rerr == nil {
		s.emit(Event{Action: ActionRemoved, Entry: e})
	}
	return nil
}

// retired is an entry of an owner folder renamed out of the way, to be
// removed.
type retired struct {
	oname, name string
}

// retire renames an entry of the owner folder out of the way, to a .old-
// name, and returns it for discard: under the exclusive lock, so readers
// see it whole or not at all.
func (s *Store) retire(of *os.File, name string) (retired, error) {
	old := oldPrefix + randomHex()
	if err := unix.Renameat(int(of.Fd()), name, int(of.Fd()), old); err != nil {
		return retired{}, fmt.Errorf("removing %s from %s: %w", name, of.Name(), err)
	}
	return retired{filepath.Base(of.Name()), old}, nil
}

// discard removes retired entries, without the lock (no one looks at
// .old- names), through descriptors (removeTree): a link swapped in is
// removed, never followed. The caller has entered the store.
func (s *Store) discard(rs ...retired) {
	for _, r := range rs {
		p := filepath.Join(s.dir, r.oname, r.name)
		fd, err := unix.Openat(s.fd, r.oname, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			err = removeTree(fd, r.name, 0)
			unix.Close(fd)
		}
		if err != nil {
			s.log.Warn().Err(err).Str("folder", p).Msg("snapshots: could not remove a snapshot's files; the next sweep tries again")
		}
	}
}

func randomHex() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Store) emit(evs ...Event) {
	if s.onEvent == nil {
		return
	}
	for _, ev := range evs {
		s.onEvent(ev)
	}
}
