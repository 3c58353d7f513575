// Package tokenize keeps personal data in tool results out of the sandbox:
// values of configured kinds (e-mail addresses, phone numbers, IBANs, card
// numbers, operator regexps) are replaced by per-run placeholders such as
// <EMAIL_1> before a result reaches the agent's code, and put back when the
// code passes a placeholder to a tool allowed to receive real values.
//
// A [Vault] is one run's mapping, in memory only. [Vault.Tokenize] finds the
// kinds' values in every JSON string of a result, keys included, and
// replaces them, together with every value the vault already holds, found
// wherever it occurs, byte for byte, even inside a longer word: a value
// tokenized once in a run reaches the sandbox from no tool again, in any
// string. [Vault.Restore] puts the values back into a tool's arguments. The
// same value always gets the same placeholder (its first, whatever kind
// finds it again), numbered per kind from 1 in the order found; restoring
// gives back the exact original text.
//
// What it does not protect: values the kinds miss (unusual formats, see
// [Builtin]; a kind's regexp that is too narrow), data of no configured kind
// (names, addresses, free text), values in JSON numbers (only strings are
// examined), values split across strings, a held value written otherwise
// (in other case, other spacing: only the kinds find those), and values
// escaped twice (JSON text inside a string that writes "@" as \u0040). The
// placeholders show what kind of value stood where and how many distinct
// values a run has seen. It neither logs nor prints anything, and its
// errors never quote a value.
//
// Precedence, where kinds' matches overlap: placeholders the vault knows are
// left alone; then email, iban, card and phone, in this order; then the
// operator's patterns in the order given. Text one kind took is not searched
// by the later ones, so a placeholder is never matched again. Held values
// are replaced leftmost-longest, so a newly found longer value
// (ann.bob@x.org) wins over a held one inside it (bob@x.org).
//
// Cost: linear in the size of the document: one validation, one pass per
// kind (the built-in kinds are hand-written scanners, a few bytes of
// look-around per byte; patterns are RE2, linear in the text), one pass for
// the held values (a hash test a byte, a walk of a radix tree where one may
// begin; a budget of index steps, see ErrCost, bounds crafted worst cases),
// plus decoding the strings with escapes and re-encoding those that change.
// A document with nothing to replace is returned as is, without copying.
// A vault's calls run one at a time.
package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// MaxValueLen is the length in bytes of the longest value a vault holds; a
// longer match (of an operator pattern: the built-in kinds' are shorter) is
// an ErrFull.
const MaxValueLen = 1024

// costPerByte is the budget of index steps a byte of a document (see
// ErrCost).
const costPerByte = 64

var (
	// ErrFull is the error of a Tokenize that found a new value the vault
	// cannot hold: one too many, one byte too many, or longer than
	// MaxValueLen. The vault is unchanged; the caller must not pass the
	// result on.
	ErrFull = errors.New("tokenize: vault full")
	// ErrCost is the error of a Tokenize that would take more than
	// costPerByte index steps a byte of js to find the values held: only
	// values crafted to share long beginnings with each other and with the
	// text do that (ordinary ones take a step or two a byte where they
	// occur, none elsewhere). It bounds the time a result can take. Fail
	// closed, as for ErrFull.
	ErrCost = errors.New("tokenize: result too costly to scan for held values")
	// ErrNotJSON is the error of a Tokenize or Restore given something that
	// is not one JSON value.
	ErrNotJSON = errors.New("tokenize: not valid JSON")
)

// Vault is one run's mapping between real values and placeholders. Safe for
// concurrent use; a Tokenize or Restore holds the vault's lock while it
// scans (not while checking the JSON).
type Vault struct {
	mu        sync.Mutex
	maxValues int
	maxBytes  int
	bytes     int              // sum of len(values)
	values    []string         // by id
	holders   []string         // placeholders by id
	byValue   map[string]int32 // value → id
	byHolder  map[string]int32 // placeholder → id
	last      map[string]int   // prefix → number of its last placeholder
	idx       index
}

// NewVault returns an empty vault holding at most maxValues values (and at
// most maxBytes bytes of values). Bounds of 0 or less admit no value.
func NewVault(maxValues int, maxBytes int) *Vault {
	return &Vault{
		maxValues: maxValues,
		maxBytes:  maxBytes,
		byValue:   map[string]int32{},
		byHolder:  map[string]int32{},
		last:      map[string]int{},
	}
}

// Len is the number of values held.
func (v *Vault) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.values)
}

// Tokenize returns js (a JSON document, e.g. an MCP CallToolResult) with
// every match of kinds in any JSON string (object values, array items, and
// object keys too) replaced by its placeholder, and every value the vault
// already holds replaced as well (even if kinds is empty). n is how many
// replacements were made. Only strings that change are re-encoded (without
// HTML escaping, so placeholders stay readable); all else is kept byte for
// byte, and when nothing changes js itself is returned. Strings are searched
// decoded, so escapes ("a\u0040b.com") hide nothing.
//
// Errors: ErrNotJSON; ErrFull (wrapped) when a new value would exceed the
// vault's bounds: then no value is added and the caller must refuse the
// result rather than leak it; ErrCost (the values found are held).
func (v *Vault) Tokenize(js []byte, kinds []Kind) (out []byte, n int, err error) {
	return v.TokenizeReply(js, kinds, nil)
}

// TokenizeReply is Tokenize for the reply to a request whose arguments
// were sent (a JSON document, as its sender wrote it: before Restore).
// A value that occurs in a string of sent is left as it is, and not held:
// the sender wrote it, so it learns nothing from seeing it again, whereas
// replacing it would tell the sender whether its guess is a value the
// vault holds (a tool that echoes its arguments would be an oracle). A
// sent that is not valid JSON exempts nothing.
func (v *Vault) TokenizeReply(js []byte, kinds []Kind, sent []byte) (out []byte, n int, err error) {
	if !json.Valid(js) {
		return nil, 0, ErrNotJSON
	}
	order := ordered(kinds)
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(order) == 0 && len(v.values) == 0 {
		return js, 0, nil
	}
	d := newDoc(v, js)
	if d.exempts, err = v.valuesIn(sent, order); err != nil {
		return nil, 0, err
	}
	if len(order) > 0 {
		// First find the new values of the whole document, so that all of
		// them, and only if all fit, are held before any is replaced: a value
		// found in the last string is replaced in the first one too.
		if err := d.detect(order); err != nil {
			return nil, 0, err
		}
		v.add(d.pending)
	}
	if len(v.values) == 0 {
		return js, 0, nil
	}
	return d.rewrite(false)
}

// Restore returns js (a JSON arguments object) with every placeholder the
// vault knows, inside JSON strings, replaced by its real value; unknown
// placeholders (and look-alikes) stay as they are. n counts replacements.
// Restored values are not searched again. Errors: ErrNotJSON.
func (v *Vault) Restore(js []byte) (out []byte, n int, err error) {
	if !json.Valid(js) {
		return nil, 0, ErrNotJSON
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.values) == 0 {
		return js, 0, nil
	}
	d := newDoc(v, js)
	return d.rewrite(true)
}

// holderAt returns the end and id of the placeholder the vault knows at
// s[i] == '<', or end -1.
func (v *Vault) holderAt(s string, i int) (end int, id int32) {
	j := i + 1
	for j < len(s) && (isUpper(s[j]) || isDigit(s[j]) || s[j] == '_') {
		j++
	}
	if j == len(s) || s[j] != '>' {
		return -1, 0
	}
	id, ok := v.byHolder[s[i:j+1]]
	if !ok {
		return -1, 0
	}
	return j + 1, id
}

// pending is a value found by Tokenize and not yet held.
type pending struct{ value, prefix string }

// add holds the values, numbering each kind's placeholders on from its last.
func (v *Vault) add(ps []pending) {
	for _, p := range ps {
		v.last[p.prefix]++
		h := "<" + p.prefix + "_" + strconv.Itoa(v.last[p.prefix]) + ">"
		id := int32(len(v.values))
		v.values = append(v.values, p.value)
		v.holders = append(v.holders, h)
		v.byValue[p.value] = id
		v.byHolder[h] = id
		v.bytes += len(p.value)
		v.idx.insert(p.value, id)
	}
}

// doc is one Tokenize or Restore call's scan of a document.
type doc struct {
	v   *Vault
	js  []byte
	src string // js, not copied: nothing taken from src outlives the call uncloned

	decoded []string // the escaped strings, decoded by detect, in order
	next    int      // rewrite's place in decoded
	budget  int      // index steps scrub may still take

	pending      []pending
	seen         map[string]bool // the pending values
	pendingBytes int
	exempts      map[string]bool // the values in the request replied to
	collect      map[string]bool // valuesIn's: the values found, nothing held or replaced

	free, rest, found []span // detect's scratch

	buf bytes.Buffer
	enc *json.Encoder
}

func newDoc(v *Vault, js []byte) doc {
	return doc{v: v, js: js, src: unsafe.String(unsafe.SliceData(js), len(js)), budget: costPerByte*len(js) + 1<<16}
}

// valuesIn returns the values in the strings of the JSON document sent
// that a reply's tokenization would replace: the values held, and the
// kinds' matches. It holds none of them. Nil when sent is empty or not
// valid JSON.
func (v *Vault) valuesIn(sent []byte, order []Kind) (map[string]bool, error) {
	if len(sent) == 0 || !json.Valid(sent) {
		return nil, nil
	}
	d := newDoc(v, sent)
	d.collect = map[string]bool{}
	if len(order) > 0 {
		if err := d.detect(order); err != nil {
			return nil, err
		}
	}
	if len(v.values) > 0 {
		d.next = 0
		for i := 0; ; {
			start, end := nextString(d.src, i)
			if start < 0 {
				break
			}
			i = end
			s := d.src[start+1 : end-1]
			if !plain(s) {
				s = d.decoded[d.next]
				d.next++
			}
			if _, n := d.scrub(s); n < 0 {
				return nil, ErrCost
			}
		}
	}
	return d.collect, nil
}

// exempt reports whether val is in the request replied to.
func (d *doc) exempt(val string) bool { return d.exempts[val] }

// nextString returns the bounds of the next string literal, quotes
// included, at or after i in the valid JSON src, or -1, -1. In valid JSON
// every quote outside a string starts one.
func nextString(src string, i int) (start, end int) {
	k := strings.IndexByte(src[i:], '"')
	if k < 0 {
		return -1, -1
	}
	start = i + k
	for j := start + 1; ; {
		q := j + strings.IndexByte(src[j:], '"')
		b := q
		for src[b-1] == '\\' {
			b--
		}
		if (q-b)%2 == 0 {
			return start, q + 1
		}
		j = q + 1
	}
}

// plain reports whether a string literal's text between the quotes is its
// content: no escapes, valid UTF-8.
func plain(raw string) bool {
	return strings.IndexByte(raw, '\\') < 0 && utf8.ValidString(raw)
}

// unquote decodes raw, the text of a valid JSON string literal between its
// quotes, as encoding/json does: escapes, surrogate pairs, and U+FFFD for
// invalid UTF-8 and lone surrogates.
func unquote(raw string) string {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '\\':
			switch c := raw[i+1]; c {
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if r2 := utf16.DecodeRune(r, hex4u(raw[i:])); r2 != utf8.RuneError {
						r = r2
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b.WriteRune(r)
				continue
			default: // " \ /
				b.WriteByte(c)
			}
			i += 2
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, n := utf8.DecodeRuneInString(raw[i:])
			b.WriteRune(r) // RuneError for an invalid byte
			i += n
		}
	}
	return b.String()
}

// hex4 is the value of the four hex digits at s[0:4].
func hex4(s string) rune {
	var r rune
	for _, c := range []byte(s[:4]) {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// hex4u is the value of a \uXXXX escape at s[0:6], or -1.
func hex4u(s string) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	return hex4(s[2:])
}

// detect finds the new values of the kinds (in precedence order) in all
// the document's strings, into d.pending.
func (d *doc) detect(order []Kind) error {
	for i := 0; ; {
		start, end := nextString(d.src, i)
		if start < 0 {
			return nil
		}
		i = end
		s := d.src[start+1 : end-1]
		if !plain(s) {
			s = unquote(s)
			d.decoded = append(d.decoded, s)
		}
		if err := d.detectIn(s, order); err != nil {
			return err
		}
	}
}

// detectIn finds the new values in s: each kind in the text that neither a
// placeholder the vault knows nor an earlier kind's match took.
func (d *doc) detectIn(s string, order []Kind) error {
	free := d.free[:0]
	at := 0
	for j := 0; ; {
		k := strings.IndexByte(s[j:], '<')
		if k < 0 {
			break
		}
		if end, _ := d.v.holderAt(s, j+k); end > 0 {
			if j+k > at {
				free = append(free, span{at, j + k})
			}
			at, j = end, end
		} else {
			j += k + 1
		}
	}
	if at < len(s) {
		free = append(free, span{at, len(s)})
	}
	for i := range order {
		k := &order[i]
		rest := d.rest[:0]
		for _, seg := range free {
			text := s[seg.start:seg.end]
			d.found = k.appendMatches(d.found[:0], text)
			at := 0
			for _, m := range d.found {
				if err := d.note(text[m.start:m.end], k); err != nil {
					return err
				}
				if m.start > at {
					rest = append(rest, span{seg.start + at, seg.start + m.start})
				}
				at = m.end
			}
			if at < len(text) {
				rest = append(rest, span{seg.start + at, seg.end})
			}
		}
		free, d.rest = rest, free
	}
	d.free = free
	return nil
}

// note records val, a match of kind k, unless it is held or pending.
func (d *doc) note(val string, k *Kind) error {
	v := d.v
	if d.collect != nil {
		d.collect[strings.Clone(val)] = true
		return nil
	}
	if _, ok := v.byValue[val]; ok || d.seen[val] || d.exempt(val) {
		return nil
	}
	switch {
	case len(val) > MaxValueLen:
		return fmt.Errorf("%w: a value of kind %s is longer than %d bytes", ErrFull, k.name, MaxValueLen)
	case len(v.values)+len(d.pending) >= v.maxValues:
		return fmt.Errorf("%w: it holds at most %d values", ErrFull, v.maxValues)
	case v.bytes+d.pendingBytes+len(val) > v.maxBytes:
		return fmt.Errorf("%w: it holds at most %d bytes of values", ErrFull, v.maxBytes)
	}
	val = strings.Clone(val) // it may be part of the caller's js
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	d.seen[val] = true
	d.pending = append(d.pending, pending{val, k.prefix})
	d.pendingBytes += len(val)
	return nil
}

// rewrite returns the document with the held values in its strings replaced
// by their placeholders (scrub), or with restore the placeholders by their
// values, and the number of replacements.
func (d *doc) rewrite(restore bool) ([]byte, int, error) {
	var out []byte
	last, total := 0, 0
	for i := 0; ; {
		start, end := nextString(d.src, i)
		if start < 0 {
			break
		}
		i = end
		if raw := d.src[start+1 : end-1]; restore && strings.IndexByte(raw, '<') < 0 && !strings.Contains(raw, `\u`) {
			continue // no placeholder, not even an escaped one
		}
		var s string
		if raw := d.src[start+1 : end-1]; plain(raw) {
			s = raw
		} else if d.next < len(d.decoded) {
			s = d.decoded[d.next]
			d.next++
		} else {
			s = unquote(raw)
		}
		var r string
		var n int
		if restore {
			r, n = d.restore(s)
		} else if r, n = d.scrub(s); n < 0 {
			return nil, 0, ErrCost
		}
		if n == 0 {
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(d.js)+len(d.js)/16)
		}
		out = append(out, d.js[last:start]...)
		out = d.appendString(out, r)
		last = end
		total += n
	}
	if out == nil {
		return d.js, 0, nil
	}
	return append(out, d.js[last:]...), total, nil
}

// appendString appends s as a JSON string, without HTML escaping.
func (d *doc) appendString(out []byte, s string) []byte {
	if d.enc == nil {
		d.enc = json.NewEncoder(&d.buf)
		d.enc.SetEscapeHTML(false)
	}
	d.buf.Reset()
	_ = d.enc.Encode(s) // a string always encodes
	return append(out, bytes.TrimSuffix(d.buf.Bytes(), []byte("\n"))...)
}

// scrub replaces the held values in s, leftmost-longest, leaving the
// placeholders the vault knows alone. n is -1 when the document's budget of
// index steps is spent.
func (d *doc) scrub(s string) (r string, n int) {
	v := d.v
	x := &v.idx
	var b strings.Builder
	last := 0
	// Every value and placeholder is at least x.k bytes long.
	for i := 0; i+x.k <= len(s); {
		if s[i] == '<' {
			if end, _ := v.holderAt(s, i); end > 0 {
				i = end
				continue
			}
		}
		if h := x.hash(s, i); x.bits[h>>6]&(1<<(h&63)) != 0 {
			end, id, steps := x.longest(s, i)
			if d.budget -= steps; d.budget < 0 {
				return "", -1
			}
			if end > 0 && d.collect != nil {
				d.collect[v.values[id]] = true
				i = end
				continue
			}
			if end > 0 && d.exempt(v.values[id]) {
				i = end // the request's own text, left as it is
				continue
			}
			if end > 0 {
				if n == 0 {
					b.Grow(len(s))
				}
				b.WriteString(s[last:i])
				b.WriteString(v.holders[id])
				last, i = end, end
				n++
				continue
			}
		}
		i++
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// restore replaces the placeholders the vault knows in s by their values.
func (d *doc) restore(s string) (string, int) {
	v := d.v
	var b strings.Builder
	last, n := 0, 0
	for i := 0; ; {
		k := strings.IndexByte(s[i:], '<')
		if k < 0 {
			break
		}
		i += k
		end, id := v.holderAt(s, i)
		if end < 0 {
			i++
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString(v.values[id])
		last, i = end, end
		n++
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}
