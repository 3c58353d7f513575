package artifacts

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// keeper is where a [Collector] puts the files it does not hold inline: a
// [Store] (kept for a while, served by reference) or a [Folder] (kept for
// good, in a folder the user named).
type keeper interface {
	// keep starts keeping a file of size bytes, named as the code named
	// it; the error says why it cannot be kept.
	keep(run, name string, size int64) (keptFile, error)
	// maxFileBytes is the largest file it keeps.
	maxFileBytes() int64
}

// keptFile is one file being kept: its bytes, then commit or abort.
type keptFile interface {
	Write(p []byte) (int, error)
	// commit keeps the file under its name, or a free " (n)" one.
	commit(mime string, kind Kind) (Entry, error)
	// abort removes what was written. It may be called more than once.
	abort()
}

// Folder keeps the files of a run for good in a folder of the host that
// the user named (bridge run --outputs DIR). A file's name is the code's
// made safe (SanitiseName: "plots/a.png" becomes "plots_a.png", nothing
// names another folder); its bytes go to a temporary file in the folder
// that is linked to that name once whole, so a file never appears in part,
// and no file is ever replaced: a name already taken gets " (2)",
// " (3)"... before its extension. Nothing in the folder is followed if it
// is a symbolic link. It is not safe for concurrent use (a [Collector]
// serialises its calls).
type Folder struct {
	dir string // as given, for messages
	abs string // absolute, for the entries' URIs
	fd  int
}

// OpenFolder opens the folder dir, creating it (and its parents) when
// missing. dir itself may be a symbolic link: the user named it.
func OpenFolder(dir string) (*Folder, error) {
	if dir == "" {
		return nil, errors.New("no folder named for the files: give one, e.g. --outputs out")
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a folder: name a folder for the files", dir)
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("creating the folder for the files: %w: create it yourself, or name another one", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the folder for the files %s: %w", dir, err)
	}
	return &Folder{dir: dir, abs: abs, fd: fd}, nil
}

// Dir is the folder as it was named.
func (f *Folder) Dir() string { return f.dir }

// Close closes the folder; the files stay.
func (f *Folder) Close() error {
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

func (f *Folder) maxFileBytes() int64 { return math.MaxInt64 }

func (f *Folder) keep(run, name string, size int64) (keptFile, error) {
	clean, err := SanitiseName(name)
	if err != nil {
		return nil, err
	}
	fd, tmp, err := createTemp(f.fd, 0o666)
	if err != nil {
		return nil, fmt.Errorf("creating a file in %s: %w", f.dir, err)
	}
	return &folderFile{f: f, run: run, name: clean, size: size, tmp: tmp, file: os.NewFile(uintptr(fd), tmp)}, nil
}

// folderFile is one file being written into a [Folder].
type folderFile struct {
	f         *Folder
	run, name string
	size, n   int64
	tmp       string
	file      *os.File
	done      bool
}

func (w *folderFile) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("the file was already ended")
	}
	if w.n+int64(len(p)) > w.size {
		w.abort()
		return 0, fmt.Errorf("more bytes than the %d announced", w.size)
	}
	n, err := w.file.Write(p)
	w.n += int64(n)
	if err != nil {
		w.abort()
		return n, fmt.Errorf("writing to %s: %w (is its disk full?)", w.f.dir, err)
	}
	return n, nil
}

func (w *folderFile) abort() {
	if w.done {
		return
	}
	w.done = true
	w.file.Close()
	_ = unix.Unlinkat(w.f.fd, w.tmp, 0)
}

func (w *folderFile) commit(mime string, kind Kind) (Entry, error) {
	if w.done {
		return Entry{}, errors.New("the file was already ended")
	}
	if w.n != w.size {
		w.abort()
		return Entry{}, fmt.Errorf("%d bytes arrived of %d announced", w.n, w.size)
	}
	if err := w.file.Close(); err != nil {
		w.abort()
		return Entry{}, fmt.Errorf("writing to %s: %w", w.f.dir, err)
	}
	name, err := linkFree(w.f.fd, w.tmp, w.name, w.f.dir, unix.Linkat)
	w.done = true
	_ = unix.Unlinkat(w.f.fd, w.tmp, 0)
	if err != nil {
		return Entry{}, err
	}
	u := url.URL{Scheme: "file", Path: filepath.Join(w.f.abs, name)}
	return Entry{URI: u.String(), Run: w.run, Name: name, MIME: mime, Kind: kind, Size: w.size}, nil
}

// createTemp creates a new temporary file (".tmp-" and random hex) in the
// folder dfd, never following a symbolic link.
func createTemp(dfd int, mode uint32) (fd int, name string, err error) {
	for range 3 {
		var rnd [12]byte
		_, _ = rand.Read(rnd[:])
		tmp := ".tmp-" + hex.EncodeToString(rnd[:])
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return -1, "", err
		}
		return fd, tmp, nil
	}
	return -1, "", errors.New("could not create a temporary file: names taken")
}

// linkFree links the file tmp of the folder dfd (named dir in messages) to
// name, or the first free " (n)" name, with link (unix.Linkat); it never
// replaces a file, nor follows a symbolic link. On a filesystem without
// hard links (vfat, exFAT, some FUSE and SMB mounts) it renames tmp
// instead, which RENAME_NOREPLACE keeps from replacing a file. It returns
// the name given.
func linkFree(dfd int, tmp, name, dir string, link func(olddirfd int, oldpath string, newdirfd int, newpath string, flags int) error) (string, error) {
	linked := name
	move := false
	for i := 2; ; i++ {
		var err error
		if move {
			err = unix.Renameat2(dfd, tmp, dfd, linked, unix.RENAME_NOREPLACE)
		} else {
			err = link(dfd, tmp, dfd, linked, 0)
		}
		if err == nil {
			return linked, nil
		}
		if !move && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)) {
			move = true // no hard links here: the same name again, by rename
			i--
			continue
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("naming the file in %s: %w", dir, err)
		}
		if i > maxSuffix {
			return "", fmt.Errorf("%d files are already named like %s in %s: name them apart", maxSuffix, name, dir)
		}
		linked = withSuffix(name, i)
	}
}
