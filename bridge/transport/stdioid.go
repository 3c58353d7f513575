package transport

import (
	"bytes"
	"encoding/json"
)

// maxIDBytes bounds the JSON text of an id that idScan keeps (a string's
// with its quotes and escapes): an id that long is no client's counter, and
// keeping it would let a line make the scan hold as much as it likes. Such
// an id is answered as no id (null), and the log says why.
const maxIDBytes = 128

// maxKeyBytes bounds the JSON text of a top-level key that idScan keeps to
// compare with "id" and "method": the longest way to write "method" is six
// \uXXXX escapes and two quotes, 38 bytes, so a longer key is neither.
const maxKeyBytes = 64

// idState is where idScan is in the line.
type idState uint8

const (
	idBefore     idState = iota // before the top-level value
	idKeyOrEnd                  // after "{": a key or "}"
	idKeyNext                   // after ",": a key
	idKey                       // in a key
	idColon                     // after a key
	idValue                     // after ":"
	idString                    // in a member's string value
	idScalar                    // in a member's number or literal
	idNested                    // in a member's object or array
	idAfterValue                // after a member's value: "," or "}"
	idAfter                     // after the top-level object: only white space
	idFailed                    // not a JSON object, or a syntax error: the rest is ignored
)

// idScan finds the top-level "id" of a JSON object fed to it in pieces, as
// a line too long to hold is read: it keeps no more than a key or an id's
// text (maxKeyBytes, maxIDBytes) and a few counters, however long the line.
// It skips nested objects, arrays and strings (with their escapes) without
// keeping them. As encoding/json does for an object decoded into a map, the
// last "id" member counts. On JSON that is not valid it is lenient, and
// reports the id of a member read before the first syntax error it sees.
type idScan struct {
	state idState
	depth int  // idNested: the nesting inside the member's value
	inStr bool // idNested: inside a string
	esc   bool // inside a string, after a backslash

	buf    []byte // the key, or the id's text, being read
	over   bool   // buf's text was longer than its bound
	member string // the key whose value is being read: "id", "method" or ""

	sawID     bool            // the object has an "id" member
	id        json.RawMessage // the last "id" member's value, if a string or a number
	idTooLong bool            // the last "id" member's value was over maxIDBytes
	sawMethod bool            // the object has a "method" member
}

// lineID is what an idScan found in one line.
type lineID struct {
	id json.RawMessage // the id to answer with; nil: null
	// notification: a whole JSON object with a "method" and no "id" member,
	// which JSON-RPC does not answer.
	notification bool
	tooLong      bool // the line's id was over maxIDBytes: answered as null
}

// result is what s found in the line it was fed, now ended.
func (s *idScan) result() lineID {
	if s.state == idScalar {
		// The line's end ends a number: `{"id":4` is answered with 4.
		s.record(true)
		s.state = idAfterValue
	}
	if s.sawID {
		return lineID{id: s.id, tooLong: s.idTooLong}
	}
	return lineID{notification: s.state == idAfter && s.sawMethod}
}

// held is how many bytes s holds, whatever it was fed: at most
// maxIDBytes twice (an id being read, the last one read) or maxKeyBytes.
func (s *idScan) held() int { return cap(s.buf) + cap(s.id) }

// scanID returns what data, a whole line, says about its id.
func scanID(data []byte) lineID {
	var s idScan
	s.feed(data)
	return s.result()
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// feed scans the next bytes of the line.
func (s *idScan) feed(p []byte) {
	for len(p) > 0 && s.state != idFailed {
		switch s.state {
		case idKey, idString:
			p = s.stringBytes(p)
		case idNested:
			p = s.nestedBytes(p)
		case idScalar:
			p = s.scalarBytes(p)
		default:
			s.structural(p[0])
			p = p[1:]
		}
	}
}

// structural takes one byte between the tokens of the top-level object.
func (s *idScan) structural(c byte) {
	if isSpace(c) {
		return
	}
	next := idFailed
	switch {
	case s.state == idBefore && c == '{':
		next = idKeyOrEnd
	case (s.state == idKeyOrEnd || s.state == idKeyNext) && c == '"':
		s.startBuf(c)
		next = idKey
	case (s.state == idKeyOrEnd || s.state == idAfterValue) && c == '}':
		next = idAfter
	case s.state == idColon && c == ':':
		next = idValue
	case s.state == idAfterValue && c == ',':
		next = idKeyNext
	case s.state == idValue:
		next = s.startValue(c)
	}
	s.state = next
}

// startValue begins a member's value with its first byte c.
func (s *idScan) startValue(c byte) idState {
	switch c {
	case '"':
		s.startBuf(c)
		return idString
	case '{', '[':
		s.record(false) // an object or array is no id
		s.depth, s.inStr, s.esc = 1, false, false
		return idNested
	case '}', ']', ',', ':':
		return idFailed
	}
	s.startBuf(c)
	return idScalar
}

// startBuf starts keeping a key's or an id's text with its first byte c.
func (s *idScan) startBuf(c byte) {
	s.buf, s.over = s.buf[:0], false
	s.keep([]byte{c})
}

// keep adds p to buf, up to the bound of what buf holds.
func (s *idScan) keep(p []byte) {
	if s.state == idString && s.member != "id" {
		return // a value that is not the id is only skipped
	}
	limit := maxIDBytes
	if s.state == idKey || s.state == idKeyOrEnd || s.state == idKeyNext {
		limit = maxKeyBytes
	}
	if len(s.buf)+len(p) > limit {
		s.over = true
		return
	}
	if s.buf == nil {
		s.buf = make([]byte, 0, max(maxIDBytes, maxKeyBytes))
	}
	s.buf = append(s.buf, p...)
}

// stringBytes takes the bytes of a key or a string value up to its closing
// quote and returns the rest of p.
func (s *idScan) stringBytes(p []byte) []byte {
	for len(p) > 0 {
		if s.esc {
			s.esc = false
			s.keep(p[:1])
			p = p[1:]
			continue
		}
		i := bytes.IndexAny(p, `"\`)
		if i < 0 {
			s.keep(p)
			return nil
		}
		s.keep(p[:i+1])
		if p[i] == '\\' {
			s.esc = true
			p = p[i+1:]
			continue
		}
		if s.state == idKey {
			s.endKey()
		} else {
			s.record(true)
			s.state = idAfterValue
		}
		return p[i+1:]
	}
	return p
}

// endKey ends a key: the member is "id", "method" or another.
func (s *idScan) endKey() {
	s.state = idColon
	s.member = ""
	var k string
	if !s.over && json.Unmarshal(s.buf, &k) == nil && (k == "id" || k == "method") {
		s.member = k
	}
}

// record notes what the member's value says: kept says whether buf holds
// its text.
func (s *idScan) record(kept bool) {
	switch s.member {
	case "method":
		s.sawMethod = true
	case "id":
		s.sawID = true
		s.idTooLong = kept && s.over
		s.id = nil
		if kept && !s.over {
			s.id = normaliseID(s.buf)
		}
	}
}

// scalarBytes takes the bytes of a number or a literal (true, false,
// null) up to the byte that ends it, and returns p from that byte.
func (s *idScan) scalarBytes(p []byte) []byte {
	i := 0
	for i < len(p) && !endsScalar(p[i]) {
		i++
	}
	s.keep(p[:i])
	if i == len(p) {
		return nil
	}
	s.record(true)
	s.state = idAfterValue
	return p[i:]
}

// endsScalar says whether c cannot be part of a number or a literal.
func endsScalar(c byte) bool {
	switch c {
	case ',', '}', ']', '{', '[', ':', '"':
		return true
	}
	return isSpace(c)
}

// nestedBytes skips an object or array value up to its closing bracket and
// returns the rest of p.
func (s *idScan) nestedBytes(p []byte) []byte {
	for len(p) > 0 {
		if s.esc {
			s.esc = false
			p = p[1:]
			continue
		}
		special := `"{}[]`
		if s.inStr {
			special = `"\`
		}
		i := bytes.IndexAny(p, special)
		if i < 0 {
			return nil
		}
		c := p[i]
		p = p[i+1:]
		switch {
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr = !s.inStr
		case c == '{' || c == '[':
			s.depth++
		default: // '}' or ']'
			s.depth--
			if s.depth == 0 {
				s.state = idAfterValue
				return p
			}
		}
	}
	return nil
}

// normaliseID returns text, the JSON text of an id, if it is a string or a
// number (as the client wrote it, for the client to match); else nil
// (null, true, false, or not JSON).
func normaliseID(text []byte) json.RawMessage {
	var v any
	if c := text[0]; c != '"' && c != '-' && (c < '0' || c > '9') || json.Unmarshal(text, &v) != nil {
		return nil
	}
	return bytes.Clone(text)
}
