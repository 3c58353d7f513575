package proxy

import (
	"bytes"
	"strings"
)

// stripJSONC blanks out the // and /* */ comments and the trailing commas
// that VS Code's JSON with comments allows, keeping every other byte in
// place so that error positions still match the file.
func stripJSONC(data []byte) []byte {
	out := bytes.Clone(data)
	blank := func(i int) {
		if out[i] != '\n' && out[i] != '\r' {
			out[i] = ' '
		}
	}
	// Comments first, then trailing commas, which comments may hide.
	for i := 0; i < len(out); i++ {
		switch {
		case out[i] == '"':
			i = skipString(out, i)
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '/':
			for ; i < len(out) && out[i] != '\n'; i++ {
				blank(i)
			}
		case out[i] == '/' && i+1 < len(out) && out[i+1] == '*':
			end := bytes.Index(out[i+2:], []byte("*/"))
			if end < 0 {
				return out // unterminated: the JSON decoder will say where
			}
			for j := i; j < i+2+end+2; j++ {
				blank(j)
			}
			i += 2 + end + 1
		}
	}
	for i := 0; i < len(out); i++ {
		switch out[i] {
		case '"':
			i = skipString(out, i)
		case ',':
			j := i + 1
			for j < len(out) && strings.IndexByte(" \t\r\n", out[j]) >= 0 {
				j++
			}
			if j < len(out) && (out[j] == '}' || out[j] == ']') {
				out[i] = ' '
			}
		}
	}
	return out
}

// skipString returns the index of the quote that ends the string starting
// at data[i], or the last index when it does not end.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(data) - 1
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	if col > 1 {
		col-- // the decoder's offset is just past the offending byte
	}
	return line, col
}
