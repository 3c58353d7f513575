package tokenize

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// Kind is one kind of value to find: a name, whose upper case is the
// placeholder prefix ("email" gives <EMAIL_1>), and how to find values of
// it. The zero [Kind] finds nothing.
type Kind struct {
	name   string
	prefix string
	rank   int                               // precedence of a built-in kind (1 first); 0 for an operator pattern
	find   func(dst []span, s string) []span // a built-in kind's finder
	re     *regexp.Regexp                    // an operator pattern
}

// Name is the kind's name, e.g. "email" or "customer_id".
func (k Kind) Name() string { return k.name }

// The built-in kinds' precedence: when two kinds would find overlapping
// text, the one earlier here wins.
const (
	rankEmail = 1 + iota
	rankIBAN
	rankCard
	rankPhone
	lastRank = rankPhone
)

// Builtins are the names of the built-in kinds: "email", "phone", "iban",
// "card".
func Builtins() []string { return []string{"email", "phone", "iban", "card"} }

// Builtin returns the built-in kind of that name. What each finds, exactly
// (all of them ASCII only, and none across JSON strings):
//
//   - email: local@domain. The local part is the run of letters, digits and ".
//     _ % + -" before the "@" (back to a doubled dot, leading dots left out;
//     none if it ends with a dot or is longer than 64); the domain is two or
//     more dot-separated labels of letters, digits and inner hyphens (each at
//     most 63, together at most 253 bytes), up to the last label that is two or
//     more letters (so "ann@example.com." and "ann@example.com/x" give
//     "ann@example.com", "ann@example.com1" none). Upper and lower case alike.
//     Misses quoted local parts, other RFC 5322 local-part characters (' / = ?
//     ! # and the like: "o'brien@x.org" gives "brien@x.org"), IP-literal and
//     single-label domains, and non-ASCII (internationalised) addresses.
//   - phone: either a "+" and 8–15 digits in groups separated by one space,
//     dot or hyphen, a group possibly in parentheses ("+1 (555) 123-4567",
//     "+44 (0)20 7946 0958", "+33.1.23.45.67.89", "+41 44 668 18 00",
//     "+4915112345678"), not after a letter or digit nor before one; or a
//     North-American number "(555) 123-4567" (also "(555)123-4567", and "."
//     or " " for the "-"), "555-123-4567" or "555.123.4567" (also after "1-"
//     or "1." alike), not after a letter, digit, "_", "-", ".", "+" or "/",
//     not before a letter, digit or "_", nor before "-" or "." and a digit.
//     So no dates (2024-01-15), times, plain digit runs, amounts or dashed
//     order numbers (ORD-555-123-4567, 123-456-7890-12). Misses numbers
//     without "+" in other national formats, digit runs without separators
//     ("5551234567"), "555 123 4567", and extensions ("x123" after a number
//     makes it none). A "+" with 8–15 digits is taken for a phone number even
//     when it is a signed count ("+12345678"), but not with a single dot
//     ("+1234.5678" is a decimal). With more than 15 digits the number is cut
//     back to the last group that keeps it at 15 or fewer, or is none.
//   - iban: two capital letters, two check digits (02–98) and 11–30
//     capital letters or digits, either written together or in groups of
//     four separated by single spaces (the last group 1–4), with a valid
//     ISO 13616 mod-97 checksum; not next to a letter or digit. The country
//     code and the country's length are not checked, so about 1 in 97
//     upper-case codes of that shape pass. Misses lower-case IBANs and other
//     groupings.
//   - card: 13–19 digits starting with 2–6 (the major networks: Visa,
//     Mastercard, Amex, Discover, Diners, JCB, UnionPay, Maestro), with a
//     valid Luhn check digit: either written together, or as a group of four
//     followed by groups of 3–6 digits, each separator one space or hyphen
//     ("4111 1111 1111 1111", "3782 822463 10005"); not next to a letter,
//     and not part of a longer run of digits.
//     Of several groupings the longest valid one wins. Misses numbers
//     starting with 0, 1, 7, 8 or 9 and other groupings (such as a last
//     group of one or two digits); about 1 in 10 digit runs of that shape
//     pass the Luhn check.
func Builtin(name string) (Kind, bool) {
	switch name {
	case "email":
		return Kind{name: name, prefix: "EMAIL", rank: rankEmail, find: findEmails}, true
	case "iban":
		return Kind{name: name, prefix: "IBAN", rank: rankIBAN, find: findIBANs}, true
	case "card":
		return Kind{name: name, prefix: "CARD", rank: rankCard, find: findCards}, true
	case "phone":
		return Kind{name: name, prefix: "PHONE", rank: rankPhone, find: findPhones}, true
	}
	return Kind{}, false
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Pattern makes an operator kind from a name ([a-z][a-z0-9_]*, placeholder
// prefix is its upper case) and an RE2 regexp (Go syntax). It is an error if
// the regexp does not compile, is empty, or can match the empty string. The
// regexp finds leftmost-longest matches, within each JSON string on its own:
// ^ and $ are the string's ends (or, where vault placeholders cut the
// string, the ends of the text between them). A kind named like a built-in
// shares its numbering.
func Pattern(name, expr string) (Kind, error) {
	if !nameRE.MatchString(name) {
		return Kind{}, fmt.Errorf("tokenize: kind name %q: want a lower-case letter, then lower-case letters, digits and underscores", name)
	}
	if expr == "" {
		return Kind{}, fmt.Errorf("tokenize: kind %s: empty pattern", name)
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return Kind{}, fmt.Errorf("tokenize: kind %s: %w", name, err)
	}
	tree, err := syntax.Parse(expr, syntax.Perl)
	if err != nil { // regexp.Compile accepted it with these very flags
		return Kind{}, fmt.Errorf("tokenize: kind %s: %w", name, err)
	}
	if nullable(tree.Simplify()) {
		return Kind{}, fmt.Errorf("tokenize: kind %s: pattern can match the empty string", name)
	}
	re.Longest()
	return Kind{name: name, prefix: strings.ToUpper(name), re: re}, nil
}

// nullable reports whether re can match an empty string somewhere. Zero-width
// assertions (^, $, \b, \B, \A, \z) count as matching empty.
func nullable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpNoMatch, syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return false
	case syntax.OpLiteral:
		return len(re.Rune) == 0
	case syntax.OpCapture, syntax.OpPlus:
		return nullable(re.Sub[0])
	case syntax.OpStar, syntax.OpQuest:
		return true
	case syntax.OpRepeat:
		return re.Min == 0 || nullable(re.Sub[0])
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			if !nullable(sub) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			if nullable(sub) {
				return true
			}
		}
		return false
	}
	return true // OpEmptyMatch and the zero-width assertions
}

// ordered returns the kinds to run, in precedence order: the built-in kinds
// first (email, iban, card, phone, each once), then the operator patterns in
// the order given. Zero Kinds are left out.
func ordered(kinds []Kind) []Kind {
	var out []Kind
	for r := 1; r <= lastRank; r++ {
		for _, k := range kinds {
			if k.rank == r && k.find != nil {
				out = append(out, k)
				break
			}
		}
	}
	for _, k := range kinds {
		if k.rank == 0 && k.re != nil {
			out = append(out, k)
		}
	}
	return out
}

// span is a byte range [start, end) of a string.
type span struct{ start, end int }

// appendMatches appends to dst the kind's matches in s, in order and not
// overlapping.
func (k *Kind) appendMatches(dst []span, s string) []span {
	if k.find != nil {
		return k.find(dst, s)
	}
	for _, m := range k.re.FindAllStringIndex(s, -1) {
		if m[1] > m[0] {
			dst = append(dst, span{m[0], m[1]})
		}
	}
	return dst
}
