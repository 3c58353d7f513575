package engines

import "unicode/utf8"

// LogTail keeps the last limit bytes written to it, in at most 2*limit
// bytes of memory and amortised linear time: what [sandbox.Runtime.Logs] returns of a
// container's own output, however much of it there is.
type LogTail struct {
	limit int
	buf   []byte
	// cut is set once bytes before those in buf were dropped.
	cut bool
}

// NewLogTail returns a LogTail of limit bytes (0 when negative).
func NewLogTail(limit int) *LogTail { return &LogTail{limit: max(limit, 0)} }

// Write implements io.Writer; it never fails.
func (t *LogTail) Write(p []byte) (int, error) {
	n := len(p)
	switch {
	case n == 0:
	case n >= t.limit:
		t.cut = t.cut || len(t.buf) > 0 || n > t.limit
		t.buf = append(t.buf[:0], p[n-t.limit:]...)
	default:
		if len(t.buf)+n > 2*t.limit {
			// Keep what, with p, makes limit bytes.
			t.buf = append(t.buf[:0], t.buf[len(t.buf)-(t.limit-n):]...)
			t.cut = true
		}
		t.buf = append(t.buf, p...)
	}
	return n, nil
}

// WriteString is Write for a string.
func (t *LogTail) WriteString(s string) (int, error) {
	return t.Write([]byte(s))
}

// String returns the last limit bytes written. When earlier bytes were cut,
// it starts at a character boundary: the continuation bytes of a UTF-8
// sequence whose start was cut are dropped.
func (t *LogTail) String() string {
	b, cut := t.buf, t.cut
	if len(b) > t.limit {
		b, cut = b[len(b)-t.limit:], true
	}
	if cut {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return string(b)
}
