package tokenize

import "strings"

// The built-in finders: hand-written scanners, each one pass over the text
// (a few bytes of look-around per position), so linear in its length. Each
// appends its matches to dst in order, without overlaps. Builtin's doc
// comment says what they find.

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isUpper(c byte) bool  { return 'A' <= c && c <= 'Z' }
func isLetter(c byte) bool { return isUpper(c) || 'a' <= c && c <= 'z' }
func isAlnum(c byte) bool  { return isDigit(c) || isLetter(c) }

// digitsAt reports whether s[i:i+n] is n digits.
func digitsAt(s string, i, n int) bool {
	if i < 0 || i+n > len(s) {
		return false
	}
	for _, c := range []byte(s[i : i+n]) {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// digitRun is the length of the run of digits at s[i:].
func digitRun(s string, i int) int {
	j := i
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	return j - i
}

func isLocal(c byte) bool {
	return isAlnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-'
}

func isLabel(c byte) bool { return isAlnum(c) || c == '-' }

// findEmails finds e-mail addresses: at each "@", the local part backwards
// and the domain forwards. Each byte is looked at a bounded number of times:
// the local part stops at the previous "@" or match, the domain at the next
// "@".
func findEmails(dst []span, s string) []span {
	lo := 0 // end of the last match
	for i := 0; ; {
		k := strings.IndexByte(s[i:], '@')
		if k < 0 {
			return dst
		}
		at := i + k
		i = at + 1
		start := at
		for start > lo && isLocal(s[start-1]) && (s[start-1] != '.' || s[start] != '.') {
			start--
		}
		for start < at && s[start] == '.' {
			start++
		}
		if start == at || at-start > 64 || s[at-1] == '.' {
			continue
		}
		end, labels := -1, 0
		for j := at + 1; ; j++ {
			ls := j
			for j < len(s) && isLabel(s[j]) {
				j++
			}
			if j == ls || j-ls > 63 || j-at-1 > 253 || s[ls] == '-' || s[j-1] == '-' {
				break
			}
			if labels++; labels >= 2 && isTLD(s[ls:j]) {
				end = j
			}
			if j+1 >= len(s) || s[j] != '.' || !isLabel(s[j+1]) {
				break
			}
		}
		if end < 0 {
			continue
		}
		dst = append(dst, span{start, end})
		lo, i = end, end
	}
}

// isTLD reports whether label can be a top-level domain: two or more
// letters.
func isTLD(label string) bool {
	if len(label) < 2 {
		return false
	}
	for _, c := range []byte(label) {
		if !isLetter(c) {
			return false
		}
	}
	return true
}

// findPhones finds phone numbers: international ones at a "+", the
// North-American forms at a "(" or at the start of a run of digits.
func findPhones(dst []span, s string) []span {
	for i := 0; i < len(s); {
		end := -1
		switch c := s[i]; {
		case c == '+':
			end = intlPhoneEnd(s, i)
		case c == '(':
			end = parenPhoneEnd(s, i)
		case isDigit(c): // i starts a run of digits
			if end = dashedPhoneEnd(s, i); end < 0 {
				i += digitRun(s, i)
				continue
			}
		}
		if end > i {
			dst = append(dst, span{i, end})
			i = end
			continue
		}
		i++
	}
	return dst
}

func isPhoneSep(c byte) bool { return c == ' ' || c == '.' || c == '-' }

// intlPhoneEnd returns the end of the international phone number at s[i]
// == '+', or -1. Digit groups follow each other with one separator, or
// none next to a parenthesised group; the number may end only outside
// parentheses.
func intlPhoneEnd(s string, i int) int {
	if i > 0 && isAlnum(s[i-1]) || i+1 >= len(s) || !isDigit(s[i+1]) {
		return -1
	}
	digits, dots := 0, 0
	end, endDigits, endDots := -1, 0, 0
	paren := false
	for j := i + 1; ; {
		n := digitRun(s, j)
		j += n
		if digits += n; digits > 15 {
			break
		}
		if !paren {
			end, endDigits, endDots = j, digits, dots
		}
		k := j
		if paren {
			if k >= len(s) || s[k] != ')' {
				break
			}
			k++
			paren = false
			if k < len(s) && isPhoneSep(s[k]) {
				dots += boolInt(s[k] == '.')
				k++
			}
		} else {
			if k < len(s) && isPhoneSep(s[k]) {
				dots += boolInt(s[k] == '.')
				k++
			}
			if k < len(s) && s[k] == '(' {
				k++
				paren = true
			}
		}
		if k == j || k >= len(s) || !isDigit(s[k]) {
			break
		}
		j = k
	}
	if end < 0 || endDigits < 8 || endDots == 1 || end < len(s) && isAlnum(s[end]) {
		return -1
	}
	return end
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nanpBefore reports whether c may come just before a North-American
// number.
func nanpBefore(c byte) bool {
	switch c {
	case '_', '-', '.', '+', '/':
		return false
	}
	return !isAlnum(c)
}

// nanpEnds checks what follows a North-American number ending at end, and
// returns end, or -1: not a letter, digit or "_", and not more hyphen- or
// dot-joined digits.
func nanpEnds(s string, end int) int {
	if end < len(s) {
		c := s[end]
		if isAlnum(c) || c == '_' || (c == '-' || c == '.') && end+1 < len(s) && isDigit(s[end+1]) {
			return -1
		}
	}
	return end
}

// parenPhoneEnd returns the end of "(555) 123-4567" (or "(555)123-4567",
// with the last separator "-", "." or " ") at s[i] == '(', or -1.
func parenPhoneEnd(s string, i int) int {
	if i > 0 && (isAlnum(s[i-1]) || s[i-1] == '_') || !digitsAt(s, i+1, 3) || i+4 >= len(s) || s[i+4] != ')' {
		return -1
	}
	j := i + 5
	if j < len(s) && s[j] == ' ' {
		j++
	}
	if !digitsAt(s, j, 3) || j+3 >= len(s) || !isPhoneSep(s[j+3]) || !digitsAt(s, j+4, 4) {
		return -1
	}
	return nanpEnds(s, j+8)
}

// dashedPhoneEnd returns the end of "555-123-4567" or "555.123.4567" (or
// those after "1-" or "1.") at the start s[i] of a run of digits, or -1.
func dashedPhoneEnd(s string, i int) int {
	end := dashed(s, i)
	if end < 0 && s[i] == '1' && i+1 < len(s) && (s[i+1] == '-' || s[i+1] == '.') {
		if end = dashed(s, i+2); end > 0 && s[i+5] != s[i+1] {
			end = -1
		}
	}
	if end < 0 || i > 0 && !nanpBefore(s[i-1]) {
		return -1
	}
	return nanpEnds(s, end)
}

// dashed returns the end of ddd-ddd-dddd or ddd.ddd.dddd at s[j], or -1.
func dashed(s string, j int) int {
	if j+12 > len(s) {
		return -1
	}
	sep := s[j+3]
	if sep != '-' && sep != '.' || s[j+7] != sep || !digitsAt(s, j, 3) || !digitsAt(s, j+4, 3) || !digitsAt(s, j+8, 4) {
		return -1
	}
	return j + 12
}

// findCards finds card numbers, trying each run of digits in turn as a
// number's start.
func findCards(dst []span, s string) []span {
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		if end := cardEnd(s, i); end > 0 {
			dst = append(dst, span{i, end})
			i = end
			continue
		}
		i += digitRun(s, i)
	}
	return dst
}

// cardEnd returns the end of the card number starting with the run of
// digits at s[i], or -1: the run alone if it has 13–19 digits, else a run
// of four and the following groups, trying the longest first.
func cardEnd(s string, i int) int {
	if i > 0 && isLetter(s[i-1]) || s[i] < '2' || s[i] > '6' {
		return -1
	}
	n := digitRun(s, i)
	if n >= 13 && n <= 19 {
		if (i+n == len(s) || !isLetter(s[i+n])) && luhn(s[i:i+n]) {
			return i + n
		}
		return -1
	}
	if n != 4 {
		return -1
	}
	var ends [6]int // ends of the windows of 2, 3, ... groups
	count, digits := 0, 4
	for j := i + 4; count < len(ends) && j+1 < len(s) && (s[j] == ' ' || s[j] == '-') && isDigit(s[j+1]); {
		g := digitRun(s, j+1)
		if g < 3 || g > 6 || digits+g > 19 {
			break
		}
		digits += g
		j += 1 + g
		if digits >= 13 && (j == len(s) || !isLetter(s[j])) {
			ends[count] = j
		} else {
			ends[count] = -1
		}
		count++
	}
	for c := count - 1; c >= 0; c-- {
		if ends[c] > 0 && luhn(s[i:ends[c]]) {
			return ends[c]
		}
	}
	return -1
}

// luhn reports whether the digits of s (other bytes are skipped) have a
// valid Luhn check digit.
func luhn(s string) bool {
	sum, double := 0, false
	for k := len(s) - 1; k >= 0; k-- {
		c := s[k]
		if !isDigit(c) {
			continue
		}
		d := int(c - '0')
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

func isIBANChar(c byte) bool { return isUpper(c) || isDigit(c) }

// findIBANs finds IBANs at each two capitals and two digits that do not
// follow a letter or digit.
func findIBANs(dst []span, s string) []span {
	for i := 0; i+15 <= len(s); {
		if isUpper(s[i]) && isUpper(s[i+1]) && isDigit(s[i+2]) && isDigit(s[i+3]) && (i == 0 || !isAlnum(s[i-1])) {
			if end := ibanEnd(s, i); end > 0 {
				dst = append(dst, span{i, end})
				i = end
				continue
			}
		}
		i++
	}
	return dst
}

// ibanEnd returns the end of the IBAN at s[i:], which starts with two
// capitals and two digits, or -1: written together, or in groups of four,
// the longest valid grouping first.
func ibanEnd(s string, i int) int {
	if check := int(s[i+2]-'0')*10 + int(s[i+3]-'0'); check < 2 || check > 98 {
		return -1
	}
	j := i
	for j < len(s) && isIBANChar(s[j]) {
		j++
	}
	if n := j - i; n >= 15 {
		if n <= 34 && (j == len(s) || !isLetter(s[j])) && ibanSum(ibanFold(0, s[i+4:j]), s[i:i+4]) {
			return j
		}
		return -1
	} else if n != 4 {
		return -1
	}
	// Groups: the checksum of the text after the first group, folded in
	// group by group, completed for each window end with the first group.
	end, chars, r := -1, 4, 0
	for j+1 < len(s) && s[j] == ' ' && isIBANChar(s[j+1]) {
		g := 0
		for j+1+g < len(s) && isIBANChar(s[j+1+g]) {
			g++
		}
		if g > 4 || chars+g > 34 || j+1+g < len(s) && isLetter(s[j+1+g]) {
			break
		}
		chars += g
		r = ibanFold(r, s[j+1:j+1+g])
		j += 1 + g
		if chars >= 15 && ibanSum(r, s[i:i+4]) {
			end = j
		}
		if g < 4 {
			break
		}
	}
	return end
}

// ibanFold returns r, a remainder modulo 97, with the characters of s
// appended: digits as themselves, letters as 10–35.
func ibanFold(r int, s string) int {
	for _, c := range []byte(s) {
		if isDigit(c) {
			r = (r*10 + int(c-'0')) % 97
		} else {
			r = (r*100 + int(c-'A') + 10) % 97
		}
	}
	return r
}

// ibanSum reports whether the ISO 13616 checksum holds for an IBAN whose
// text after the first four characters folds to r: the number made by
// moving those four to the end is 1 modulo 97.
func ibanSum(r int, first4 string) bool { return ibanFold(r, first4) == 1 }
