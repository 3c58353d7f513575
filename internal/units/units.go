// Package units is the one grammar of sizes and durations, for the policy
// file and the command-line flags alike, and how the bridge writes them:
// exactly, for configuration (FormatSize, FormatDuration), and roughly, for
// people (Bytes).
package units

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var (
	sizeRE = regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi|Ti|K|M|G|T)?$`)
	// sizeHintRE is a size written in another tool's grammar: 256MB, 512m, 1GiB.
	sizeHintRE = regexp.MustCompile(`^([0-9]+) ?([kKmMgGtT])(?:[iI]?[bB]|i)?$`)
	sizeUnits  = map[string]int64{"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
		"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
	numberRE = regexp.MustCompile(`^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$`)
)

// ParseSize parses a byte size: a plain number of bytes ("1048576"), or a
// whole number with a binary (Ki, Mi, Gi, Ti: powers of 1024) or decimal
// (K, M, G, T: powers of 1000) unit: "512Mi", "64Ki", "1G". It is the one
// size grammar of the policy file and of the command-line flags.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		const want = "write a whole number of bytes, or one with a unit: Ki, Mi, Gi, Ti (1024s) or K, M, G, T (1000s), e.g. 512Mi"
		if h := sizeHintRE.FindStringSubmatch(s); h != nil {
			// 256MB, 256mb, 512m, 1gib: say what it may have meant.
			u := strings.ToUpper(h[2][:1])
			return 0, fmt.Errorf("invalid size %q: write %s%si for 1024s or %s%s for 1000s (units are case-sensitive and take no B)", s, h[1], u, h[1], u)
		}
		return 0, fmt.Errorf("invalid size %q: %s", s, want)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	mult := sizeUnits[m[2]]
	if err != nil || (n > 0 && mult > math.MaxInt64/n) {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return n * mult, nil
}

// ParseDuration parses a duration of more than zero in Go's syntax: "30s",
// "5m", "1h30m", "250ms". It is the one duration grammar of the policy file
// and of the command-line flags.
func ParseDuration(s string) (time.Duration, error) {
	const want = "a duration such as 30s, 5m or 1h30m"
	if numberRE.MatchString(s) {
		return 0, fmt.Errorf("want %s, got a number %s: add a unit, e.g. %ss", want, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("invalid duration %q: want %s (units ns, us, ms, s, m, h)", s, want)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s is out of range: it must be more than 0", s)
	}
	return d, nil
}

// FormatSize writes n bytes in the largest binary unit that is exact:
// 512Mi, 64Ki, 1000 (no unit fits).
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// FormatDuration writes d as Go does, without the zero units Go adds
// ("5m", "1h30m", not "5m0s", "1h30m0s"), and under two minutes in
// seconds ("60s", "90s", "1.5s"; below a second as Go does: "500ms").
// time.ParseDuration reads it back exactly.
func FormatDuration(d time.Duration) string {
	if d <= 0 || d < time.Second {
		return d.String()
	}
	if d < 2*time.Minute {
		sec, frac := d/time.Second, d%time.Second
		if frac == 0 {
			return strconv.FormatInt(int64(sec), 10) + "s"
		}
		return strconv.FormatInt(int64(sec), 10) + "." + strings.TrimRight(fmt.Sprintf("%09d", int64(frac)), "0") + "s"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Bytes writes n bytes for people: "512 MiB", "1.5 MiB", "64 KiB", "12 bytes".
func Bytes(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult {
			if n%u.mult == 0 {
				return fmt.Sprintf("%d %s", n/u.mult, u.name)
			}
			return fmt.Sprintf("%.1f %s", float64(n)/float64(u.mult), u.name)
		}
	}
	if n == 1 {
		return "1 byte"
	}
	return fmt.Sprintf("%d bytes", n)
}
