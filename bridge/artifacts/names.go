package artifacts

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes is the longest file name the store writes: the usual limit
// of one path component.
const MaxNameBytes = 255

// maxExtBytes is the longest extension a cut name keeps.
const maxExtBytes = 32

// SanitiseName turns a file's name as the code gave it (a path relative to
// the outputs folder, "/"-separated, e.g. "plots/a.png") into one safe file
// name for the host ("plots_a.png"): the parts are joined with "_" after
// dropping empty, "." and ".." parts, so nothing can name another folder;
// "\" is a separator too; invalid UTF-8, NUL, control characters and
// bidirectional-text controls become "_"; a leading ".", "-" or "~" becomes
// "_" (no hidden files, nothing that reads as an option); and a name over
// MaxNameBytes is cut to fit, keeping its extension. The result is never
// empty, ".", "..", or hidden, has no "/", and SanitiseName leaves it as it
// is. The error says why no name is left.
func SanitiseName(name string) (string, error) {
	if name == "" {
		return "", errors.New("an empty file name")
	}
	parts := strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' })
	kept := parts[:0]
	for _, p := range parts {
		if p != "." && p != ".." {
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		return "", fmt.Errorf("no file name is left of %s once separators, \".\" and \"..\" are removed", DisplayName(name))
	}
	joined := strings.Join(kept, "_")
	var b strings.Builder
	b.Grow(len(joined))
	for i := 0; i < len(joined); {
		r, n := utf8.DecodeRuneInString(joined[i:])
		switch {
		case r == utf8.RuneError && n == 1, unsafeRune(r):
			b.WriteByte('_')
		case i == 0 && (r == '.' || r == '-' || r == '~'):
			b.WriteByte('_')
		default:
			b.WriteString(joined[i : i+n])
		}
		i += n
	}
	return fitName(b.String(), "", MaxNameBytes), nil
}

// fitName is stem+suffix+ext with stem cut (at a rune boundary) so that the
// whole is at most max bytes, where ext is name's extension when it is
// short and the name is too long.
func fitName(name, suffix string, max int) string {
	if suffix == "" && len(name) <= max {
		return name
	}
	ext := extension(name)
	if len(ext) > maxExtBytes {
		ext = ""
	}
	stem := name[:len(name)-len(ext)]
	keep := max - len(suffix) - len(ext)
	if len(stem) > keep {
		stem = stem[:runeStartAtOrBefore(stem, keep)]
	}
	return stem + suffix + ext
}

// withSuffix is name with " (n)" before its extension: "a (2).csv".
func withSuffix(name string, n int) string {
	return fitName(name, " ("+strconv.Itoa(n)+")", MaxNameBytes)
}

// runeStartAtOrBefore is the largest i <= n where s[i:] starts a rune.
func runeStartAtOrBefore(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// unsafeRune is a rune a file name must not show as is: control
// characters (C0, DEL, C1), and those that reorder or hide text.
func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r):
		return true
	case r == 0x061C, r == 0x200E, r == 0x200F, r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069:
		return true // bidirectional-text controls
	case r == 0x2028, r == 0x2029, r == 0xFEFF:
		return true // line and paragraph separators, byte order mark
	}
	return false
}

// maxDisplayPart is how much of each end of a long name DisplayName keeps.
const maxDisplayPart = 120

// DisplayName is a file's name made safe to show: invalid UTF-8 bytes and
// control characters are escaped (\xNN, \uNNNN), and a name over 256 bytes
// keeps its first and last 120 bytes around "…". The result is at most
// about 1 KiB, whatever the input.
func DisplayName(name string) string {
	if len(name) <= 2*maxDisplayPart+16 {
		return escapeName(name)
	}
	head := name[:runeStartAtOrBefore(name, maxDisplayPart)]
	tail := name[runeStartAtOrBefore(name, len(name)-maxDisplayPart):]
	return escapeName(head) + "…" + escapeName(tail)
}

func escapeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// validRunID says whether id is a run id: 1 to 32 lower-case letters and
// digits ([sandbox.NewRunID]'s, and what the sandbox accepts).
func validRunID(id string) bool {
	if len(id) == 0 || len(id) > 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// URIPrefix starts the URI of every stored file.
const URIPrefix = "bridge://runs/"

// URI is the URI of a stored file: bridge://runs/RUN/NAME, NAME
// path-escaped.
func URI(run, name string) string {
	return URIPrefix + run + "/" + url.PathEscape(name)
}

// ParseURI splits a stored file's URI into its run id and file name. It is
// strict: the run id must be valid, the name one that SanitiseName leaves
// as it is, and the URI exactly as URI writes it (no other escaping, no
// query or fragment), so what it returns is safe to use as a path
// component.
func ParseURI(uri string) (run, name string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("%s is not a file of this bridge: %s (want %sRUN/FILE, as a run's result gives it)", DisplayName(uri), why, URIPrefix)
	}
	rest, ok := strings.CutPrefix(uri, URIPrefix)
	if !ok {
		return bad("it does not start with " + URIPrefix)
	}
	run, esc, ok := strings.Cut(rest, "/")
	if !ok {
		return bad("no file name after the run id")
	}
	if !validRunID(run) {
		return bad("the run id is not 1 to 32 lower-case letters and digits")
	}
	name, err = url.PathUnescape(esc)
	if err != nil {
		return bad("the file name is not validly escaped")
	}
	if clean, err := SanitiseName(name); err != nil || clean != name {
		return bad("not a file name the bridge writes")
	}
	if URI(run, name) != uri {
		return bad("not escaped the way the bridge writes it")
	}
	return run, name, nil
}
