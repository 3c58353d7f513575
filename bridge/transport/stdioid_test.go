package transport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// scanPieces feeds data to an idScan cut into pieces of n bytes.
func scanPieces(data []byte, n int) (lineID, *idScan) {
	var s idScan
	for len(data) > 0 {
		k := min(n, len(data))
		s.feed(data[:k])
		data = data[k:]
	}
	return s.result(), &s
}

func TestScanID(t *testing.T) {
	long := `"` + strings.Repeat("i", maxIDBytes-2) + `"`
	for _, c := range []struct {
		in, want     string
		notification bool
		tooLong      bool
	}{
		{`{"id":3}`, "3", false, false},
		{`{"a":{"id":1},"id":"s"}`, `"s"`, false, false},
		{`{"jsonrpc":"2.0","id":-1.5e3,"method":`, "-1.5e3", false, false},
		{`{"method":"x","params":[1,2,{"id":9}],"id":4`, "4", false, false},
		// How the TypeScript SDK writes a request: the id last.
		{`{"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(1)"}},"jsonrpc":"2.0","id":12}`, "12", false, false},
		// Nested "id" keys, and "id" in strings, are not the request's.
		{`{"method":"m","params":{"id":99,"arguments":{"id":"nested","code":"x = {\"id\": 5}"}},"jsonrpc":"2.0","id":7}`, "7", false, false},
		{`{"method":"m","params":{"id":99,"a":[{"id":1},"\"id\":2"]},"jsonrpc":"2.0"}`, "", true, false},
		{`{"method":"m","params":"\"id\":3"}`, "", true, false},
		// String ids with escapes, as the client wrote them.
		{`{"method":"m","id":"a\"b\\c\u00e9\/"}`, `"a\"b\\c\u00e9\/"`, false, false},
		{`{"method":"m","params":{"s":"\\"},"id":"\\\"}"}`, `"\\\"}"`, false, false},
		{`{"\u0069\u0064":"k","method":"m"}`, `"k"`, false, false},
		{` { "id" : 5 , "method" : "m" } `, "5", false, false},
		// The last "id" counts, as in encoding/json.
		{`{"id":1,"method":"m","id":2}`, "2", false, false},
		{`{"id":1,"method":"m","id":null}`, "", false, false},
		{`{"id":` + long + `}`, long, false, false},
		{`{"id":"` + strings.Repeat("i", maxIDBytes-1) + `","method":"m"}`, "", false, true},
		{`{"id":` + strings.Repeat("1", maxIDBytes+1) + `,"method":"m"}`, "", false, true},
		{`{"id":null}`, "", false, false},
		{`{"id":true}`, "", false, false},
		{`{"id":[1]}`, "", false, false},
		{`{"id":{"id":1}}`, "", false, false},
		{`{"a":1}`, "", false, false},
		{`{"method":"m"}`, "", true, false},
		{`{"method":"m"} x`, "", false, false},
		{`{"method":"m"`, "", false, false},
		{`{"method":"m","params":[}`, "", false, false},
		{`[{"id":1}]`, "", false, false},
		{`"{\"id\":1}"`, "", false, false},
		{`garbage`, "", false, false},
		{`{"a":"unterminated`, "", false, false},
		{`{"id" 1}`, "", false, false},
		{`{"id":01}`, "", false, false},
		{`{"id":1-}`, "", false, false},
	} {
		for _, n := range []int{1, 2, 3, 7, len(c.in) + 1} {
			got, _ := scanPieces([]byte(c.in), n)
			if string(got.id) != c.want || got.notification != c.notification || got.tooLong != c.tooLong {
				t.Errorf("%s in pieces of %d: id %q notification %v too long %v; want %q %v %v",
					c.in, n, got.id, got.notification, got.tooLong, c.want, c.notification, c.tooLong)
			}
		}
	}
}

// repeatReader yields pattern over and over, n bytes in all, without
// holding more than pattern.
type repeatReader struct {
	pattern []byte
	off     int
	n       int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	for i := range p {
		p[i] = r.pattern[r.off]
		r.off = (r.off + 1) % len(r.pattern)
	}
	r.n -= int64(len(p))
	return len(p), nil
}

// A 100 MB line (a string with escapes, nested objects, a long number and
// a long string id on the way) leaves the scan holding a few hundred bytes.
func TestScanIDHoldsBoundedBytes(t *testing.T) {
	const lineLen int64 = 100 << 20
	pattern := `abc \"id\": 1, {[ \\ \u00e9 ` + strings.Repeat("x", 1000)
	line := io.MultiReader(
		strings.NewReader(`{"id":"`+strings.Repeat("i", 10*maxIDBytes)+`","n":`+strings.Repeat("9", 1<<20)+`,"method":"tools/call","params":{"a":[{"id":1}],"code":"`),
		// Whole patterns: a cut after a backslash would escape the quote
		// that ends the string.
		&repeatReader{pattern: []byte(pattern), n: lineLen - lineLen%int64(len(pattern))},
		strings.NewReader(`"},"jsonrpc":"2.0","id":"last\"one"}`+"\n"),
	)
	var s idScan
	buf := make([]byte, 64<<10)
	most := 0
	for {
		n, err := line.Read(buf)
		s.feed(buf[:n])
		most = max(most, s.held())
		if err == io.EOF {
			break
		}
	}
	if got := s.result(); string(got.id) != `"last\"one"` || got.notification || got.tooLong {
		t.Errorf("the id of the 100 MB line: %+v", got)
	}
	if bound := 2 * maxIDBytes; most > bound {
		t.Errorf("the scan of a 100 MB line held %d bytes, more than %d", most, bound)
	}
	t.Logf("the scan of a 100 MB line held at most %d bytes", most)
}

// FuzzScanID: on valid JSON, idScan finds what encoding/json finds
// (the top-level "id" decoded into a map, the last one if repeated),
// however the input is cut; on any input it holds bounded bytes.
func FuzzScanID(f *testing.F) {
	for _, s := range []string{
		`{"id":3}`, `{"method":"m","params":{"id":9,"s":"\"id\":1"},"id":"a\"b\\\u00e9"}`,
		`{"id":1,"id":2}`, `{"id":null}`, `{"method":"m"}`, `[1,{"id":2}]`, `"s"`, `{}`,
		`{"\u0069d":-0.5e-7}`, `{"id":{"id":1},"x":[[[]]]}`, `{"id":"\ud83d\ude00"}`, ` {"a" : "}" , "id" : 1 } `,
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, p []byte, cut uint8) {
		whole := scanID(p)
		pieces, s := scanPieces(p, int(cut)+1)
		if !bytes.Equal(whole.id, pieces.id) || whole.notification != pieces.notification || whole.tooLong != pieces.tooLong {
			t.Fatalf("%q: whole %+v, in pieces of %d %+v", p, whole, int(cut)+1, pieces)
		}
		if s.held() > 2*maxIDBytes {
			t.Fatalf("%q: held %d bytes", p, s.held())
		}
		if whole.id != nil && !json.Valid(whole.id) {
			t.Fatalf("%q: id %q is not JSON", p, whole.id)
		}
		if !json.Valid(p) {
			return
		}
		want := referenceID(p)
		if !bytes.Equal(whole.id, want.id) || whole.notification != want.notification || whole.tooLong != want.tooLong {
			t.Fatalf("%q: scan %+v, encoding/json %+v", p, whole, want)
		}
	})
}

// referenceID is what scanID should find in p, valid JSON, by way of
// encoding/json.
func referenceID(p []byte) lineID {
	if t := bytes.TrimLeft(p, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return lineID{}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil {
		panic(fmt.Sprintf("%q is valid JSON but not an object: %v", p, err))
	}
	raw, ok := m["id"]
	if !ok {
		_, method := m["method"]
		return lineID{notification: method}
	}
	if len(raw) > maxIDBytes {
		return lineID{tooLong: raw[0] == '"' || raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		panic(err)
	}
	switch v.(type) {
	case string, float64:
		return lineID{id: raw}
	}
	return lineID{}
}
