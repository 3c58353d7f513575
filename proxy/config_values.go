package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// decoder decodes the fields of an entry, reporting wrong types with their
// JSON path. A null field counts as absent.
type decoder struct {
	fail func(path, format string, args ...any)
}

// want checks raw's kind; absent and null give false with no error.
func (d decoder) want(raw json.RawMessage, path, want string) bool {
	k := kind(raw)
	if k == "" || k == "null" {
		return false
	}
	if k != want {
		d.fail(path, "want %s, got %s", article(want), k)
		return false
	}
	return true
}

func (d decoder) str(raw json.RawMessage, path string) string {
	var s string
	if d.want(raw, path, "string") {
		_ = json.Unmarshal(raw, &s) // a valid JSON string decodes
	}
	return s
}

func (d decoder) boolean(raw json.RawMessage, path string) bool {
	var b bool
	if d.want(raw, path, "boolean") {
		_ = json.Unmarshal(raw, &b)
	}
	return b
}

func (d decoder) strings(raw json.RawMessage, path string) []string {
	if !d.want(raw, path, "array") {
		return nil
	}
	var items []json.RawMessage
	_ = json.Unmarshal(raw, &items)
	out := make([]string, len(items))
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		if k := kind(item); k != "string" {
			d.fail(p, "want a string, got %s", k)
			continue
		}
		_ = json.Unmarshal(item, &out[i])
	}
	return out
}

func (d decoder) stringMap(raw json.RawMessage, path string) map[string]string {
	if !d.want(raw, path, "object") {
		return nil
	}
	var items map[string]json.RawMessage
	_ = json.Unmarshal(raw, &items)
	out := make(map[string]string, len(items))
	for _, k := range sortedKeys(items) {
		p := joinPath(path, k)
		if kd := kind(items[k]); kd != "string" {
			d.fail(p, "want a string, got %s", kd)
			continue
		}
		var s string
		_ = json.Unmarshal(items[k], &s)
		out[k] = s
	}
	return out
}

// kind names the JSON type of raw, or "" when raw is empty.
func kind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func article(kind string) string {
	if kind == "object" || kind == "array" {
		return "an " + kind
	}
	return "a " + kind
}

// joinPath appends key to a JSON path: .key when it is a plain word,
// ["key"] otherwise.
func joinPath(path, key string) string {
	plain := key != "" && len(key) <= MaxNameLen
	for i, r := range key {
		if !(r == '_' || r == '-' || unicode.IsLetter(r) && r < utf8.RuneSelf || unicode.IsDigit(r) && r < utf8.RuneSelf && i > 0) {
			plain = false
			break
		}
	}
	if plain {
		return path + "." + key
	}
	return path + "[\"" + printable(key) + "\"]"
}
