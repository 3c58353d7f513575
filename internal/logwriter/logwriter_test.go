package logwriter

import (
	"bufio"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// A reader that never reads must not block writers, and what the bound
// let through arrives once it reads, followed by the count of the rest.
func TestWriterNeverBlocks(t *testing.T) {
	pr, pw := io.Pipe()
	w := New(pw, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100_000 {
			w.Write([]byte("0123456789012345678\n")) // 20 bytes
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked on a reader that does not read")
	}
	w.mu.Lock()
	queued := len(w.buf) + w.writing
	w.mu.Unlock()
	if queued > 1000 {
		t.Fatalf("%d bytes queued over a 1000-byte bound", queued)
	}
	lines := make(chan string, 200)
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	got, dropped := 0, ""
	for dropped == "" {
		select {
		case l := <-lines:
			if strings.Contains(l, "dropped") {
				dropped = l
			} else {
				got++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no report of dropped records after %d lines", got)
		}
	}
	// One record may be in the pipe's write when the bound is reached.
	if got < 1 || got > 51 {
		t.Fatalf("%d records written of a 1000-byte bound of 20-byte records", got)
	}
	if !strings.Contains(dropped, "log records dropped") {
		t.Fatalf("report: %q", dropped)
	}
	if !w.Close(5 * time.Second) {
		t.Fatal("Close did not finish with a reader")
	}
	pw.Close()
}

func TestCloseGivesUpOnAStuckWriter(t *testing.T) {
	_, pw := io.Pipe()
	w := New(pw, 1<<10)
	w.Write([]byte("a record\n"))
	start := time.Now()
	if w.Close(100 * time.Millisecond) {
		t.Fatal("Close says it wrote everything to a writer that never took a byte")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %s", d)
	}
	n, err := w.Write([]byte("after close\n"))
	if n != 12 || err != nil {
		t.Fatalf("Write after Close: %d, %v", n, err)
	}
}

func TestWriterWritesInOrder(t *testing.T) {
	var b strings.Builder
	w := New(&syncWriter{b: &b}, 1<<20)
	for i := range 100 {
		w.Write([]byte{byte('a' + i%26)})
	}
	if !w.Close(5 * time.Second) {
		t.Fatal("Close")
	}
	want := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 4)[:100]
	if b.String() != want {
		t.Fatalf("got %q", b.String())
	}
}

type syncWriter struct{ b *strings.Builder }

func (s *syncWriter) Write(p []byte) (int, error) { return s.b.Write(p) }

// Records that arrive together go out in one write: the audit writes a
// record per tool call, and each write wakes the reader of the pipe.
func TestWriterCoalesces(t *testing.T) {
	c := &countingWriter{}
	w := New(c, 1<<20)
	for range 100 {
		w.Write([]byte("a record of the audit\n"))
	}
	// A lone record is written without Close, within its linger.
	deadline := time.Now().Add(5 * time.Second)
	for c.bytes() < 100*22 {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s, %d bytes of 2200 written", c.bytes())
		}
		time.Sleep(time.Millisecond)
	}
	if n := c.writes(); n > 2 {
		t.Fatalf("100 records written at once took %d writes, want 1 or 2", n)
	}
	w.Write([]byte("a last one\n"))
	if !w.Close(5 * time.Second) {
		t.Fatal("Close")
	}
	if c.bytes() != 100*22+11 {
		t.Fatalf("%d bytes written, want %d", c.bytes(), 100*22+11)
	}
}

type countingWriter struct {
	mu sync.Mutex
	n  int
	b  int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.b += len(p)
	return len(p), nil
}

func (c *countingWriter) writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countingWriter) bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b
}
