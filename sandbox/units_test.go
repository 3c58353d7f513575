package sandbox

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "1048576": 1 << 20, "512Mi": 512 << 20, "64MiB": 64 << 20, "1Gi": 1 << 30,
		"2k": 2000, "1G": 1e9, " 8Ki ": 8 << 10, "3B": 3,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "Mi", "-1Mi", "1.5Gi", "12XB", "9999999999999Ti", "abc"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded, want an error", in)
		}
	}
}
