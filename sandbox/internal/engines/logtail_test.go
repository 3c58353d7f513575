package engines

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLogTail(t *testing.T) {
	tests := []struct {
		name   string
		limit  int
		writes []string
		want   string
	}{
		{"nothing", 10, nil, ""},
		{"fits", 10, []string{"abc", "def"}, "abcdef"},
		{"cut", 4, []string{"abc", "def"}, "cdef"},
		{"one big write", 3, []string{"abcdefgh"}, "fgh"},
		{"big write after small", 3, []string{"xy", "abc"}, "abc"},
		{"exact", 6, []string{"abc", "def"}, "abcdef"},
		{"many small", 4, strings.Split("abcdefghijklmnopqrstuvwxyz", ""), "wxyz"},
		{"zero limit", 0, []string{"abc"}, ""},
		{"multibyte kept whole", 3, []string{"xé"}, "xé"},
		{"split rune dropped", 2, []string{"aé"}, "é"},
		{"split rune start", 2, []string{"éa"}, "a"},
		{"split rune across writes", 3, []string{"a€", "b"}, "b"},
		{"split rune after compaction", 3, []string{"12", "34", "€", "x"}, "x"},
		{"rune after compaction", 5, []string{"12345", "6789", "€", "x"}, "9€x"},
		// Nothing was cut: a log that itself starts mid-rune is returned as is.
		{"uncut stray byte kept", 4, []string{"\xa9ab"}, "\xa9ab"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewLogTail(tc.limit)
			for _, w := range tc.writes {
				if n, err := tb.WriteString(w); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				if len(tb.buf) > 2*tc.limit {
					t.Fatalf("buffer grew to %d > 2*%d", len(tb.buf), tc.limit)
				}
			}
			if got := tb.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The tail of any sequence of writes is the tail of their concatenation.
func TestLogTailMatchesConcatenation(t *testing.T) {
	text := strings.Repeat("héllo wörld €uro ", 50)
	for _, limit := range []int{1, 2, 3, 7, 16, 100, 1000, 2000} {
		for _, chunk := range []int{1, 2, 3, 5, 64, 1000} {
			tb := NewLogTail(limit)
			var all bytes.Buffer
			for i := 0; i < len(text); i += chunk {
				p := []byte(text[i:min(i+chunk, len(text))])
				tb.Write(p)
				all.Write(p)
			}
			want := all.Bytes()
			if len(want) > limit {
				want = want[len(want)-limit:]
				for len(want) > 0 && !utf8.RuneStart(want[0]) {
					want = want[1:]
				}
			}
			if got := tb.String(); got != string(want) {
				t.Errorf("limit %d, chunks of %d: got %q, want %q", limit, chunk, got, want)
			}
		}
	}
}
