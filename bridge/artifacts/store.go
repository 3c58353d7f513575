package artifacts

import (
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

// Defaults of StoreOptions' zero values.
const (
	DefaultExpiry       = time.Hour
	DefaultMaxBytesKept = 1 << 30
)

// maxGone is how many removed files' URIs a [Store] remembers, to tell an
// expired file from one it never had.
const maxGone = 1024

// maxSuffix is how many " (n)" names a file may try when its name is
// taken.
const maxSuffix = 1000

// StoreOptions configure a [Store].
type StoreOptions struct {
	// Dir is the host folder the files go in (artifacts.dir): an absolute
	// path, created with mode 0700 if missing.
	Dir string
	// Expiry is how long a file is kept; 0 means DefaultExpiry.
	Expiry time.Duration
	// MaxBytesKept bounds the bytes of all files kept; storing past it
	// removes the oldest files of other runs first. 0 means
	// DefaultMaxBytesKept.
	MaxBytesKept int64
	// Logger receives removals and failures.
	Logger zerolog.Logger
	// OnChange, if set, is called after the list of files changed (a file
	// stored, expired or removed to make room), never under the [Store]'s
	// lock, from the goroutine that made the change: it must not block
	// (send notifications/resources/list_changed from it).
	OnChange func()
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
}

// Entry is one file a [Store] keeps.
type Entry struct {
	URI     string // bridge://runs/RUN/NAME
	Run     string // the run that made it
	Name    string // its file name on the host, the URI's last part
	MIME    string
	Kind    Kind
	Size    int64
	Created time.Time
	Expires time.Time
}

// Errors of [Store.Open], to test with errors.Is; the errors returned say
// more.
var (
	ErrNotFound = errors.New("no such file")
	ErrExpired  = errors.New("the file is no longer kept")
)

// Store keeps files by reference in a host folder, one subfolder per run
// (run-RUN, mode 0700), each file (mode 0600) written to a temporary file,
// synced, and linked to its name without ever replacing a file: a name
// already taken gets " (2)", " (3)"... before its extension. Files expire
// after Expiry (one timer per [Store]), the oldest are removed to stay
// within MaxBytesKept, and Close removes them all: a file is only
// reachable through the bridge that made it, so none outlives it (OpenStore
// removes what a bridge that crashed left, once older than Expiry).
// Nothing in the folder is followed if it is a symbolic link, and only the
// files the [Store] wrote are served. Safe for concurrent use.
type Store struct {
	dir      string // Dir with symbolic links resolved
	fd       int    // dir, open; valid until Close
	expiry   time.Duration
	maxKept  int64
	log      zerolog.Logger
	onChange func()
	now      func() time.Time

	mu        sync.Mutex
	closed    bool
	files     map[string]*stored // by URI
	order     []*stored          // by creation, so by expiry
	runs      map[string]*runState
	kept      int64             // bytes of files
	stored    int64             // files kept so far (Stats)
	storedB   int64             // and their bytes
	reserved  int64             // bytes announced by files being written
	gone      map[string]string // URI → why, of files removed
	goneOrder []string
	timer     *time.Timer
}

// stored is a file kept, with the inode it was written to and its
// modification time: Open serves that file or nothing.
type stored struct {
	Entry
	dev, ino uint64
	mtime    unix.Timespec
}

// runState is a run with a folder: what it holds and is being written.
type runState struct{ files, writing int }

// OpenStore opens (or creates, mode 0700) the folder opts.Dir. It refuses
// a folder that is not a directory, is not owned by this user, or is
// writable by its group or others, and removes run folders older than the
// expiry left there by bridges before (only entries named like its own run
// folders, run-RUN).
func OpenStore(opts StoreOptions) (*Store, error) {
	if opts.Dir == "" || !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("artifacts.dir %q is not an absolute path: name the folder from the root, e.g. /var/lib/bridge/artifacts", opts.Dir)
	}
	if opts.Expiry < 0 || opts.MaxBytesKept < 0 {
		return nil, errors.New("artifacts: the expiry and max_bytes_kept must not be negative (0 means the default)")
	}
	if opts.Expiry == 0 {
		opts.Expiry = DefaultExpiry
	}
	if opts.MaxBytesKept == 0 {
		opts.MaxBytesKept = DefaultMaxBytesKept
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if _, err := os.Lstat(opts.Dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating artifacts.dir: %w: create it yourself (mode 0700), or name another folder", err)
		}
	}
	dir, err := filepath.EvalSymlinks(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("artifacts.dir: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) {
		return nil, fmt.Errorf("artifacts.dir %s is not a directory: name a folder", opts.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("opening artifacts.dir %s: %w", opts.Dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("artifacts.dir %s: %w", opts.Dir, err)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		unix.Close(fd)
		return nil, fmt.Errorf("artifacts.dir %s belongs to uid %d, not to this user (uid %d): name a folder of your own", opts.Dir, st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("artifacts.dir %s is writable by its group or others (mode %04o): chmod 700 it, or name a folder only you can write", opts.Dir, st.Mode&0o7777)
	}
	s := &Store{
		dir: dir, fd: fd, expiry: opts.Expiry, maxKept: opts.MaxBytesKept,
		log: opts.Logger, onChange: opts.OnChange, now: opts.Now,
		files: map[string]*stored{}, runs: map[string]*runState{}, gone: map[string]string{},
	}
	s.removeLeftovers()
	return s, nil
}

// runDir is the name of a run's folder.
func runDir(run string) string { return "run-" + run }

func (s *Store) maxFileBytes() int64 { return s.maxKept }

func (s *Store) keep(run, name string, size int64) (keptFile, error) {
	w, err := s.begin(run, name, size)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// Path is where e's file is kept on the host, for a reader that is on
// the host too.
func (s *Store) Path(e Entry) string { return filepath.Join(s.dir, runDir(e.Run), e.Name) }

// removeLeftovers removes the run folders older than the expiry that
// bridges before this one left (after a crash, or a kill).
func (s *Store) removeLeftovers() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		s.log.Warn().Err(err).Str("dir", s.dir).Msg("artifacts: could not list the folder for files earlier bridges left")
		return
	}
	cutoff := s.now().Add(-s.expiry)
	removed := 0
	for _, e := range ents {
		run, ok := strings.CutPrefix(e.Name(), "run-")
		if !ok || !validRunID(run) || e.Type() != os.ModeDir {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(s.fd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR ||
			!time.Unix(st.Mtim.Unix()).Before(cutoff) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			s.log.Warn().Err(err).Str("folder", e.Name()).Msg("artifacts: could not remove the files an earlier bridge left")
			continue
		}
		removed++
	}
	if removed > 0 {
		s.log.Info().Int("runs", removed).Str("dir", s.dir).Msg("artifacts: removed expired files earlier bridges left")
	}
}

// Close stops the expiry timer and removes every file the [Store] kept,
// and the files being written. After Close, List is empty, Open finds
// nothing and nothing more is stored.
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
	var errs []error
	for run := range s.runs {
		if err := os.RemoveAll(filepath.Join(s.dir, runDir(run))); err != nil {
			errs = append(errs, err)
		}
	}
	clear(s.files)
	clear(s.runs)
	s.order, s.kept, s.reserved = nil, 0, 0
	if err := unix.Close(s.fd); err != nil {
		errs = append(errs, err)
	}
	s.fd = -1
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("artifacts: removing the files in %s: %w", s.dir, err)
	}
	return nil
}

// List returns the files kept, oldest first.
func (s *Store) List() []Entry {
	s.mu.Lock()
	changed := s.sweepLocked()
	out := make([]Entry, len(s.order))
	for i, e := range s.order {
		out[i] = e.Entry
	}
	s.mu.Unlock()
	if changed {
		s.changed()
	}
	return out
}

// lookupError is a failed Open: why, and which of ErrNotFound and
// ErrExpired it is.
type lookupError struct {
	msg  string
	kind error
}

func (e *lookupError) Error() string        { return e.msg }
func (e *lookupError) Is(target error) bool { return target == e.kind }

// Open opens a file kept, by its URI, for reading. The error is
// ErrNotFound (a URI this bridge never gave, or malformed) or ErrExpired
// (removed since), saying what to do. The file is opened without
// following symbolic links, under a name derived from the parsed URI, and
// only if it is still the file the [Store] wrote.
func (s *Store) Open(uri string) (Entry, io.ReadCloser, error) {
	run, name, err := ParseURI(uri)
	if err != nil {
		return Entry{}, nil, &lookupError{err.Error(), ErrNotFound}
	}
	s.mu.Lock()
	changed := s.sweepLocked()
	e, f, err := s.openLocked(uri, run, name)
	s.mu.Unlock()
	if changed {
		s.changed()
	}
	return e, f, err
}

func (s *Store) openLocked(uri, run, name string) (Entry, io.ReadCloser, error) {
	e := s.files[uri]
	if e == nil {
		if why, ok := s.gone[uri]; ok {
			return Entry{}, nil, &lookupError{uri + " " + why + ": run the code again to make it again", ErrExpired}
		}
		return Entry{}, nil, &lookupError{uri + ": no such file in this bridge (files are kept only while the bridge that made them runs): run the code again", ErrNotFound}
	}
	fd, err := s.openAt(run, name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		s.log.Warn().Err(err).Str("uri", uri).Msg("artifacts: a file kept could not be opened")
		return Entry{}, nil, &lookupError{uri + ": the file could not be opened on the host: " + err.Error(), ErrNotFound}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG ||
		uint64(st.Dev) != e.dev || st.Ino != e.ino || st.Mtim != e.mtime || st.Size != e.Size {
		unix.Close(fd)
		s.log.Warn().Str("uri", uri).Msg("artifacts: a file kept was replaced or changed on the host; not served")
		return Entry{}, nil, &lookupError{uri + ": the file was changed on the host since it was stored, and is not served: run the code again", ErrNotFound}
	}
	return e.Entry, os.NewFile(uintptr(fd), filepath.Join(s.dir, runDir(run), name)), nil
}

// openAt opens name in run's folder, following no symbolic link: not the
// folder, not the file.
func (s *Store) openAt(run, name string, flags int, mode uint32) (int, error) {
	dfd, err := unix.Openat(s.fd, runDir(run), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	return unix.Openat(dfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
}

func (s *Store) changed() {
	if s.onChange != nil {
		s.onChange()
	}
}

// sweepLocked removes the files expired, and says whether there were any.
func (s *Store) sweepLocked() bool {
	if s.closed {
		return false
	}
	now := s.now()
	changed := false
	for len(s.order) > 0 && !now.Before(s.order[0].Expires) {
		s.removeLocked(s.order[0], "expired "+units.FormatDuration(s.expiry)+" after it was made (artifacts.expiry) and was removed")
		changed = true
	}
	s.armLocked()
	return changed
}

// armLocked sets the timer to the next expiry.
func (s *Store) armLocked() {
	if len(s.order) == 0 || s.closed {
		if s.timer != nil {
			s.timer.Stop()
		}
		return
	}
	d := max(s.order[0].Expires.Sub(s.now()), 0)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expire)
		return
	}
	s.timer.Reset(d)
}

// expire is the timer's: it removes what has expired.
func (s *Store) expire() {
	s.mu.Lock()
	changed := s.sweepLocked()
	s.mu.Unlock()
	if changed {
		s.changed()
	}
}

// removeLocked removes a file kept, remembering why for Open.
func (s *Store) removeLocked(e *stored, why string) {
	if dfd, err := unix.Openat(s.fd, runDir(e.Run), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		if err := unix.Unlinkat(dfd, e.Name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			s.log.Warn().Err(err).Str("uri", e.URI).Msg("artifacts: could not remove a file")
		}
		unix.Close(dfd)
	}
	delete(s.files, e.URI)
	if i := slices.Index(s.order, e); i >= 0 {
		s.order = slices.Delete(s.order, i, i+1)
	}
	s.kept -= e.Size
	if rs := s.runs[e.Run]; rs != nil {
		rs.files--
		s.dropRunLocked(e.Run)
	}
	if len(s.goneOrder) >= maxGone {
		delete(s.gone, s.goneOrder[0])
		s.goneOrder = s.goneOrder[1:]
	}
	s.gone[e.URI] = why
	s.goneOrder = append(s.goneOrder, e.URI)
	s.log.Debug().Str("uri", e.URI).Str("why", why).Msg("artifacts: file removed")
}

// dropRunLocked removes a run's folder once it holds nothing and nothing
// is being written to it.
func (s *Store) dropRunLocked(run string) {
	rs := s.runs[run]
	if rs == nil || rs.files > 0 || rs.writing > 0 {
		return
	}
	delete(s.runs, run)
	if err := os.RemoveAll(filepath.Join(s.dir, runDir(run))); err != nil {
		s.log.Warn().Err(err).Str("run_id", run).Msg("artifacts: could not remove a run's folder")
	}
}

// storeWriter writes one file into a run's folder: a temporary file,
// linked to its name by commit, removed by abort.
type storeWriter struct {
	s         *Store
	run, name string // name sanitised
	size, n   int64
	dfd       int      // the run's folder
	f         *os.File // the temporary file
	tmp       string
	done      bool
	held      bool // its size is in Store.reserved, and it counts in runState.writing
}

// begin starts storing a file of size bytes for run, named as the code
// named it. It makes room under MaxBytesKept first, removing the oldest
// files of other runs. The error says why the file cannot be stored.
func (s *Store) begin(run, name string, size int64) (w *storeWriter, err error) {
	if !validRunID(run) {
		return nil, fmt.Errorf("the run id %q is not 1 to 32 lower-case letters and digits", run)
	}
	clean, err := SanitiseName(name)
	if err != nil {
		return nil, err
	}
	if size > s.maxKept {
		return nil, fmt.Errorf("over the %s the host folder keeps in all (artifacts.max_bytes_kept): write a smaller file", units.Bytes(s.maxKept))
	}
	changed := false
	defer func() {
		if changed {
			s.changed()
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the bridge is shutting down")
	}
	changed = s.sweepLocked()
	for s.kept+s.reserved+size > s.maxKept {
		i := slices.IndexFunc(s.order, func(e *stored) bool { return e.Run != run })
		if i < 0 {
			return nil, fmt.Errorf("the host folder is full (artifacts.max_bytes_kept %s) with this run's files and those being written: write fewer or smaller files", units.Bytes(s.maxKept))
		}
		s.removeLocked(s.order[i], "was removed to make room for newer files (artifacts.max_bytes_kept)")
		changed = true
	}
	rs := s.runs[run]
	if rs == nil {
		if err := unix.Mkdirat(s.fd, runDir(run), 0o700); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return nil, fmt.Errorf("the folder %s already exists in %s (another bridge using the same folder and run id?): not overwritten", runDir(run), s.dir)
			}
			return nil, fmt.Errorf("creating the run's folder in %s: %w", s.dir, err)
		}
		rs = &runState{}
		s.runs[run] = rs
	}
	rs.writing++
	defer func() {
		if err != nil {
			rs.writing--
			s.dropRunLocked(run)
		}
	}()
	dfd, err := unix.Openat(s.fd, runDir(run), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the run's folder in %s: %w", s.dir, err)
	}
	fd, tmp, err := createTemp(dfd, 0o600)
	if err != nil {
		unix.Close(dfd)
		return nil, fmt.Errorf("creating a file in %s: %w", s.dir, err)
	}
	s.reserved += size
	return &storeWriter{s: s, run: run, name: clean, size: size, dfd: dfd, f: os.NewFile(uintptr(fd), tmp), tmp: tmp, held: true}, nil
}

// Write writes the next bytes; past the size announced, or when writing
// fails, the file is abandoned.
func (w *storeWriter) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("the file was already ended")
	}
	if w.n+int64(len(p)) > w.size {
		w.abort()
		return 0, fmt.Errorf("more bytes than the %d announced", w.size)
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	if err != nil {
		w.abort()
		return n, fmt.Errorf("writing to artifacts.dir: %w (is its disk full?)", err)
	}
	return n, nil
}

// releaseLocked gives back the bytes reserved, and the run's writing count.
func (w *storeWriter) releaseLocked() {
	if !w.held {
		return
	}
	w.held = false
	if w.s.closed {
		return
	}
	w.s.reserved -= w.size
	if rs := w.s.runs[w.run]; rs != nil {
		rs.writing--
		w.s.dropRunLocked(w.run)
	}
}

// abort removes the temporary file. It may be called more than once.
func (w *storeWriter) abort() {
	if w.done {
		return
	}
	w.done = true
	w.f.Close()
	_ = unix.Unlinkat(w.dfd, w.tmp, 0)
	unix.Close(w.dfd)
	w.s.mu.Lock()
	w.releaseLocked()
	w.s.mu.Unlock()
}

// commit links the file to its name (or a free " (n)" one),
// and keeps it.
func (w *storeWriter) commit(mime string, kind Kind) (Entry, error) {
	if w.done {
		return Entry{}, errors.New("the file was already ended")
	}
	if w.n != w.size {
		w.abort()
		return Entry{}, fmt.Errorf("%d bytes arrived of %d announced", w.n, w.size)
	}
	// No fsync: the files live only while this bridge runs (Close
	// removes them, and the next start removes what a crash left), so
	// durability buys nothing, and a sync of megabytes costs a run tens of
	// milliseconds. Linking after the last write is what makes a file
	// appear whole.
	var st unix.Stat_t
	if err := unix.Fstat(int(w.f.Fd()), &st); err != nil {
		w.abort()
		return Entry{}, fmt.Errorf("writing to artifacts.dir: %w", err)
	}
	s := w.s
	s.mu.Lock()
	e, err := w.linkLocked(mime, kind, &st)
	s.mu.Unlock()
	if err != nil {
		w.abort()
		return Entry{}, err
	}
	w.done = true
	w.f.Close()
	_ = unix.Unlinkat(w.dfd, w.tmp, 0)
	unix.Close(w.dfd)
	s.changed()
	return e, nil
}

func (w *storeWriter) linkLocked(mime string, kind Kind, st *unix.Stat_t) (Entry, error) {
	s := w.s
	if s.closed {
		return Entry{}, errors.New("the bridge is shutting down")
	}
	name, err := linkFree(w.dfd, w.tmp, w.name, s.dir, unix.Linkat)
	if err != nil {
		return Entry{}, err
	}
	now := s.now()
	e := &stored{Entry: Entry{URI: URI(w.run, name), Run: w.run, Name: name, MIME: mime, Kind: kind, Size: w.size,
		Created: now, Expires: now.Add(s.expiry)}, dev: uint64(st.Dev), ino: st.Ino, mtime: st.Mtim}
	if rs := s.runs[w.run]; rs != nil {
		rs.files++
	}
	w.releaseLocked()
	s.kept += w.size
	s.stored++
	s.storedB += w.size
	s.files[e.URI] = e
	s.order = append(s.order, e)
	delete(s.gone, e.URI)
	s.armLocked()
	return e.Entry, nil
}

// StoreStats are what a [Store] holds now and kept so far, for /metrics.
type StoreStats struct {
	Files, Bytes             int64 // held now
	StoredFiles, StoredBytes int64 // kept since it opened, expired ones too
}

// Stats are the Store's, now.
func (s *Store) Stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StoreStats{Files: int64(len(s.files)), Bytes: s.kept, StoredFiles: s.stored, StoredBytes: s.storedB}
}
