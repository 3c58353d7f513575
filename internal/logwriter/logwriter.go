// Package logwriter gives the bridge's logs a writer that never blocks: an
// MCP client may pipe the bridge's stderr and never read it, and a log call
// must not stall a run because a pipe is full.
package logwriter

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Writer queues whole writes (zerolog writes one record per Write) up to a
// byte bound and writes them to the underlying writer from one goroutine.
// A record written after a quiet Linger goes out at once; those that follow
// it within Linger wait for the next write, at most one every Linger: a
// record per tool call (the audit's) must not cost the bridge a wakeup and
// a write each, nor the reader of the pipe a wakeup each. When the queue
// is full, writes are dropped and counted; the count is written, as a line
// of its own, once the underlying writer takes data again. Writer is safe
// for concurrent use.
type Writer struct {
	out    io.Writer
	limit  int
	linger time.Duration

	mu      sync.Mutex
	buf     []byte // records not taken by the loop yet
	writing int    // bytes the loop is writing now
	dropped int    // writes dropped since the last report
	closed  bool
	wake    chan struct{}
	stop    chan struct{} // closed by Close: write what is queued at once
	done    chan struct{}
}

// Linger is the least time between two writes: a record is seen that much
// later at most.
const Linger = 5 * time.Millisecond

// keepBuffer is the largest buffer the loop keeps for the next batch; a
// larger one (after a burst) is let go.
const keepBuffer = 64 << 10

// New returns a Writer to out that holds at most limit bytes of unwritten
// records. Call Close to stop its goroutine.
func New(out io.Writer, limit int) *Writer {
	w := &Writer{out: out, limit: limit, linger: Linger,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	return w
}

// Write queues a copy of p, or drops it when the queue is full or the
// Writer is closed. It never blocks on the underlying writer and always
// reports success: a log record that cannot be written is not the caller's
// failure.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || len(w.buf)+w.writing+len(p) > w.limit {
		w.dropped++
		w.mu.Unlock()
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *Writer) loop() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var spare []byte
	var last time.Time // of the last write
	for {
		w.mu.Lock()
		empty, closed := len(w.buf) == 0 && w.dropped == 0, w.closed
		w.mu.Unlock()
		if empty {
			if closed {
				return
			}
			select {
			case <-w.wake:
			case <-w.stop:
			}
			continue
		}
		if wait := w.linger - time.Since(last); !closed && wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-w.stop:
				timer.Stop()
			}
		}
		w.mu.Lock()
		batch, dropped := w.buf, w.dropped
		w.buf, w.dropped, w.writing = spare[:0], 0, len(batch)
		w.mu.Unlock()
		if len(batch) > 0 {
			_, _ = w.out.Write(batch)
		}
		if dropped > 0 {
			fmt.Fprintf(w.out, "bridge: %d log records dropped: stderr was not read fast enough\n", dropped)
		}
		last = time.Now()
		w.mu.Lock()
		w.writing = 0
		w.mu.Unlock()
		spare = nil
		if cap(batch) <= keepBuffer {
			spare = batch
		}
	}
}

// Close writes what is queued, waiting at most timeout for the underlying
// writer, and stops the goroutine once it has. Writes after Close are
// dropped. It reports whether everything queued was written.
func (w *Writer) Close(timeout time.Duration) bool {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
	w.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
		return false
	}
}
