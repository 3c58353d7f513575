package sandbox

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte size written as a plain number of bytes or with a
// binary (Ki, Mi, Gi) or decimal (k, M, G) suffix, optionally followed by B:
// "512Mi", "64MiB", "1G", "1048576".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "B")
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || (n > 0 && mult > (1<<62)/n) {
		return 0, fmt.Errorf("invalid size %q: write a number of bytes, or use a unit such as 512Mi or 1Gi", s)
	}
	return n * mult, nil
}
