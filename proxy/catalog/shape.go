package catalog

import (
	"bytes"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of ResultShape's text and work.
const (
	// shapeMaxDepth is how many objects deep a shape goes; a deeper
	// object is "{...}".
	shapeMaxDepth = 3
	// shapeMaxNest bounds the nesting of schemas of every kind (objects,
	// arrays, unions, references followed); a deeper schema is "any".
	shapeMaxNest = 12
	// shapeMaxProps is how many properties an object shows, then "...".
	shapeMaxProps = 8
	// shapeMaxAlts is how many members a union, an enum or a type list
	// shows, then "...".
	shapeMaxAlts = 6
	// shapeMaxName is how many runes of a property name or a literal show.
	shapeMaxName = 40
	// shapeMaxRunes is the length of the whole text, "…" included.
	shapeMaxRunes = 300
	// shapeMaxWork bounds the property names, required names and
	// reference tokens looked at in all: a schema of huge objects,
	// referenced again and again, stops there.
	shapeMaxWork = 1 << 20
)

// ResultShape returns a compact text of the values a JSON Schema allows,
// written for Python code that reads a tool's result:
// {items: [{id: int, tags?: [str]}], total: int}.
//
// Types are Python's: str, int, float, bool, None; an array is [T]; an
// object lists its properties, the required ones first (in the order of
// "required"), then the optional ones by name, marked "?"; an object
// without properties is {...}, or {str: T} when additionalProperties says
// T. An enum or const is its literals, "a"|"b"; anyOf, oneOf and a list of
// types are A | B. A reference within the schema ("#/$defs/Item") is
// followed; any other, and whatever else the schema does not pin down, is
// any. Descriptions are left out.
//
// The text is bounded: objects nest 3 deep (deeper ones are {...}), show
// 8 properties and unions 6 members (then "..."), names and literals are
// cut at 40 runes and the whole at 300, with "…". It is "" for a schema
// that is empty, null, not valid JSON or says nothing of the shape (any).
func ResultShape(schema json.RawMessage) string {
	text, _, _ := shape(schema)
	return text
}

// shape is ResultShape, with the schemas it looked at (calls of value) and
// its work (see shapeMaxWork): the tests hold both to bounds, where a clock
// would measure the machine.
func shape(schema json.RawMessage) (text string, visits, work int) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var root any
	if dec.Decode(&root) != nil || root == nil {
		return "", 0, 0
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", 0, 0 // more than one value
	}
	s := shaper{root: root}
	s.value(root, 0, 0)
	if t := s.text(); t != "any" {
		return t, s.visits, s.work
	}
	return "", s.visits, s.work
}

// shaper writes one shape.
type shaper struct {
	root  any // the whole schema, for references
	out   strings.Builder
	runes int // in out
	work  int // see shapeMaxWork
	// visits counts the calls of value, for the tests.
	visits int
}

// full says whether the text is long enough, or the work done great
// enough, to stop.
func (s *shaper) full() bool {
	return s.runes > shapeMaxRunes || s.work > shapeMaxWork
}

func (s *shaper) put(text string) {
	if s.full() {
		return
	}
	s.out.WriteString(text)
	s.runes += utf8.RuneCountInString(text)
}

// text is what was written, cut with "…" if it is too long or the work
// stopped early.
func (s *shaper) text() string {
	t := s.out.String()
	if !s.full() {
		return t
	}
	return prefix(t, shapeMaxRunes-1) + "…"
}

// value writes the shape of schema v; depth counts the objects around it,
// nest the schemas.
func (s *shaper) value(v any, depth, nest int) {
	s.visits++
	if s.full() {
		return
	}
	m, ok := v.(map[string]any)
	if !ok || nest > shapeMaxNest {
		s.put("any")
		return
	}
	if ref, ok := m["$ref"].(string); ok {
		s.value(s.resolve(ref), depth, nest+1)
		return
	}
	if enum, ok := m["enum"].([]any); ok && len(enum) > 0 {
		for i, e := range enum[:min(len(enum), shapeMaxAlts)] {
			if i > 0 {
				s.put("|")
			}
			s.literal(e)
		}
		if len(enum) > shapeMaxAlts {
			s.put("|...")
		}
		return
	}
	if c, ok := m["const"]; ok {
		s.literal(c)
		return
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := m[key].([]any); ok && len(alts) > 0 {
			for i, alt := range alts[:min(len(alts), shapeMaxAlts)] {
				if i > 0 {
					s.put(" | ")
				}
				s.value(alt, depth, nest+1)
			}
			if len(alts) > shapeMaxAlts {
				s.put(" | ...")
			}
			return
		}
	}
	if all, ok := m["allOf"].([]any); ok && len(all) == 1 {
		s.value(all[0], depth, nest+1)
		return
	}
	switch t := m["type"].(type) {
	case string:
		s.typed(t, m, depth, nest)
	case []any:
		if len(t) == 0 {
			s.put("any")
			return
		}
		for i, x := range t[:min(len(t), shapeMaxAlts)] {
			if i > 0 {
				s.put(" | ")
			}
			name, _ := x.(string)
			s.typed(name, m, depth, nest)
		}
		if len(t) > shapeMaxAlts {
			s.put(" | ...")
		}
	default:
		switch {
		case m["properties"] != nil:
			s.typed("object", m, depth, nest)
		case m["items"] != nil:
			s.typed("array", m, depth, nest)
		default:
			s.put("any")
		}
	}
}

// typed writes the shape of schema m as a value of the JSON Schema type t.
func (s *shaper) typed(t string, m map[string]any, depth, nest int) {
	switch t {
	case "string":
		s.put("str")
	case "integer":
		s.put("int")
	case "number":
		s.put("float")
	case "boolean":
		s.put("bool")
	case "null":
		s.put("None")
	case "array":
		s.put("[")
		s.value(m["items"], depth, nest+1)
		s.put("]")
	case "object":
		s.object(m, depth, nest)
	default:
		s.put("any")
	}
}

func (s *shaper) object(m map[string]any, depth, nest int) {
	if depth >= shapeMaxDepth {
		s.put("{...}")
		return
	}
	props, _ := m["properties"].(map[string]any)
	if len(props) == 0 {
		if extra, ok := m["additionalProperties"].(map[string]any); ok && len(extra) > 0 {
			s.put("{str: ")
			s.value(extra, depth+1, nest+1)
			s.put("}")
			return
		}
		s.put("{...}")
		return
	}
	shown := s.properties(props, m["required"])
	if s.full() {
		return
	}
	s.put("{")
	for i, p := range shown {
		if i > 0 {
			s.put(", ")
		}
		s.put(propertyName(p.name))
		if !p.required {
			s.put("?")
		}
		s.put(": ")
		s.value(props[p.name], depth+1, nest+1)
	}
	if len(shown) < len(props) {
		s.put(", ...")
	}
	s.put("}")
}

type shapeProperty struct {
	name     string
	required bool
}

// properties picks the properties an object shows: the required ones in
// the order of required, then the optional ones by name, shapeMaxProps in
// all.
func (s *shaper) properties(props map[string]any, required any) []shapeProperty {
	req, _ := required.([]any)
	s.work += len(props) + len(req)
	if s.full() {
		return nil
	}
	var shown []shapeProperty
	isReq := make(map[string]bool)
	for _, r := range req {
		name, ok := r.(string)
		if _, in := props[name]; !ok || !in || isReq[name] {
			continue
		}
		isReq[name] = true
		if len(shown) < shapeMaxProps {
			shown = append(shown, shapeProperty{name, true})
		}
	}
	// The first optional names, by name, kept sorted.
	room := shapeMaxProps - len(shown)
	var optional []string
	for name := range props {
		if room == 0 {
			break
		}
		if isReq[name] {
			continue
		}
		i, _ := slices.BinarySearch(optional, name)
		if i < room {
			optional = slices.Insert(optional, i, name)
			optional = optional[:min(len(optional), room)]
		}
	}
	for _, name := range optional {
		shown = append(shown, shapeProperty{name, false})
	}
	return shown
}

// resolve returns what a reference within the schema ("#",
// "#/$defs/Item") points to, or nil.
func (s *shaper) resolve(ref string) any {
	if ref == "#" {
		return s.root
	}
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	v := s.root
	for more := true; more; {
		var token string
		token, rest, more = strings.Cut(rest, "/")
		s.work++
		m, ok := v.(map[string]any)
		if !ok || s.full() {
			return nil
		}
		v = m[strings.ReplaceAll(strings.ReplaceAll(token, "~1", "/"), "~0", "~")]
	}
	return v
}

// literal writes an enum's or a const's value as Python writes it.
func (s *shaper) literal(v any) {
	switch v := v.(type) {
	case nil:
		s.put("None")
	case bool:
		if v {
			s.put("True")
		} else {
			s.put("False")
		}
	case json.Number:
		s.put(clip(v.String(), shapeMaxName))
	case string:
		s.put(strconv.Quote(clip(v, shapeMaxName)))
	case []any:
		s.put("[...]")
	default:
		s.put("{...}")
	}
}

// propertyName is name as a shape shows it: as it is if it is made of
// letters, digits and "_-.$@", else quoted; cut at shapeMaxName runes.
func propertyName(name string) string {
	plain := name != "" && strings.IndexFunc(name, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("_-.$@", r)
	}) < 0
	if plain {
		return clip(name, shapeMaxName)
	}
	return strconv.Quote(clip(name, shapeMaxName))
}

// clip cuts s to n runes, the last of them "…", if it is longer.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return prefix(s, n-1) + "…"
}

// prefix returns the first n runes of s.
func prefix(s string, n int) string {
	i := 0
	for ; n > 0 && i < len(s); n-- {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}
