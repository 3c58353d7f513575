package sandbox

import (
	"fmt"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// files receives the files of one execution from the runner's file,
// file_data, file_end and file_skip frames, checks them against the
// protocol and the execution's FileLimits, and hands them to the [Sink].
// Every check holds whatever the runner says: the code shares its process.
type files struct {
	limits FileLimits
	sink   Sink
	next   int64 // the id the next file must have
	count  int   // files announced
	total  int64 // bytes announced
	skips  int   // file_skip frames
	cur    *openFile
}

type openFile struct {
	id     int64
	info   FileInfo
	w      FileWriter
	sent   int64
	failed bool // a Write failed: the rest is dropped
}

func newFiles(l FileLimits, sink Sink) *files { return &files{limits: l, sink: sink, next: 1} }

// handle takes one file frame; an error is a protocol error.
func (f *files) handle(m relay.Message) error {
	switch m.Type {
	case relay.TypeFile:
		x := m.File
		switch {
		case f.cur != nil:
			return fmt.Errorf("%w: file %d before file %d ended", relay.ErrProtocol, x.ID, f.cur.id)
		case x.ID != f.next:
			return fmt.Errorf("%w: file id %d, want %d", relay.ErrProtocol, x.ID, f.next)
		case f.count >= f.limits.MaxFiles:
			return fmt.Errorf("%w: more than the %d files exec allowed", relay.ErrProtocol, f.limits.MaxFiles)
		case x.Size > f.limits.MaxFileBytes:
			return fmt.Errorf("%w: file of %d bytes, over the %d exec allowed", relay.ErrProtocol, x.Size, f.limits.MaxFileBytes)
		case x.Size > f.limits.MaxBytes-f.total:
			return fmt.Errorf("%w: files of more than the %d bytes exec allowed", relay.ErrProtocol, f.limits.MaxBytes)
		}
		f.next++
		f.count++
		f.total += x.Size
		info := FileInfo{Name: x.Name, Size: x.Size}
		f.cur = &openFile{id: x.ID, info: info, w: f.sink.File(info)}
	case relay.TypeFileData:
		x, c := m.FileData, f.cur
		switch {
		case c == nil || x.ID != c.id:
			return fmt.Errorf("%w: file_data for file %d, which is not being sent", relay.ErrProtocol, x.ID)
		case int64(len(x.Data)) > c.info.Size-c.sent:
			return fmt.Errorf("%w: file %d sent more than its %d bytes", relay.ErrProtocol, x.ID, c.info.Size)
		}
		c.sent += int64(len(x.Data))
		if !c.failed {
			if _, err := c.w.Write(x.Data); err != nil {
				c.failed = true
			}
		}
	case relay.TypeFileEnd:
		x, c := m.FileEnd, f.cur
		if c == nil || x.ID != c.id {
			return fmt.Errorf("%w: file_end for file %d, which is not being sent", relay.ErrProtocol, x.ID)
		}
		f.cur = nil
		switch {
		case x.Status == relay.FileComplete && c.sent != c.info.Size:
			c.w.End(&FileCutError{Sent: c.sent, Size: c.info.Size, Why: "ended"})
			return fmt.Errorf("%w: file %d complete after %d of its %d bytes", relay.ErrProtocol, x.ID, c.sent, c.info.Size)
		case x.Status == relay.FileComplete:
			c.w.End(nil)
		default:
			c.w.End(&FileCutError{Sent: c.sent, Size: c.info.Size, Why: x.Status})
		}
	case relay.TypeFileSkip:
		x := m.FileSkip
		if f.skips >= relay.MaxFileSkips {
			return fmt.Errorf("%w: more than %d file_skip frames", relay.ErrProtocol, relay.MaxFileSkips)
		}
		f.skips++
		f.sink.Skipped(FileInfo{Name: x.Name, Size: x.Size}, SkipReason(x.Reason))
	}
	return nil
}

// end cuts the file being sent, if any: the run ended inside it.
func (f *files) end() {
	if c := f.cur; c != nil {
		f.cur = nil
		c.w.End(&FileCutError{Sent: c.sent, Size: c.info.Size, Why: "ended"})
	}
}
