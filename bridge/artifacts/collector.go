package artifacts

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/sandbox"
)

// The values of [Limits.ByReference].
const (
	ByReferenceLarge = "large" // files that do not fit inline go to the store
	ByReferenceAll   = "all"   // every file goes to the store (with a store)
)

// MaxListed is how many files a [Collector] lists that it does not return;
// the rest are only counted. Files returned are always listed.
const MaxListed = 100

// Limits are the policy's artifacts section, for one run.
type Limits struct {
	// MaxFiles is how many files a run returns, inline or by reference; 0
	// returns none.
	MaxFiles int
	// MaxBytesInline is the largest file put inline in the result.
	MaxBytesInline int64
	// MaxBytesTotal bounds all inline files of one result together.
	MaxBytesTotal int64
	// ByReference is ByReferenceLarge (files over MaxBytesInline, or that
	// no longer fit MaxBytesTotal, go to the store) or ByReferenceAll;
	// anything else means ByReferenceLarge. Without a store nothing goes
	// by reference.
	ByReference string
	// MaxBytesStored bounds the bytes one run stores.
	MaxBytesStored int64
	// MaxBytesRead bounds the stored file one resources/read returns: the
	// answer holds it whole, base64-encoded.
	MaxBytesRead int64
}

// DefaultLimits are the policy's defaults: 20 files, 1 MiB inline, 4 MiB
// inline in all, by reference when large, 256 MiB stored per run, 8 MiB
// read at once.
func DefaultLimits() Limits {
	return Limits{MaxFiles: 20, MaxBytesInline: 1 << 20, MaxBytesTotal: 4 << 20, ByReference: ByReferenceLarge, MaxBytesStored: 256 << 20,
		MaxBytesRead: 8 << 20}
}

// Artifact is one file of a run as the result reports it: returned inline
// (Inlined, Data), returned by reference (URI), or not returned (Note says
// why).
type Artifact struct {
	// Name is the file's name as the code gave it, relative to the outputs
	// folder, made safe to show (DisplayName).
	Name string
	// MIME and Kind say what a returned file is (Classify); "" and Blob
	// for a file not returned.
	MIME string
	Kind Kind
	// Bytes is the file's size.
	Bytes int64
	// Inlined says the file is in Data, whole.
	Inlined bool
	Data    []byte
	// URI is the file's, when it was stored by reference:
	// bridge://runs/RUN/FILE.
	URI string
	// Note says what to know about the file: why it went by reference,
	// why it was not returned, or that its name and its bytes disagree;
	// "" for a file inlined as its name says.
	Note string
}

// Returned says whether the file came back, inline or by reference.
func (a Artifact) Returned() bool { return a.Inlined || a.URI != "" }

// Collector takes the files of one run (the file half of [sandbox.Sink]:
// embed it in a Sink that adds Output) and decides, as each file starts,
// where it goes: inline when it fits MaxBytesInline and what is left of
// MaxBytesTotal (unless ByReference is "all" and there is a store), else
// to the store when there is one and it fits what is left of
// MaxBytesStored, else nowhere: its bytes are read and dropped, and it is
// listed with a note.
//
// Memory: only inline files are held, each in a buffer of its announced
// size, reserved from MaxBytesTotal when it starts; a stored file streams
// to disk as it arrives, and a file dropped is not kept. So
// a [Collector] holds at most MaxBytesTotal of file bytes, plus about 1 KiB
// for each file listed (MaxFiles returned, MaxListed not).
//
// A file that does not arrive whole (End with a *[sandbox.FileCutError]:
// changed while read, unreadable, or the run ended) is never returned,
// not even in part: it is listed with the reason, and what arrived of it
// is dropped (a stored one's temporary file removed).
type Collector struct {
	run   string
	lim   Limits
	store keeper // nil: none

	mu       sync.Mutex
	list     []Artifact
	notRet   int   // files listed that were not returned
	unlisted int   // files not listed: past MaxListed
	returned int   // files returned
	inline   int64 // bytes of MaxBytesTotal taken
	stored   int64 // bytes of MaxBytesStored taken
	cur      *fileWriter
}

// NewCollector returns a [Collector] for the run runID under the limits l.
// store is where files go by reference; nil: no host folder, and files
// that do not fit inline are not returned.
func NewCollector(runID string, l Limits, store *Store) *Collector {
	if store == nil {
		return newCollector(runID, l, nil)
	}
	return newCollector(runID, l, store)
}

// NewFolderCollector returns a [Collector] for the run runID that keeps
// every file in the folder f (bridge run --outputs), under the limits that
// bound what a run stores: l.MaxFiles files, l.MaxBytesStored bytes in
// all. Nothing goes inline: the collector holds no file in memory, and
// each file returned has the URI (file://) of where it was kept.
func NewFolderCollector(runID string, l Limits, f *Folder) *Collector {
	l.ByReference = ByReferenceAll
	return newCollector(runID, l, f)
}

func newCollector(runID string, l Limits, store keeper) *Collector {
	l.MaxFiles = max(l.MaxFiles, 0)
	l.MaxBytesInline = max(l.MaxBytesInline, 0)
	l.MaxBytesTotal = max(l.MaxBytesTotal, 0)
	l.MaxBytesStored = max(l.MaxBytesStored, 0)
	if l.ByReference != ByReferenceAll {
		l.ByReference = ByReferenceLarge
	}
	return &Collector{run: runID, lim: l, store: store}
}

// all is whether every file goes by reference.
func (c *Collector) all() bool { return c.store != nil && c.lim.ByReference == ByReferenceAll }

// FileLimits is what the runner is told: at most MaxFiles files; the
// largest that can come back at all (the most a run may store, and the
// store keep, with a store, else the inline limit); and in all, the inline
// total plus the stored total.
func (c *Collector) FileLimits() sandbox.FileLimits {
	inlineFile := min(c.lim.MaxBytesInline, c.lim.MaxBytesTotal)
	fl := sandbox.FileLimits{MaxFiles: c.lim.MaxFiles, MaxFileBytes: inlineFile, MaxBytes: c.lim.MaxBytesTotal}
	if c.store != nil {
		storable := min(c.lim.MaxBytesStored, c.store.maxFileBytes())
		if c.all() {
			fl.MaxFileBytes, fl.MaxBytes = storable, c.lim.MaxBytesStored
		} else {
			fl.MaxFileBytes = max(inlineFile, storable)
			fl.MaxBytes = c.lim.MaxBytesTotal + min(c.lim.MaxBytesStored, math.MaxInt64-c.lim.MaxBytesTotal)
		}
	}
	return fl
}

// File starts one file ([sandbox.Sink]).
func (c *Collector) File(f sandbox.FileInfo) sandbox.FileWriter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		// The relay ends each file before the next; if not, this one is cut.
		c.cur.endLocked(&sandbox.FileCutError{Sent: c.cur.got, Size: c.cur.info.Size, Why: "ended"})
	}
	w := &fileWriter{c: c, info: f}
	c.cur = w
	size := f.Size
	switch {
	case size < 0:
		w.note = "its size was not known: not returned"
	case c.returned >= c.lim.MaxFiles:
		w.note = c.tooManyNote()
	case !c.all() && size <= c.lim.MaxBytesInline && size <= c.lim.MaxBytesTotal-c.inline:
		c.inline += size
		w.buf = make([]byte, 0, size)
		w.mode = modeInline
	case c.store != nil:
		if size > c.lim.MaxBytesStored-c.stored {
			w.note = fmt.Sprintf("would pass the %s one run may store on the host (artifacts.max_bytes_stored): not returned; write fewer or smaller files", units.Bytes(c.lim.MaxBytesStored))
			break
		}
		sw, err := c.store.keep(c.run, f.Name, size)
		if err != nil {
			w.note = "could not be stored on the host: " + err.Error() + ": not returned"
			break
		}
		c.stored += size
		w.sw = sw
		w.mode = modeStore
		switch {
		case c.all():
			w.why = "by reference (artifacts.by_reference: all)"
		case size > c.lim.MaxBytesInline:
			w.why = fmt.Sprintf("by reference: over the %s inline limit (artifacts.max_bytes_inline)", units.Bytes(c.lim.MaxBytesInline))
		default:
			w.why = fmt.Sprintf("by reference: would pass the %s all inline files of one result may total (artifacts.max_bytes_total)", units.Bytes(c.lim.MaxBytesTotal))
		}
	case size > c.lim.MaxBytesInline:
		w.note = fmt.Sprintf("over the %s inline limit (artifacts.max_bytes_inline): not returned; write a smaller file, or set artifacts.dir to get large files by reference", units.Bytes(c.lim.MaxBytesInline))
	default:
		w.note = fmt.Sprintf("would pass the %s all inline files of one result may total (artifacts.max_bytes_total): not returned; write fewer or smaller files, or set artifacts.dir to get them by reference", units.Bytes(c.lim.MaxBytesTotal))
	}
	return w
}

func (c *Collector) tooManyNote() string {
	return fmt.Sprintf("past artifacts.max_files (%d): not returned; write fewer files, or put them in one zip", c.lim.MaxFiles)
}

// Skipped lists a file the runner did not send ([sandbox.Sink]).
func (c *Collector) Skipped(f sandbox.FileInfo, r sandbox.SkipReason) {
	var note string
	switch r {
	case sandbox.SkipSymlink:
		note = "a symbolic link: never followed; write the file itself into the outputs folder"
	case sandbox.SkipSpecial:
		note = "a FIFO, socket or device: only regular files are returned"
	case sandbox.SkipTooLarge:
		if c.store != nil {
			note = fmt.Sprintf("over the %s one file may be (artifacts.max_bytes_stored, artifacts.max_bytes_kept): not returned; write a smaller file", units.Bytes(c.FileLimits().MaxFileBytes))
		} else {
			note = fmt.Sprintf("over the %s inline limit (artifacts.max_bytes_inline): not returned; write a smaller file, or set artifacts.dir to get large files by reference", units.Bytes(c.FileLimits().MaxFileBytes))
		}
	case sandbox.SkipOverTotal:
		note = fmt.Sprintf("would pass the %s all files of one run may total: not returned; write fewer or smaller files", units.Bytes(c.FileLimits().MaxBytes))
	case sandbox.SkipTooMany:
		note = c.tooManyNote()
	case sandbox.SkipUnreadable:
		note = "could not be opened or read in the sandbox: not returned; check its permissions"
	case sandbox.SkipBadName:
		note = "its name is not UTF-8, or is over 1,024 bytes (255 a part): not returned; rename it"
	default:
		note = "not sent by the sandbox (" + DisplayName(string(r)) + ")"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(Artifact{Name: DisplayName(f.Name), Bytes: max(f.Size, 0), Note: note})
}

// addLocked lists a file, or counts it past MaxListed.
func (c *Collector) addLocked(a Artifact) {
	if !a.Returned() {
		if c.notRet >= MaxListed {
			c.unlisted++
			return
		}
		c.notRet++
	}
	c.list = append(c.list, a)
}

// Artifacts returns the files of the run in the order they arrived,
// returned or not, and how many more were not listed (past MaxListed).
// Call it once the run has ended: a file still open then is cut.
func (c *Collector) Artifacts() (list []Artifact, unlisted int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		c.cur.endLocked(&sandbox.FileCutError{Sent: c.cur.got, Size: c.cur.info.Size, Why: "ended"})
	}
	return append([]Artifact(nil), c.list...), c.unlisted
}

// retained is the bytes of file data the [Collector] holds. For tests.
func (c *Collector) retained() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, a := range c.list {
		n += int64(cap(a.Data))
	}
	if c.cur != nil {
		n += int64(cap(c.cur.buf))
	}
	return n
}

type mode int

const (
	modeDrop mode = iota
	modeInline
	modeStore
)

// fileWriter takes one file's bytes for a [Collector].
type fileWriter struct {
	c     *Collector
	info  sandbox.FileInfo
	mode  mode
	got   int64
	buf   []byte   // modeInline
	sw    keptFile // modeStore
	sniff sniffer  // modeStore
	why   string   // modeStore: why by reference
	note  string   // why not returned; set: modeDrop
	ended bool
}

// Write takes the file's next bytes. An error drops the rest of them.
func (w *fileWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if w.ended {
		return 0, errors.New("artifacts: the file has ended")
	}
	if w.got+int64(len(p)) > w.info.Size {
		w.dropLocked(fmt.Sprintf("more bytes arrived than the %d announced: not returned", w.info.Size))
		return 0, errors.New("artifacts: more bytes than announced")
	}
	w.got += int64(len(p))
	switch w.mode {
	case modeInline:
		w.buf = append(w.buf, p...)
	case modeStore:
		w.sniff.Write(p)
		if _, err := w.sw.Write(p); err != nil {
			w.dropLocked("could not be stored on the host: " + err.Error() + ": not returned")
			return 0, err
		}
	}
	return len(p), nil
}

// dropLocked gives up the file: what it took is given back, and its bytes
// from now on are dropped.
func (w *fileWriter) dropLocked(note string) {
	switch w.mode {
	case modeInline:
		w.c.inline -= w.info.Size
		w.buf = nil
	case modeStore:
		w.c.stored -= w.info.Size
		w.sw.abort()
	}
	w.mode = modeDrop
	if w.note == "" {
		w.note = note
	}
}

// End ends the file ([sandbox.FileWriter]): it is kept if it arrived whole.
func (w *fileWriter) End(err error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.endLocked(err)
}

func (w *fileWriter) endLocked(err error) {
	if w.ended {
		return
	}
	w.ended = true
	c := w.c
	if c.cur == w {
		c.cur = nil
	}
	if err == nil && w.got != w.info.Size && w.mode != modeDrop {
		err = &sandbox.FileCutError{Sent: w.got, Size: w.info.Size, Why: "ended"}
	}
	if err != nil {
		var cut *sandbox.FileCutError
		if errors.As(err, &cut) {
			w.dropLocked(fmt.Sprintf("%s: not returned (%s of %s arrived)", cut.Error(), units.Bytes(cut.Sent), units.Bytes(cut.Size)))
		} else {
			w.dropLocked(err.Error() + ": not returned")
		}
	}
	a := Artifact{Name: DisplayName(w.info.Name), Bytes: max(w.info.Size, 0)}
	switch w.mode {
	case modeInline:
		a.MIME, a.Kind, a.Note = Classify(w.info.Name, w.buf)
		a.Inlined, a.Data = true, w.buf
		w.buf = nil
		c.returned++
	case modeStore:
		var note string
		a.MIME, a.Kind, note = w.sniff.classify(w.info.Name)
		e, err := w.sw.commit(a.MIME, a.Kind)
		if err != nil {
			c.stored -= w.info.Size
			a.MIME, a.Kind, a.Note = "", Blob, "could not be stored on the host: "+err.Error()+": not returned"
			break
		}
		a.URI, a.Note = e.URI, w.why
		if note != "" {
			a.Note += "; " + note
		}
		c.returned++
	default:
		a.Note = w.note
	}
	c.addLocked(a)
}
