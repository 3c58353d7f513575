package doctor

import (
	"bytes"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

func TestLimitReadBack(t *testing.T) {
	tests := []struct {
		name string
		got  *string
		want int64
		ok   bool
	}{
		{"equal", ptr("134217728"), 128 << 20, true},
		{"with newline", ptr("64\n"), 64, true},
		{"unlimited v1", ptr("9223372036854771712"), 128 << 20, false},
		{"unlimited v2", ptr("max"), 64, false},
		{"missing file", nil, 64, false},
	}
	for _, tt := range tests {
		if got := limitHolds(tt.got, tt.want); got != tt.ok {
			t.Errorf("%s: limitHolds = %v, want %v", tt.name, got, tt.ok)
		}
	}
	cpu := []struct {
		got  *string
		cpus float64
		ok   bool
	}{
		{ptr("50000 100000"), 0.5, true},
		{ptr("max 100000"), 0.5, false},
		{ptr("-1 100000"), 0.5, false},
		{ptr("100000 100000"), 0.5, false},
		{ptr("150000 100000"), 1.5, true},
		{nil, 1, false},
		{ptr("50000"), 0.5, false},
	}
	for _, tt := range cpu {
		if got := cpuHolds(tt.got, tt.cpus); got != tt.ok {
			t.Errorf("cpuHolds(%v, %g) = %v, want %v", deref(tt.got), tt.cpus, got, tt.ok)
		}
	}
}

func TestWriteText(t *testing.T) {
	rep := Report{Engines: []EngineReport{
		{Engine: "podman", Socket: "unix:///run/podman/podman.sock", Source: "rootful Podman socket", Usable: true,
			Checks: []Check{{Name: "reachable", OK: true, Detail: "podman 4.3.1"}}},
		{Engine: "docker", Socket: "unix:///var/run/docker.sock", Source: "default Docker socket",
			Checks: []Check{{Name: "reachable", OK: false, Detail: "no socket", Hint: "start Docker"}}},
	}, OK: true}
	var b bytes.Buffer
	WriteText(&b, rep)
	out := b.String()
	for _, want := range []string{
		"podman at unix:///run/podman/podman.sock (rootful Podman socket): usable",
		"docker at unix:///var/run/docker.sock (default Docker socket): NOT usable",
		"FAIL reachable",
		"fix: start Docker",
		"bridge can run code safely.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	rep.OK = false
	b.Reset()
	WriteText(&b, rep)
	if !strings.Contains(b.String(), "No engine can run code safely") {
		t.Errorf("a failed report does not say so:\n%s", b.String())
	}
}
