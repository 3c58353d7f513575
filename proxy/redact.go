package proxy

import (
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// URLs of upstream servers and of the proxy may carry secrets: a user and
// password, query values (?api_key=), a token in the path (Zapier-style
// https://host/api/sk-.../mcp). RedactURL is the one way they are shown,
// and a [Scrubber] takes them out of error texts, which quote URLs in forms
// the configuration never had (net/http re-encodes the URL, replaces a
// password by "***" but keeps the user, lower-cases the scheme).
//
// The rule (RedactURL):
//   - the scheme and the host are shown, lower-cased, and so is the port: they
//     are not secret (DNS and dial errors name the host anyway);
//   - user information, user and password alike, becomes "<redacted>@";
//   - every query value is "<redacted>"; the keys are shown, sorted, each once,
//     except a key that looks like a key itself (below);
//   - a path segment is "<redacted>" if it looks like a key, or if the segment
//     before it names one: that segment, lower-cased and without "-" and "_",
//     ends in key, keys, token, tokens, secret, secrets, password, passwd,
//     auth, credential, credentials, sig or signature (/api_key/S, /token/S);
//   - a segment looks like a key when it is at least 16 characters of letters,
//     digits and - _ . ~ + = / mixing letters and digits, or at least 32 such
//     characters (sk-abcdef0123456789, a UUID, a long hex or base64 token);
//   - a fragment is "#<redacted>"; an opaque URL (scheme:rest) keeps its scheme.
//
// Over-redaction is the price of the rule: a long slug in a path is hidden
// too. What cannot be parsed is "<invalid url>".

// minSecretLen is the shortest value a [Scrubber] replaces wherever it occurs
// in a text (not only inside a URL): shorter ones would hide common words.
const minSecretLen = 8

// RedactURL returns s with its secrets replaced by "<redacted>" (see the
// rule above), or "<invalid url>" if s does not parse as an absolute URL.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return "<invalid url>"
	}
	scheme := strings.ToLower(u.Scheme)
	if u.Opaque != "" {
		return scheme + ":" + redacted
	}
	var b strings.Builder
	b.WriteString(scheme + "://")
	if u.User != nil {
		b.WriteString(redacted + "@")
	}
	b.WriteString(strings.ToLower(u.Host))
	segs := strings.Split(u.EscapedPath(), "/")
	for i, seg := range segs {
		if i > 0 {
			b.WriteByte('/')
			if secretSegment(segs[i-1], seg) {
				b.WriteString(redacted)
				continue
			}
		}
		b.WriteString(seg)
	}
	if u.RawQuery != "" || u.ForceQuery {
		keys := sortedKeys(u.Query())
		for i, k := range keys {
			if looksLikeKey(k) {
				k = redacted
			} else {
				k = url.QueryEscape(k)
			}
			keys[i] = k + "=" + redacted
		}
		slices.Sort(keys)
		b.WriteString("?" + strings.Join(slices.Compact(keys), "&"))
	}
	if u.Fragment != "" || u.RawFragment != "" {
		b.WriteString("#" + redacted)
	}
	return b.String()
}

// secretSegment reports whether path segment seg (escaped), which follows
// prev, is to be redacted.
func secretSegment(prev, seg string) bool {
	if seg == "" {
		return false
	}
	return namesSecret(unescapePath(prev)) || looksLikeKey(unescapePath(seg))
}

func unescapePath(seg string) string {
	if s, err := url.PathUnescape(seg); err == nil {
		return s
	}
	return seg
}

// namesSecret reports whether a path segment names a secret, so that the
// segment after it is one.
func namesSecret(seg string) bool {
	w := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(seg))
	for _, end := range []string{"key", "keys", "token", "tokens", "secret", "secrets", "password", "passwd",
		"auth", "credential", "credentials", "sig", "signature"} {
		if strings.HasSuffix(w, end) {
			return true
		}
	}
	return false
}

// looksLikeKey reports whether s looks like a token: 16 or more characters
// of letters, digits and - _ . ~ + = / that mix letters and digits, or 32
// or more of them.
func looksLikeKey(s string) bool {
	if len(s) < 16 {
		return false
	}
	letters, digits := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
			letters = true
		case '0' <= c && c <= '9':
			digits = true
		case strings.IndexByte("-_.~+=/", c) >= 0:
		default:
			return false
		}
	}
	return letters && digits || len(s) >= 32
}

// A [Scrubber] takes secrets out of texts that are about to reach the
// sandbox or a log: error messages of upstreams and of the proxy. It knows
// the URLs it was made for in every form net/http and url.Error quote them
// (as configured; re-encoded by url.URL.String; with the password as
// "***"; Go-quoted as %q quotes them; any case), and replaces each with
// RedactURL's form. It knows the secret values themselves (a password, a
// query value, a secret path segment, a header value) and replaces them
// wherever they occur, if they have minSecretLen bytes or more. Then every
// other absolute URL in the text (a scheme, "://", and what follows up to
// a space, a quote, < or >) is replaced by its RedactURL form: a redirect
// target, an endpoint an SSE server named.
//
// A nil *[Scrubber] does that last step only. A [Scrubber] is immutable and
// safe for concurrent use.
type Scrubber struct {
	forms []scrubForm // longest first
	// first marks the bytes a form may start with, in either case (all
	// bytes >= 0x80: case folding may change a non-ASCII first byte).
	first [256]bool
}

type scrubForm struct{ text, repl string }

// NewScrubber returns a [Scrubber] for the URLs in urls (empty ones are
// skipped) and for the secret values in secrets, such as header values
// and tokens. A value of several words ("Bearer TOKEN") also has each word
// of minSecretLen bytes or more replaced on its own.
func NewScrubber(urls []string, secrets []string) *Scrubber {
	s := &Scrubber{}
	seen := map[string]bool{}
	add := func(text, repl string) {
		if text == "" || seen[text] {
			return
		}
		seen[text] = true
		s.forms = append(s.forms, scrubForm{text, repl})
		// url.Error and %q show a text Go-quoted.
		if q := strconv.Quote(text); q[1:len(q)-1] != text {
			s.forms = append(s.forms, scrubForm{q[1 : len(q)-1], repl})
		}
	}
	addSecret := func(v string) {
		if len(v) < minSecretLen {
			return
		}
		add(v, redacted)
		if e := url.QueryEscape(v); e != v {
			add(e, redacted)
		}
		if e := url.PathEscape(v); e != v {
			add(e, redacted)
		}
	}
	for _, raw := range urls {
		if raw == "" {
			continue
		}
		repl := RedactURL(raw)
		add(raw, repl)
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		add(u.String(), repl)
		add(u.Redacted(), repl)
		if u.User != nil {
			// net/http's form: the user stays, the password is "***".
			if _, ok := u.User.Password(); ok {
				add(strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1), repl)
			}
			p, _ := u.User.Password()
			addSecret(u.User.Username())
			addSecret(p)
		}
		for _, vs := range u.Query() {
			for _, v := range vs {
				addSecret(v)
			}
		}
		segs := strings.Split(u.EscapedPath(), "/")
		for i := 1; i < len(segs); i++ {
			if secretSegment(segs[i-1], segs[i]) {
				addSecret(segs[i])
				addSecret(unescapePath(segs[i]))
			}
		}
	}
	for _, v := range secrets {
		addSecret(v)
		for _, w := range strings.Fields(v) {
			addSecret(w)
		}
	}
	slices.SortStableFunc(s.forms, func(a, b scrubForm) int { return len(b.text) - len(a.text) })
	for _, f := range s.forms {
		c := f.text[0]
		s.first[c] = true
		if isLetter(c) {
			s.first[c^0x20] = true
		}
	}
	for c := 0x80; c < 0x100; c++ {
		s.first[c] = len(s.forms) > 0
	}
	return s
}

// Scrub returns text with the secrets the [Scrubber] knows, and the secrets
// of every URL in it, redacted.
func (s *Scrubber) Scrub(text string) string { return s.scrub(text, true) }

// scrub is Scrub; with urls false it replaces the known forms only (in a
// URL RedactURL has already made safe, a secret value may remain where the
// rule keeps text: a short path segment).
func (s *Scrubber) scrub(text string, urls bool) string {
	var b strings.Builder
	last := 0 // text[last:i] is not copied yet
	for i := 0; i < len(text); {
		end := i
		if urls {
			end = urlAt(text, i)
		}
		// A known form wins over the URL found at i unless that URL goes on
		// past it: the URL scan stops at '<', which a raw query may hold.
		if f, ok := s.formAt(text, i); ok && len(f.text) >= end-i {
			b.WriteString(text[last:i])
			b.WriteString(f.repl)
			i += len(f.text)
			last = i
			continue
		}
		if end > i {
			b.WriteString(text[last:i])
			b.WriteString(s.scrub(redactFound(text[i:end]), false))
			i, last = end, end
			continue
		}
		i++
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// formAt is the longest known form that text has at i, in any case.
func (s *Scrubber) formAt(text string, i int) (scrubForm, bool) {
	if s == nil || !s.first[text[i]] {
		return scrubForm{}, false
	}
	for _, f := range s.forms {
		if len(text)-i >= len(f.text) && strings.EqualFold(text[i:i+len(f.text)], f.text) {
			return f, true
		}
	}
	return scrubForm{}, false
}

// redactFound is RedactURL of a URL found in a text, which may be
// Go-quoted, and may have been redacted before: RedactURL's own marks
// ("<redacted>", which does not parse in user information) stand in as a
// plain word while it runs, so that scrubbing twice changes nothing more.
func redactFound(s string) string {
	const stand = "__redacted__"
	s = strings.ReplaceAll(unquoteURL(s), redacted, stand)
	return strings.ReplaceAll(RedactURL(s), stand, redacted)
}

// urlAt returns the end of the absolute URL that starts at text[i], or i
// if none does: a scheme (a letter, then letters, digits, + - .) that does
// not continue a word, "://", then anything but spaces, control
// characters, '"', '<' and '>' (but "<redacted>" is taken whole), less
// the punctuation that ends it; a backslash escapes the byte after it, as
// in a Go-quoted string.
func urlAt(text string, i int) int {
	if !isLetter(text[i]) || i > 0 && isSchemeChar(text[i-1]) {
		return i
	}
	j := i + 1
	for j < len(text) && isSchemeChar(text[j]) {
		j++
	}
	if !strings.HasPrefix(text[j:], "://") {
		return i
	}
	j += len("://")
	for j < len(text) {
		if strings.HasPrefix(text[j:], redacted) {
			j += len(redacted)
			continue
		}
		c := text[j]
		if c <= ' ' || c == 0x7f || c == '"' || c == '<' || c == '>' {
			break
		}
		if c == '\\' && j+1 < len(text) {
			j++
		}
		j++
	}
	// Punctuation that ends a sentence or a bracket ends the URL too.
	for j > i && strings.IndexByte(".,;:!?)]}'", text[j-1]) >= 0 {
		j--
	}
	return j
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isSchemeChar(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

// unquoteURL undoes Go quoting (\" and \\ and the like) of a URL taken
// from a %q-formatted text.
func unquoteURL(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
		return u
	}
	return s
}

// Error returns err with its text scrubbed, or err itself if there was
// nothing to take out. The scrubbed error keeps the Kind of an *[Error] and
// still matches, with errors.Is, the errors err matched (io.EOF, a
// context's error); errors.As does not reach the unscrubbed original.
func (s *Scrubber) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := s.Scrub(msg)
	if clean == msg {
		return err
	}
	if pe, ok := err.(*Error); ok {
		return &Error{Kind: pe.Kind, Message: clean}
	}
	return &scrubbedError{msg: clean, orig: err}
}

type scrubbedError struct {
	msg  string
	orig error
}

func (e *scrubbedError) Error() string { return e.msg }

// Is lets errors.Is see the original error's chain; there is no Unwrap, so
// that errors.As cannot hand out the unscrubbed text.
func (e *scrubbedError) Is(target error) bool { return errors.Is(e.orig, target) }
