package units

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "1": 1, "1048576": 1 << 20, "512Mi": 512 << 20, "64Ki": 64 << 10, "2Gi": 2 << 30, "1Ti": 1 << 40,
		"1K": 1000, "16M": 16e6, "1G": 1e9, "3T": 3e12, "8388607Ti": 8388607 << 40, "9223372036854775807": 1<<63 - 1,
	}
	for s, want := range good {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", " 1Mi", "1Mi ", "1 Mi", "1.5Gi", "1MiB", "1mi", "1k", "1KB", "-1", "+1", "Mi", "1e6", "0x10", "8388608Ti", "9223372036854775808", "1Pi"} {
		if got, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0", 1: "1", 1000: "1000", 1024: "1Ki", 1536: "1536", 3072: "3Ki", 1 << 20: "1Mi", 512 << 20: "512Mi",
		1<<20 + 1: "1048577", 3 << 30: "3Gi", 1 << 40: "1Ti", 1e9: "1000000000", 1<<63 - 1: "9223372036854775807",
	} {
		got := FormatSize(n)
		if got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(got); err != nil || back != n {
			t.Errorf("ParseSize(%q) = %d, %v", got, back, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Nanosecond:                              "1ns",
		1500 * time.Nanosecond:                       "1.5µs",
		500 * time.Millisecond:                       "500ms",
		time.Second:                                  "1s",
		1500 * time.Millisecond:                      "1.5s",
		30 * time.Second:                             "30s",
		60 * time.Second:                             "60s",
		90 * time.Second:                             "90s",
		60*time.Second + time.Nanosecond:             "60.000000001s",
		119*time.Second + 250*time.Millisecond:       "119.25s",
		2 * time.Minute:                              "2m",
		5 * time.Minute:                              "5m",
		150 * time.Second:                            "2m30s",
		time.Hour:                                    "1h",
		90 * time.Minute:                             "1h30m",
		time.Hour + 30*time.Second:                   "1h0m30s",
		2*time.Minute + 500*time.Millisecond:         "2m0.5s",
		time.Duration(math.MaxInt64):                 "2562047h47m16.854775807s",
		25*time.Hour + time.Minute + time.Nanosecond: "25h1m0.000000001s",
	} {
		got := FormatDuration(d)
		if got != want {
			t.Errorf("FormatDuration(%d) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back, err, d)
		}
	}
}

func TestParseSizeSaysWhatToWrite(t *testing.T) {
	for in, want := range map[string]string{
		"256MB": "write 256Mi for 1024s or 256M for 1000s", "512m": "write 512Mi for 1024s or 512M for 1000s",
		"1GiB": "write 1Gi for 1024s or 1G for 1000s", "lots": "write a whole number of bytes",
	} {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSize(%q): %v, want %q", in, err, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "1h30m": 90 * time.Minute, "250ms": 250 * time.Millisecond} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v", in, got, err)
		}
	}
	for in, want := range map[string]string{
		"10": "got a number 10: add a unit, e.g. 10s", "1.5": "add a unit, e.g. 1.5s", "0s": "it must be more than 0",
		"-5s": "it must be more than 0", "+5s": "invalid duration", "5x": "invalid duration", "": "invalid duration",
	} {
		if _, err := ParseDuration(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q): %v, want %q", in, err, want)
		}
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1: "1 byte", 1023: "1023 bytes", 1024: "1 KiB", 1536: "1.5 KiB",
		512 << 20: "512 MiB", 3<<20 + 1<<19: "3.5 MiB", 2 << 30: "2 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
