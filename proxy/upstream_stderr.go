package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

// Bounds of what a stdio server's stderr may put in an error: its last
// tailLines lines, each cut to tailLineBytes, and tailBytes in all. A
// server that cannot start says why in its last lines (a missing token, a
// bad argument); a stack trace is cut to its end.
const (
	tailLines     = 10
	tailLineBytes = 512
	tailBytes     = 2 << 10
	// maxStderrLine bounds one logged line of an upstream's stderr.
	maxStderrLine = 4 << 10
	// tailWait bounds the wait for the rest of the stderr of a server that
	// exited: it is closed once the process was waited for (which may take
	// the command's WaitDelay when a child of the server keeps it open).
	tailWait = 2 * time.Second
)

// stdioProc is one process of a stdio server, as far as an error about it
// needs: what it last wrote to stderr, and how it ended.
type stdioProc struct {
	tail stderrTail
	// stderrDone is closed when its stderr was read to the end, which is
	// after the process was waited for.
	stderrDone chan struct{}

	mu      sync.Mutex
	state   *os.ProcessState // nil until the process was waited for
	closing bool             // the bridge began to close the connection
	hungUp  bool             // before that, the server closed its end of a pipe
}

func newStdioProc() *stdioProc { return &stdioProc{stderrDone: make(chan struct{})} }

// closeStarted records that the bridge closes the connection: reads and
// writes fail from now on, whatever the server does.
func (p *stdioProc) closeStarted() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
}

// ioFailed records an error reading the server's stdout or writing its
// stdin. Unless the bridge was closing the connection, the end of stdout
// or a broken pipe means the server closed its end, as it does by exiting;
// other errors (a line past the SDK's bound) are the bridge's doing.
func (p *stdioProc) ioFailed(err error) {
	p.mu.Lock()
	if !p.closing && (errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)) {
		p.hungUp = true
	}
	p.mu.Unlock()
}

// serverHungUp reports whether the server closed its end of the
// connection (see ioFailed).
func (p *stdioProc) serverHungUp() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hungUp
}

// ended records how the process ended; state is nil when it did not start
// or was not waited for.
func (p *stdioProc) ended(state *os.ProcessState) {
	p.mu.Lock()
	p.state = state
	p.mu.Unlock()
}

func (p *stdioProc) exitState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// startError explains err, the failure of a connect to the server: when
// the server closed the connection before it answered (exited is true), it
// exited during start-up, and that is said with its exit status instead of
// the SDK's "connection closed: ... EOF". In any case, what it last wrote
// to stderr (scrubbed as it was read) follows: it most likely says what
// went wrong.
func (p *stdioProc) startError(err error, exited bool) error {
	msg := err.Error()
	// A failed connect has closed the connection, which waited for the
	// process: the rest of stderr is on its way to the reader, and a line
	// read but not yet kept would be missing from the message. Wait for the
	// reader to reach the end (bounded: a child may hold stderr open).
	select {
	case <-p.stderrDone:
	case <-time.After(tailWait):
	}
	if exited {
		if st := p.exitState(); st != nil {
			msg = fmt.Sprintf("it exited during start-up (%s)", st)
		} else {
			msg = "it closed the connection during start-up"
		}
	}
	lines := p.tail.lines()
	switch {
	case len(lines) > 0:
		msg += "; its stderr ended with:\n  " + strings.Join(lines, "\n  ")
	case exited:
		msg += ", writing nothing to stderr"
	}
	return errors.New(msg)
}

// waitedState returns cmd's ProcessState when err, what the SDK's Close of
// the connection returned, is cmd.Wait's result (nil, an exit, or a child
// that kept stderr open past WaitDelay), so that the process was waited
// for; nil otherwise.
func waitedState(cmd *exec.Cmd, err error) *os.ProcessState {
	var ee *exec.ExitError
	if err == nil || errors.As(err, &ee) || errors.Is(err, exec.ErrWaitDelay) {
		return cmd.ProcessState
	}
	return nil
}

// stderrTail keeps the last lines a process wrote to stderr, within
// tailLines, tailLineBytes and tailBytes. It is safe for concurrent use.
type stderrTail struct {
	mu    sync.Mutex
	buf   []string
	bytes int
}

// add keeps line, cut to tailLineBytes, and drops the oldest lines past
// the bounds. line is to be plainText already.
func (t *stderrTail) add(line string) {
	line = cutText(line, tailLineBytes)
	if strings.TrimSpace(line) == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, line)
	t.bytes += len(line)
	for len(t.buf) > tailLines || t.bytes > tailBytes {
		t.bytes -= len(t.buf[0])
		t.buf = slices.Delete(t.buf, 0, 1)
	}
}

// lines returns the lines kept, oldest first.
func (t *stderrTail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.buf)
}

// plainText is s without terminal escape sequences (CSI, as colours use)
// and other control characters but tabs, and with invalid UTF-8 replaced.
func plainText(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f || r == utf8.RuneError }) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 0x1b && i+1 < len(s) && s[i+1] == '[':
			// ESC [ parameters and intermediates, then a final byte in @-~.
			i += 2
			for i < len(s) && (s[i] < 0x40 || s[i] > 0x7e) {
				i++
			}
		case c < 0x20 && c != '\t', c == 0x7f:
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// cutText is s cut to at most n bytes at a rune boundary, "…" marking the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// logStderr reads the server's stderr: each line, without escapes and
// scrubbed of the server's secrets, is logged tagged with its name and
// kept in p's tail. Lines are cut at maxStderrLine bytes.
func (u *upstream) logStderr(r *io.PipeReader, p *stdioProc) {
	defer u.procs.Done()
	defer close(p.stderrDone)
	br := bufio.NewReaderSize(r, maxStderrLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			// Scrubbed after the escapes are gone: colours around a
			// secret must not hide it from the [Scrubber].
			text := u.scrubber.Scrub(plainText(strings.TrimRight(string(line), "\r\n")))
			if strings.TrimSpace(text) != "" {
				u.log.Info().Str("stream", "stderr").Msg(text)
				p.tail.add(text)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			// The rest of an over-long line is dropped.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
		}
		if err != nil {
			_ = r.Close()
			return
		}
	}
}
