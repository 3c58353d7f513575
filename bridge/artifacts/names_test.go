package artifacts

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkSafeName fails unless name is one safe path component: what
// SanitiseName promises.
func checkSafeName(t *testing.T, in, name string) {
	t.Helper()
	bad := func(why string) { t.Errorf("SanitiseName(%q) = %q: %s", in, name, why) }
	switch {
	case name == "" || name == "." || name == "..":
		bad("empty, . or ..")
	case len(name) > MaxNameBytes:
		bad("too long")
	case !utf8.ValidString(name):
		bad("not UTF-8")
	case strings.ContainsAny(name, "/\\\x00"):
		bad("a separator or NUL")
	case name[0] == '.' || name[0] == '-' || name[0] == '~':
		bad("hidden, or reads as an option")
	case filepath.Base(name) != name || filepath.Clean(name) != name:
		bad("not one clean path component")
	case !filepath.IsLocal(name):
		bad("not local")
	}
	for _, r := range name {
		if unsafeRune(r) {
			bad("an unsafe rune")
		}
	}
	dir := "/srv/run-x"
	if p := filepath.Join(dir, name); filepath.Dir(p) != dir {
		bad("escapes its folder")
	}
	if again, err := SanitiseName(name); err != nil || again != name {
		t.Errorf("SanitiseName(%q) = %q, %v: SanitiseName(SanitiseName(x)) must be SanitiseName(x)", name, again, err)
	}
}

func TestSanitiseName(t *testing.T) {
	long := strings.Repeat("a", 4096)
	tests := []struct{ in, want string }{
		{"a.png", "a.png"},
		{"plots/a.png", "plots_a.png"},
		{"deep/er/still/x.csv", "deep_er_still_x.csv"},
		{"../../etc/passwd", "etc_passwd"},
		{"/etc/passwd", "etc_passwd"},
		{"a/./b", "a_b"},
		{"a//b", "a_b"},
		{"..\\..\\windows\\system32", "windows_system32"},
		{".hidden", "_hidden"},
		{".config/x", "_config_x"},
		{"a/.b", "a_.b"},
		{"-rf", "_rf"},
		{"~root", "_root"},
		{"...", "_.."},
		{"a\x00b", "a_b"},
		{"a\nb\tc\rd", "a_b_c_d"},
		{"e\x1b[31mred", "e_[31mred"},
		{"\x7fdel\u0085", "_del_"},
		{"evil\u202egnp.exe", "evil_gnp.exe"},
		{"bom\ufeff", "bom_"},
		{"bad\xffutf8", "bad_utf8"},
		{"résumé ✓.txt", "résumé ✓.txt"},
		{"a (2).csv", "a (2).csv"},
		{"file name with spaces", "file name with spaces"},
		{long + ".png", strings.Repeat("a", MaxNameBytes-4) + ".png"},
		{long, strings.Repeat("a", MaxNameBytes)},
		{strings.Repeat("é", 300) + ".csv", strings.Repeat("é", 125) + ".csv"}, // 250 bytes of é (2 each), cut at a rune
		{"x." + long, "x." + strings.Repeat("a", MaxNameBytes-2)},              // an overlong extension is not kept
		{strings.Repeat("../", 1000) + "x", "x"},
	}
	for _, tt := range tests {
		got, err := SanitiseName(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("SanitiseName(%.40q) = %.60q, %v; want %.60q", tt.in, got, err, tt.want)
			continue
		}
		checkSafeName(t, tt.in, got)
	}
	for _, in := range []string{"", ".", "..", "/", "//", "./..", "../..", "\\", strings.Repeat("../", 2000)} {
		if got, err := SanitiseName(in); err == nil {
			t.Errorf("SanitiseName(%.40q) = %q, want an error", in, got)
		}
	}
}

func TestWithSuffix(t *testing.T) {
	long := strings.Repeat("b", MaxNameBytes-4) + ".csv"
	for in, want := range map[string]string{
		"a.csv":    "a (2).csv",
		"noext":    "noext (2)",
		"a.tar.gz": "a.tar (2).gz",
		long:       strings.Repeat("b", MaxNameBytes-8) + " (2).csv",
	} {
		got := withSuffix(in, 2)
		if got != want {
			t.Errorf("withSuffix(%q) = %q, want %q", in, got, want)
		}
		checkSafeName(t, in, got)
	}
}

func TestDisplayName(t *testing.T) {
	tests := map[string]string{
		"plots/a.png":   "plots/a.png",
		"a\nb":          `a\x0ab`,
		"\x1b[2J":       `\x1b[2J`,
		"bad\xff":       `bad\xff`,
		"evil\u202eexe": `evil\u202eexe`,
		"c1\u0085":      `c1\u0085`,
		"✓ ok":          "✓ ok",
	}
	for in, want := range tests {
		if got := DisplayName(in); got != want {
			t.Errorf("DisplayName(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("x", 100) + strings.Repeat("\x00", 4096) + "end.png"
	got := DisplayName(long)
	if len(got) > 1024 || !strings.HasPrefix(got, strings.Repeat("x", 100)) || !strings.HasSuffix(got, "end.png") || !strings.Contains(got, "…") {
		t.Errorf("DisplayName of a 4 KiB name = %q (%d bytes)", got, len(got))
	}
	if !utf8.ValidString(DisplayName(strings.Repeat("é", 2000))) {
		t.Error("DisplayName cut inside a rune")
	}
}

func TestURI(t *testing.T) {
	for _, tt := range []struct{ run, name, uri string }{
		{"abc123", "a.png", "bridge://runs/abc123/a.png"},
		{"r1", "plots_a (2).csv", "bridge://runs/r1/plots_a%20%282%29.csv"},
		{"r1", "résumé.txt", "bridge://runs/r1/r%C3%A9sum%C3%A9.txt"},
		{"r1", "a?b#c%d", "bridge://runs/r1/a%3Fb%23c%25d"},
	} {
		uri := URI(tt.run, tt.name)
		if uri != tt.uri {
			t.Errorf("URI(%q, %q) = %q, want %q", tt.run, tt.name, uri, tt.uri)
		}
		run, name, err := ParseURI(uri)
		if err != nil || run != tt.run || name != tt.name {
			t.Errorf("ParseURI(%q) = %q, %q, %v", uri, run, name, err)
		}
	}
	for _, uri := range []string{
		"", "bridge://runs/", "bridge://runs/r1", "bridge://runs/r1/", "http://runs/r1/a.png", "bridge://run/r1/a.png",
		"bridge://runs/R1/a.png", "bridge://runs/r-1/a.png", "bridge://runs/" + strings.Repeat("a", 33) + "/x",
		"bridge://runs/r1/..", "bridge://runs/r1/.", "bridge://runs/r1/%2e%2e", "bridge://runs/r1/../x",
		"bridge://runs/r1/a/b", "bridge://runs/r1/a%2Fb", "bridge://runs/r1/..%2F..%2Fetc%2Fpasswd",
		"bridge://runs/r1/.hidden", "bridge://runs/r1/a%00b", "bridge://runs/r1/a%zz", "bridge://runs/r1/a.png?x=1",
		"bridge://runs/r1/a.png#f", "bridge://runs/r1/%61.png", "bridge://runs/r1/a b", "BRIDGE://runs/r1/a",
		"bridge://runs/r1/" + strings.Repeat("a", 256),
	} {
		if run, name, err := ParseURI(uri); err == nil {
			t.Errorf("ParseURI(%.60q) = %q, %q; want an error", uri, run, name)
		} else if !strings.Contains(err.Error(), "bridge://runs/RUN/FILE") {
			t.Errorf("ParseURI(%.60q): %v: the error should say what a URI looks like", uri, err)
		}
	}
}

func FuzzSanitiseName(f *testing.F) {
	for _, s := range []string{"a.png", "plots/a.png", "../../etc/passwd", ".hidden", "a\x00b", "\xff", "..", "/", "a (2).csv",
		strings.Repeat("a", 300) + ".csv", "\u202e", "-x", "~", "é/é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		name, err := SanitiseName(in)
		if err != nil {
			if name != "" {
				t.Errorf("SanitiseName(%q) = %q with an error", in, name)
			}
			return
		}
		checkSafeName(t, in, name)
		for _, n := range []int{2, 999} {
			checkSafeName(t, in, withSuffix(name, n))
		}
	})
}

func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"bridge://runs/r1/a.png", "bridge://runs/r1/plots_a%20%282%29.csv", "bridge://runs/r1/%2e%2e",
		"bridge://runs/r1/a%2Fb", "bridge://runs/abc/..", "bridge://runs//x", "bridge://runs/r1/%C3%A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		run, name, err := ParseURI(uri)
		if err != nil {
			return
		}
		if !validRunID(run) {
			t.Errorf("ParseURI(%q): run %q", uri, run)
		}
		checkSafeName(t, uri, name)
		if URI(run, name) != uri {
			t.Errorf("ParseURI(%q) = %q, %q: URI gives %q", uri, run, name, URI(run, name))
		}
	})
}
