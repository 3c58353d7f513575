package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/bridge-mcp/bridge/internal/relay"
)

// Packer is an [Instance] that can pack its session's /tmp between two
// calls: the files of a snapshot.
type Packer interface {
	// Pack writes the session's /tmp to w as one tar file of at most
	// maxBytes, and returns its size. A session that is over the bound
	// gives a *PackTooLargeError and lives on; one that breaks the
	// protocol or does not answer within PackTimeout (or ctx) is ended.
	Pack(ctx context.Context, w io.Writer, maxBytes int64) (int64, error)
}

// PackTimeout bounds a pack, whatever the caller's ctx says.
const PackTimeout = 2 * time.Minute

// PackTooLargeError is a session whose /tmp would make an archive over
// the bound.
type PackTooLargeError struct{ Size, Max int64 }

func (e *PackTooLargeError) Error() string {
	return fmt.Sprintf("the session's /tmp packs to %d bytes, over the %d allowed", e.Size, e.Max)
}

// errNoIdleSession is Pack's error for an instance that holds no
// session's interpreter between two calls.
var errNoIdleSession = errors.New("this sandbox instance holds no session between two calls")

// Pack asks the runner for the session's /tmp (docs/protocol.md,
// "Snapshots") and writes it to w. It holds the instance as an Exec does.
func (i *Container) Pack(ctx context.Context, w io.Writer, maxBytes int64) (n int64, err error) {
	i.mu.Lock()
	ok := i.session && i.kept && !i.busy && !i.closed && !i.ended()
	if ok {
		i.busy = true
	}
	i.mu.Unlock()
	if !ok {
		return 0, errNoIdleSession
	}
	broken := false
	defer func() {
		i.mu.Lock()
		i.busy = false
		if broken {
			i.kept = false // the session ends: its runner is out of step
		}
		i.mu.Unlock()
	}()
	conn := i.conn
	unhook := context.AfterFunc(ctx, func() { conn.Close() })
	defer unhook()
	began := time.Now()
	deadline := began.Add(PackTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	allowed := deadline.Sub(began)
	conn.mu.Lock()
	_ = conn.SetWriteDeadline(deadline)
	err = conn.enc.Pack(relay.Pack{MaxBytes: maxBytes})
	conn.mu.Unlock()
	if err == nil {
		_ = conn.SetReadDeadline(deadline)
		n, err = readPack(conn.dec, w, maxBytes)
		_ = conn.SetReadDeadline(time.Time{})
	}
	var tooLarge *PackTooLargeError
	if err != nil && !errors.As(err, &tooLarge) {
		broken = true
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil {
			return 0, fmt.Errorf("packing the session's /tmp: the runner did not finish the pack within %s: the session is ended", allowed.Round(time.Second))
		}
		return 0, fmt.Errorf("packing the session's /tmp: %w", err)
	}
	return n, err
}

// readPack reads the runner's answer to pack: one file named
// relay.PackName within maxBytes, checked as any file of the outputs
// folder is, or a file_skip too_large.
func readPack(dec *relay.Decoder, w io.Writer, maxBytes int64) (int64, error) {
	sink := &packSink{w: w}
	f := newFiles(FileLimits{MaxFiles: 1, MaxFileBytes: maxBytes, MaxBytes: maxBytes}, sink)
	for {
		m, err := dec.Decode()
		if err != nil {
			return 0, err
		}
		switch m.Type {
		case relay.TypeFile:
			if m.File.Name != relay.PackName {
				return 0, fmt.Errorf("%w: pack answered with file %q", relay.ErrProtocol, m.File.Name)
			}
		case relay.TypeFileSkip:
			if m.FileSkip.Name != relay.PackName || m.FileSkip.Reason != string(SkipTooLarge) {
				return 0, fmt.Errorf("%w: pack answered with file_skip of %q (%s)", relay.ErrProtocol, m.FileSkip.Name, m.FileSkip.Reason)
			}
			return 0, &PackTooLargeError{Size: m.FileSkip.Size, Max: maxBytes}
		case relay.TypeFileData, relay.TypeFileEnd:
		default:
			return 0, fmt.Errorf("%w: %s frame while packing", relay.ErrProtocol, m.Type)
		}
		if err := f.handle(m); err != nil {
			return 0, err
		}
		if m.Type == relay.TypeFileEnd {
			return sink.n, sink.err
		}
	}
}

// packSink writes the one file of a pack to w.
type packSink struct {
	w   io.Writer
	n   int64
	err error // the write's failure, or the file's cut
}

func (s *packSink) Output(string, string)        {}
func (s *packSink) Skipped(FileInfo, SkipReason) {}
func (s *packSink) File(FileInfo) FileWriter     { return s }
func (s *packSink) End(err error) {
	if s.err == nil && err != nil {
		s.err = err
	}
}
func (s *packSink) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.n += int64(n)
	if err != nil {
		s.err = err
	}
	return n, err
}

// Pack packs the leased container's session ([Packer]).
func (l *Lease) Pack(ctx context.Context, w io.Writer, maxBytes int64) (int64, error) {
	l.mu.Lock()
	c := l.c
	l.mu.Unlock()
	if c == nil {
		return 0, errLeaseClosed
	}
	return c.Pack(ctx, w, maxBytes)
}

// Pack packs the instance's session, if its instance can ([Packer]).
func (ei *engineInstance) Pack(ctx context.Context, w io.Writer, maxBytes int64) (int64, error) {
	p, ok := ei.Instance.(Packer)
	if !ok {
		return 0, errNoIdleSession
	}
	return p.Pack(ctx, w, maxBytes)
}

var (
	_ Packer = (*Container)(nil)
	_ Packer = (*Lease)(nil)
	_ Packer = (*engineInstance)(nil)
)
