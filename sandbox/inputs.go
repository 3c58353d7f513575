package sandbox

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// InputFile is one file put in the sandbox's inputs folder before the code
// runs (docs/protocol.md, "Files in").
type InputFile struct {
	// Path is relative to the inputs folder: [relay.CheckFileName]'s rule.
	Path string
	// Size is the file's size in bytes; Data must yield exactly that many.
	Size int64
	// Archive marks a tar of a session's /tmp, unpacked there rather than
	// put under the inputs folder: a restored snapshot. Only the first
	// input may be one.
	Archive bool
	// Open returns the file's bytes, read in order while the file is put
	// and then closed. It may be called again: a pooled container found
	// dead has the inputs put again in another.
	Open func() (io.ReadCloser, error)
}

// CheckInputs reports the first input whose path the runner would refuse,
// or two inputs of one path, before anything is sent.
func CheckInputs(in []InputFile) error {
	seen := make(map[string]bool, len(in))
	for n, f := range in {
		if f.Archive && n > 0 {
			return fmt.Errorf("input %q: only the first input may be an archive", f.Path)
		}
		if err := relay.CheckFileName(f.Path); err != nil {
			return fmt.Errorf("input path %q: %w", f.Path, err)
		}
		if seen[f.Path] {
			return fmt.Errorf("input path %q is given twice", f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 || f.Open == nil {
			return fmt.Errorf("input %q: no data", f.Path)
		}
	}
	return nil
}

// errInputSource is an input that could not be read whole: its source
// failed or changed. The runner has part of it, so the instance is closed.
var errInputSource = errors.New("reading an input")

// putInputs sends the inputs to the runner, each write bounded by
// timeout: put, its bytes in pieces of at most relay.MaxFilePiece, put_end.
func (c *runnerConn) putInputs(in []InputFile, timeout time.Duration) error {
	if len(in) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	buf := make([]byte, min(relay.MaxFilePiece, maxSize(in)))
	for i, f := range in {
		id := int64(i + 1)
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		if err := c.enc.Put(relay.Put{ID: id, Path: f.Path, Size: f.Size, Archive: f.Archive}); err != nil {
			return err
		}
		if err := c.putData(id, f, buf, timeout); err != nil {
			return err
		}
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		if err := c.enc.PutEnd(relay.PutEnd{ID: id}); err != nil {
			return err
		}
	}
	return nil
}

// putData sends f's bytes in put_data frames.
func (c *runnerConn) putData(id int64, f InputFile, buf []byte, timeout time.Duration) error {
	r, err := f.Open()
	if err != nil {
		return fmt.Errorf("%w %q: %w", errInputSource, f.Path, err)
	}
	defer r.Close()
	for left := f.Size; left > 0; {
		n, err := io.ReadFull(r, buf[:min(left, int64(len(buf)))])
		if err != nil {
			return fmt.Errorf("%w %q: it ended after %d of its %d bytes: %w", errInputSource, f.Path, f.Size-left, f.Size, err)
		}
		left -= int64(n)
		_ = c.SetWriteDeadline(time.Now().Add(timeout))
		if err := c.enc.PutData(relay.PutData{ID: id, Data: buf[:n]}); err != nil {
			return err
		}
	}
	return nil
}

// maxSize is the size of the largest input, at least 1.
func maxSize(in []InputFile) int {
	most := int64(1)
	for _, f := range in {
		most = max(most, f.Size)
	}
	return int(min(most, relay.MaxFilePiece))
}
