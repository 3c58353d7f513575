package sandbox

// OutputsDir is the folder in the container whose files come back with a
// run's result (artifacts). The runner creates it, empty, on the run's
// tmpfs before the code starts, and sends what it holds after the code
// ends (docs/protocol.md, "Files out").
const OutputsDir = TmpDir + "/outputs"

// FileLimits bound the files one execution may send back. The runner is
// told them in exec and skips what does not fit; the bridge enforces them
// again on what arrives: a runner that sends more breaks the protocol.
type FileLimits struct {
	// MaxFiles is how many files may be sent; 0 sends none.
	MaxFiles int
	// MaxFileBytes is the largest file that may be sent.
	MaxFileBytes int64
	// MaxBytes is the total of all files sent.
	MaxBytes int64
}

// FileInfo describes one file the runner announced. Name is relative to
// OutputsDir with "/" separators, as the runner gives it: checked only to
// be valid UTF-8 without NUL, "." or ".." parts (see [relay.File]). Size is
// the size the runner announced, at most FileLimits.MaxFileBytes.
type FileInfo struct {
	Name string
	Size int64
}

// SkipReason says why the runner did not send a file.
type SkipReason string

// The reasons a file is skipped, as the runner reports them.
const (
	SkipSymlink    SkipReason = "symlink"    // a symbolic link: never followed
	SkipSpecial    SkipReason = "special"    // a FIFO, socket or device
	SkipTooLarge   SkipReason = "too_large"  // over FileLimits.MaxFileBytes
	SkipOverTotal  SkipReason = "over_total" // would pass FileLimits.MaxBytes
	SkipTooMany    SkipReason = "too_many"   // past FileLimits.MaxFiles
	SkipUnreadable SkipReason = "unreadable" // could not be opened or read
	SkipBadName    SkipReason = "bad_name"   // not UTF-8, too long, or NUL
)

// Sink receives what one execution produces, as it arrives. Its methods
// are called from one goroutine at a time, in the order the runner sent
// things, and must not block for long: the relay waits for them.
type Sink interface {
	// Output receives each piece of stdout or stderr (stream is
	// [relay.TypeStdout] or [relay.TypeStderr]) after the output cap.
	Output(stream, data string)
	// File starts one file; its bytes follow through the FileWriter, and
	// its End is always called, also when the run ends mid-file. Files
	// come one at a time.
	File(f FileInfo) FileWriter
	// Skipped reports a file the runner did not send, and why.
	Skipped(f FileInfo, reason SkipReason)
}

// FileWriter takes the bytes of one file. A Write error drops the rest of
// that file's bytes (the run goes on); End is still called.
type FileWriter interface {
	Write(p []byte) (int, error)
	// End says how the file ended: nil when all its announced bytes
	// arrived unchanged, else why not (a *FileCutError).
	End(err error)
}

// FileCutError says why a file did not arrive whole.
type FileCutError struct {
	// Sent is how many bytes arrived, of Size announced.
	Sent, Size int64
	// Why is "changed" (the file changed while the runner read it),
	// "unreadable" (a read failed midway), or "ended" (the run ended before
	// the file did).
	Why string
}

func (e *FileCutError) Error() string {
	switch e.Why {
	case "changed":
		return "the file changed while it was being sent (still being written when the code ended?)"
	case "unreadable":
		return "reading the file failed midway"
	}
	return "the run ended before the file was sent"
}

// NoSink is a [Sink] that keeps nothing: files are read and dropped.
type NoSink struct{}

// Output drops the output.
func (NoSink) Output(string, string) {}

// File drops the file.
func (NoSink) File(FileInfo) FileWriter { return discard{} }

// Skipped drops the report.
func (NoSink) Skipped(FileInfo, SkipReason) {}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) End(error)                   {}

var _ Sink = NoSink{}
