// Package suggest finds the name a mistyped one was meant to be: the
// "did you mean" of policy keys, flags, servers-file keys and tool names.
package suggest

import (
	"math"
	"strings"
)

// MaxRunes bounds the names Distance compares rune by rune: its cost is
// the product of the lengths.
const MaxRunes = 64

// Distance is the optimal string alignment distance of a and b: the
// Levenshtein distance where swapping two adjacent runes also costs 1.
// Past MaxRunes runes it is the longer length, a cheap upper bound.
func Distance(a, b []rune) int {
	if len(a) > MaxRunes || len(b) > MaxRunes {
		return max(len(a), len(b))
	}
	if len(a) == 0 {
		return len(b)
	}
	if len(b) == 0 {
		return len(a)
	}
	prev2 := make([]int, len(b)+1) // row i-2
	prev := make([]int, len(b)+1)  // row i-1
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d = min(d, prev2[j-2]+1)
			}
			cur[j] = d
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// Key is the name in known that key is most likely a typo of, or "": the
// same name but for case, '_', '-' and spaces, else the nearest within a
// few edits (1 + a quarter of its length, at most 3, and fewer than key's
// own length).
func Key(key string, known []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
	}
	lkey := []rune(strings.ToLower(key))
	best, bestD := "", math.MaxInt
	for _, k := range known {
		if norm(k) == norm(key) {
			return k
		}
		if d := Distance(lkey, []rune(strings.ToLower(k))); d < bestD {
			best, bestD = k, d
		}
	}
	limit := min(3, 1+len([]rune(best))/4)
	if bestD <= limit && bestD < len(lkey) {
		return best
	}
	return ""
}
