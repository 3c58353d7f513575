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
// When the queue is full, writes are dropped and counted; the count is
// written, as a line of its own, once the underlying writer takes data
// again. Writer is safe for concurrent use.
type Writer struct {
	out   io.Writer
	limit int

	mu      sync.Mutex
	queue   [][]byte
	queued  int // bytes in queue
	dropped int // writes dropped since the last report
	wake    chan struct{}
	closed  bool
	done    chan struct{}
}

// New returns a Writer to out that holds at most limit bytes of unwritten
// records. Call Close to stop its goroutine.
func New(out io.Writer, limit int) *Writer {
	w := &Writer{out: out, limit: limit, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// Write queues a copy of p, or drops it when the queue is full or the
// Writer is closed. It never blocks on the underlying writer and always
// reports success: a log record that cannot be written is not the caller's
// failure.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed || w.queued+len(p) > w.limit {
		w.dropped++
		w.mu.Unlock()
		return len(p), nil
	}
	w.queue = append(w.queue, append([]byte(nil), p...))
	w.queued += len(p)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *Writer) loop() {
	defer close(w.done)
	for {
		w.mu.Lock()
		batch, dropped, closed := w.queue, w.dropped, w.closed
		w.queue, w.dropped = nil, 0
		w.mu.Unlock()
		for _, b := range batch {
			_, _ = w.out.Write(b)
		}
		if dropped > 0 {
			fmt.Fprintf(w.out, "bridge: %d log records dropped: stderr was not read fast enough\n", dropped)
		}
		w.mu.Lock()
		for _, b := range batch {
			w.queued -= len(b)
		}
		empty := len(w.queue) == 0 && w.dropped == 0
		w.mu.Unlock()
		if closed && empty {
			return
		}
		if empty {
			<-w.wake
		}
	}
}

// Close writes what is queued, waiting at most timeout for the underlying
// writer, and stops the goroutine once it has. Writes after Close are
// dropped. It reports whether everything queued was written.
func (w *Writer) Close(timeout time.Duration) bool {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.done:
		return true
	case <-t.C:
		return false
	}
}
