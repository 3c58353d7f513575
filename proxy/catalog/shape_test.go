package catalog

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestResultShape(t *testing.T) {
	tests := []struct {
		name, schema, want string
	}{
		// No shape.
		{"nil", ``, ``},
		{"blank", " \n", ``},
		{"null", `null`, ``},
		{"empty", `{}`, ``},
		{"true", `true`, ``},
		{"number", `42`, ``},
		{"string", `"object"`, ``},
		{"array", `[{"type":"string"}]`, ``},
		{"invalid", `{"type":`, ``},
		{"two values", `{"type":"string"} {}`, ``},
		{"unknown type", `{"type":"thing"}`, ``},
		{"remote ref", `{"$ref":"https://example.com/schema.json"}`, ``},
		{"self ref", `{"$ref":"#"}`, ``},

		// The reference servers' (filesystem, memory, everything).
		{"filesystem", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"content":{"type":"string"}},"required":["content"],"additionalProperties":false}`,
			`{content: str}`},
		{"memory", `{"type":"object","properties":{"entities":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"entityType":{"type":"string"},"observations":{"type":"array","items":{"type":"string"}}},"required":["name","entityType","observations"]}},"relations":{"type":"array","items":{"type":"object","properties":{"from":{"type":"string"},"to":{"type":"string"},"relationType":{"type":"string"}},"required":["from","to","relationType"]}}},"required":["entities","relations"]}`,
			`{entities: [{name: str, entityType: str, observations: [str]}], relations: [{from: str, to: str, relationType: str}]}`},
		{"everything", `{"type":"object","properties":{"temperature":{"type":"number","description":"Temperature in celsius"},"conditions":{"type":"string"},"humidity":{"type":"number"}},"required":["temperature","conditions","humidity"]}`,
			`{temperature: float, conditions: str, humidity: float}`},

		// docs/sandbox-api.md's.
		{"docs: status", `{"type":"object","properties":{"status":{"enum":["ok","failed"]},"error":{"type":["string","null"]}},"required":["status"]}`,
			`{status: "ok"|"failed", error?: str | None}`},
		{"docs: map", `{"type":"object","additionalProperties":{"type":"number"}}`, `{str: float}`},
		{"docs: tree", `{"$defs":{"Node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["name"]}},"$ref":"#/$defs/Node"}`,
			`{name: str, children?: [{name: str, children?: [{name: str, children?: [{...}]}]}]}`},

		// Types.
		{"object", `{"type":"object"}`, `{...}`},
		{"scalars", `{"type":"object","properties":{"s":{"type":"string"},"i":{"type":"integer"},"f":{"type":"number"},"b":{"type":"boolean"},"n":{"type":"null"},"x":{},"y":true,"z":{"type":"thing"}},"required":["s","i","f","b","n","x","y","z"]}`,
			`{s: str, i: int, f: float, b: bool, n: None, x: any, y: any, z: any}`},
		{"optional", `{"type":"object","properties":{"items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"email":{"type":"string","description":"Left out."},"tags":{"type":"array","items":{"type":"string"}}},"required":["id","email"]}},"total":{"type":"integer"}},"required":["items","total"]}`,
			`{items: [{id: int, email: str, tags?: [str]}], total: int}`},
		{"required first, then by name", `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"string"},"z":{"type":"string"},"y":{"type":"string"}},"required":["z","b"]}`,
			`{z: str, b: str, a?: str, y?: str}`},
		{"odd required", `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["b",1,"missing","b",null]}`,
			`{b: str, a?: str}`},
		{"required not a list", `{"type":"object","properties":{"a":{"type":"string"}},"required":"a"}`, `{a?: str}`},
		{"array", `{"type":"array","items":{"type":"integer"}}`, `[int]`},
		{"array of anything", `{"type":"array"}`, `[any]`},
		{"tuple items", `{"type":"array","items":[{"type":"string"},{"type":"integer"}]}`, `[any]`},
		{"array of arrays", `{"type":"array","items":{"type":"array","items":{"type":"boolean"}}}`, `[[bool]]`},
		{"no type, properties", `{"properties":{"a":{"type":"integer"}}}`, `{a?: int}`},
		{"no type, items", `{"items":{"type":"string"}}`, `[str]`},
		{"empty properties", `{"type":"object","properties":{}}`, `{...}`},
		{"map", `{"type":"object","additionalProperties":{"type":"integer"}}`, `{str: int}`},
		{"map of objects", `{"type":"object","additionalProperties":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}`, `{str: {n: int}}`},
		{"open object", `{"type":"object","additionalProperties":true}`, `{...}`},
		{"nullable", `{"type":["string","null"]}`, `str | None`},
		{"type list with an object", `{"type":["object","null"],"properties":{"a":{"type":"integer"}}}`, `{a?: int} | None`},
		{"type list with a non-string", `{"type":["string",7]}`, `str | any`},
		{"empty type list", `{"type":[]}`, ``},
		{"long type list", `{"type":["string","integer","number","boolean","null","array","object"]}`, `str | int | float | bool | None | [any] | ...`},

		// Literals and unions.
		{"enum", `{"type":"string","enum":["a","b"]}`, `"a"|"b"`},
		{"enum kinds", `{"enum":[1,2.5,true,false,null,"x\"y"]}`, `1|2.5|True|False|None|"x\"y"`},
		{"enum containers", `{"enum":[[1],{"a":1}]}`, `[...]|{...}`},
		{"long enum", `{"enum":["a","b","c","d","e","f","g","h"]}`, `"a"|"b"|"c"|"d"|"e"|"f"|...`},
		{"empty enum", `{"type":"string","enum":[]}`, `str`},
		{"long literal", `{"const":"` + strings.Repeat("é", 50) + `"}`, `"` + strings.Repeat("é", 39) + `…"`},
		{"const", `{"type":"object","properties":{"kind":{"const":"user"},"n":{"const":3}},"required":["kind","n"]}`, `{kind: "user", n: 3}`},
		{"anyOf", `{"anyOf":[{"type":"integer"},{"type":"string"}]}`, `int | str`},
		{"oneOf", `{"oneOf":[{"type":"object","properties":{"ok":{"const":true}},"required":["ok"]},{"type":"null"}]}`, `{ok: True} | None`},
		{"anyOf before type", `{"type":"object","anyOf":[{"type":"object","properties":{"a":{"type":"string"}}}]}`, `{a?: str}`},
		{"long anyOf", `{"anyOf":[{"type":"integer"},{"type":"string"},{"type":"null"},{"type":"boolean"},{"type":"number"},{"type":"array"},{"type":"object"}]}`,
			`int | str | None | bool | float | [any] | ...`},
		{"empty anyOf", `{"anyOf":[],"type":"string"}`, `str`},
		{"allOf of one", `{"allOf":[{"type":"string"}]}`, `str`},
		{"allOf of two", `{"allOf":[{"type":"string"},{"minLength":1}]}`, ``},

		// References.
		{"defs", `{"$defs":{"Item":{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"}},"required":["id","name"]}},"type":"object","properties":{"items":{"type":"array","items":{"$ref":"#/$defs/Item"}}},"required":["items"]}`,
			`{items: [{id: int, name: str}]}`},
		{"definitions, escaped", `{"definitions":{"a/b~c":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a~1b~0c"}}}`, `{x?: str}`},
		{"ref to a property", `{"properties":{"a":{"type":"integer"},"b":{"$ref":"#/properties/a"}}}`, `{a?: int, b?: int}`},
		{"unresolved refs", `{"properties":{"a":{"$ref":"#/$defs/none"},"b":{"$ref":"#/properties/b/x/y"},"c":{"$ref":"other.json#/x"},"d":{"$ref":7}}}`,
			`{a?: any, b?: any, c?: any, d?: any}`},
		{"ref through an array", `{"$defs":{"l":[{"type":"string"}]},"properties":{"a":{"$ref":"#/$defs/l/0"}}}`, `{a?: any}`},
		{"recursive ref", `{"$defs":{"Node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["name"]}},"$ref":"#/$defs/Node"}`,
			`{name: str, children?: [{name: str, children?: [{name: str, children?: [{...}]}]}]}`},
		{"ref cycle", `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`, `{x?: any}`},

		// Bounds.
		{"depth", `{"properties":{"a":{"properties":{"b":{"properties":{"c":{"properties":{"d":{"type":"string"}}}}}}}}}`, `{a?: {b?: {c?: {...}}}}`},
		{"names", `{"properties":{"a b":{"type":"string"},"":{"type":"string"},"x\"y":{"type":"string"},"max-count":{"type":"integer"},"$id.v@2":{"type":"integer"},"naïve":{"type":"integer"},"a:b":{}},"required":["a b","","x\"y","max-count","$id.v@2","naïve","a:b"]}`,
			`{"a b": str, "": str, "x\"y": str, max-count: int, $id.v@2: int, naïve: int, "a:b": any}`},
		{"long name", `{"properties":{"` + strings.Repeat("n", 60) + `":{"type":"string"}}}`, `{` + strings.Repeat("n", 39) + `…?: str}`},
	}
	for _, tt := range tests {
		if got := ResultShape(json.RawMessage(tt.schema)); got != tt.want {
			t.Errorf("%s: ResultShape(%s)\n got %s\nwant %s", tt.name, tt.schema, got, tt.want)
		}
	}
	if got := ResultShape(nil); got != "" {
		t.Errorf("ResultShape(nil) = %q", got)
	}
}

// shapeProperties returns an object schema's "properties" of n properties
// p000, p001... of type typ, and its "required" list of the first nreq.
func shapeProperties(n, nreq int, typ string) string {
	var props, req []string
	for i := range n {
		props = append(props, fmt.Sprintf(`"p%03d":{"type":%q}`, i, typ))
		if i < nreq {
			req = append(req, fmt.Sprintf(`"p%03d"`, i))
		}
	}
	return `"properties":{` + strings.Join(props, ",") + `},"required":[` + strings.Join(req, ",") + `]`
}

func TestResultShapeBounds(t *testing.T) {
	// Eight properties, then "...": the required ones first.
	got := ResultShape(json.RawMessage(`{"type":"object",` + shapeProperties(20, 3, "integer") + `}`))
	if want := `{p000: int, p001: int, p002: int, p003?: int, p004?: int, p005?: int, p006?: int, p007?: int, ...}`; got != want {
		t.Errorf("20 properties:\n got %s\nwant %s", got, want)
	}
	got = ResultShape(json.RawMessage(`{"type":"object",` + shapeProperties(20, 12, "integer") + `}`))
	if want := `{p000: int, p001: int, p002: int, p003: int, p004: int, p005: int, p006: int, p007: int, ...}`; got != want {
		t.Errorf("12 required:\n got %s\nwant %s", got, want)
	}

	// Objects of objects: cut at 300 runes, with "…".
	inner := `{"type":"object",` + shapeProperties(8, 8, "string") + `}`
	var outer []string
	for i := range 8 {
		outer = append(outer, fmt.Sprintf(`"object%d":%s`, i, inner))
	}
	got = ResultShape(json.RawMessage(`{"type":"object","properties":{` + strings.Join(outer, ",") + `}}`))
	if utf8.RuneCountInString(got) != shapeMaxRunes || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "{object0?: {p000: str, p001: str") {
		t.Errorf("long shape (%d runes): %s", utf8.RuneCountInString(got), got)
	}
}

// TestResultShapeHostile holds ResultShape to its bounds on schemas made to
// break them: it must answer within 300 runes of valid UTF-8, after looking
// at a bounded number of schemas and names (counted, not timed: a clock
// measures the machine, and failed under -race on a loaded one).
func TestResultShapeHostile(t *testing.T) {
	nest := func(n int, open, close string) string {
		return strings.Repeat(open, n) + `{"type":"string"}` + strings.Repeat(close, n)
	}
	bigObject := `{"type":"object",` + shapeProperties(200_000, 200_000, "string") + `}`
	var manyRefs []string
	for i := range 64 {
		manyRefs = append(manyRefs, fmt.Sprintf(`"r%02d":{"type":"array","items":{"$ref":"#/$defs/big"}}`, i))
	}
	longRef := `#/` + strings.Repeat("$defs/", 100_000) + `x`
	tests := []struct {
		name, schema string
		prefix       string // of the shape
	}{
		{"nested arrays", nest(5000, `{"type":"array","items":`, `}`), "[[[[[[[[[[[[[any]]]]]]]]]]]]]"},
		{"arrays nested too deep for JSON", nest(20_000, `{"type":"array","items":`, `}`), ""},
		{"nested objects", nest(3000, `{"type":"object","properties":{"a":`, `}}`), "{a?: {a?: {a?: {...}}}}"},
		{"nested anyOf", nest(3000, `{"anyOf":[`, `]}`), ""},
		{"nested allOf", nest(3000, `{"allOf":[`, `]}`), ""},
		{"nested maps", nest(4000, `{"type":"object","additionalProperties":`, `}`), "{str: {str: {str: {...}}}}"},
		{"exponential refs", `{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, "any | any | any"},
		{"exponential objects", `{"$defs":{"o":{"type":"object","properties":{"a":{"$ref":"#/$defs/o"},"b":{"$ref":"#/$defs/o"},"c":{"$ref":"#/$defs/o"}},"required":["a","b","c"]}},"$ref":"#/$defs/o"}`, "{a: {a: {a: {...}, b: {...}, c: {...}}, b: {a: {...}"},
		{"huge object", bigObject, "{p000: str, p001: str, p002: str, p003: str, p004: str, p005: str, p006: str, p007: str, ...}"},
		{"huge object, referenced often", `{"$defs":{"big":` + bigObject + `},"type":"object","properties":{` + strings.Join(manyRefs, ",") + `}}`, "{r00?: [{p000: str, p001: str"},
		{"huge required list", `{"type":"object","properties":{"a":{"type":"string"}},"required":[` + strings.Repeat(`"a",`, 500_000) + `"a"]}`, "{a: str}"},
		{"huge enum", `{"enum":[` + strings.Repeat(`"aaaaaaaaaa",`, 500_000) + `1]}`, `"aaaaaaaaaa"|"aaaaaaaaaa"|"aaaaaaaaaa"|"aaaaaaaaaa"|"aaaaaaaaaa"|"aaaaaaaaaa"|...`},
		{"huge type list", `{"type":[` + strings.Repeat(`"string",`, 500_000) + `"null"]}`, "str | str | str | str | str | str | ..."},
		{"long ref", `{"$defs":{},"properties":{"a":{"$ref":"` + longRef + `"},"b":{"$ref":"` + longRef + `"}}}`, "{a?: any, b?: any}"},
		{"long name", `{"properties":{"` + strings.Repeat("ü", 1_000_000) + `":{}}}`, "{" + strings.Repeat("ü", 39) + "…?: any}"},
		{"long literal", `{"const":"` + strings.Repeat("\\u0000", 1_000_000) + `"}`, `"` + strings.Repeat(`\x00`, 39) + `…"`},
		{"invalid UTF-8", "{\"properties\":{\"\xff\xfe\":{\"const\":\"\xc3\"}}}", "{\"\uFFFD\uFFFD\"?: \"\uFFFD\"}"},
	}
	// The most schemas one shape may look at: the exponential cases stop
	// at the text's bound, nesting at shapeMaxNest (the most here is 164).
	// The names looked at stop past shapeMaxWork, after one more object's
	// at most (which the input holds).
	const shapeMaxVisits = 1000
	for _, tt := range tests {
		got, visits, work := shape(json.RawMessage(tt.schema))
		if maxWork := shapeMaxWork + len(tt.schema); visits > shapeMaxVisits || work > maxWork {
			t.Errorf("%s: looked at %d schemas and %d names, want at most %d and %d", tt.name, visits, work, shapeMaxVisits, maxWork)
		}
		if n := utf8.RuneCountInString(got); n > shapeMaxRunes || !utf8.ValidString(got) {
			t.Errorf("%s: %d runes, valid UTF-8 %v: %.400s", tt.name, n, utf8.ValidString(got), got)
		}
		if !strings.HasPrefix(got, tt.prefix) || tt.prefix == "" && got != "" {
			t.Errorf("%s: %.400s, want %s...", tt.name, got, tt.prefix)
		}
	}
}

// FuzzResultShape: no schema panics ResultShape or makes it answer more
// than 300 runes, or invalid UTF-8.
//
//	go test ./proxy -run '^$' -fuzz FuzzResultShape -fuzztime 60s
func FuzzResultShape(f *testing.F) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"enum":[1,"x",null]}},"required":["a"]}`,
		`{"$defs":{"n":{"properties":{"c":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"}`,
		`{"anyOf":[{"$ref":"#"},{"allOf":[{"const":true}]}],"additionalProperties":{"type":"integer"}}`,
		`{"oneOf":[{"type":"object"}],"items":{"$ref":"#/items"}}`, `null`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, schema []byte) {
		got := ResultShape(schema)
		if n := utf8.RuneCountInString(got); n > shapeMaxRunes || !utf8.ValidString(got) {
			t.Fatalf("ResultShape(%q) = %q: %d runes", schema, got, n)
		}
	})
}
