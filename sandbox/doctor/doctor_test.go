package doctor

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
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

// Every failed limit check says what to do, also when the engine claims
// the limit (so gives no reason) but the cgroup contradicts it.
func TestLimitChecksHints(t *testing.T) {
	want := smokeLimits()
	held := cgroupLimits{Memory: ptr("134217728"), Pids: ptr("64"), CPU: ptr("50000 100000")}
	dropped := cgroupLimits{Memory: ptr("max"), Pids: nil, CPU: ptr("max 100000")}
	const reason = "rootless Podman on cgroup v1 ignores memory, pids and CPU limits: run Podman rootful"
	all := sandbox.Enforcement{Memory: true, Pids: true, CPU: true}
	tests := []struct {
		name    string
		enforce sandbox.Enforcement
		got     cgroupLimits
		ok      bool
		hint    string
	}{
		{"held", all, held, true, ""},
		{"engine claims, cgroup contradicts", all, dropped, false, readBackHint},
		{"engine says why", sandbox.Enforcement{Reason: reason}, dropped, false, reason},
		{"engine gives no reason", sandbox.Enforcement{}, dropped, false, readBackHint},
		// The reason is about other limits when this one is claimed.
		{"reason about another limit", sandbox.Enforcement{Memory: true, Pids: true, Reason: "no cpu controller"}, dropped, false, readBackHint},
	}
	for _, tt := range tests {
		checks := limitChecks(tt.enforce, tt.got, want)
		if len(checks) != 3 {
			t.Fatalf("%s: %d checks, want 3", tt.name, len(checks))
		}
		for _, c := range checks {
			if tt.name == "reason about another limit" && c.Name == "cpu_limit" {
				if c.OK || c.Hint != "no cpu controller" {
					t.Errorf("%s: %+v, want the engine's reason", tt.name, c)
				}
				continue
			}
			if c.OK != tt.ok || c.Hint != tt.hint {
				t.Errorf("%s: %s ok=%v hint %q, want ok=%v hint %q", tt.name, c.Name, c.OK, c.Hint, tt.ok, tt.hint)
			}
			if !c.OK && (strings.TrimSpace(c.Hint) == "" || c.Detail == "") {
				t.Errorf("%s: failed check %s without a hint or detail: %+v", tt.name, c.Name, c)
			}
		}
	}
	if h := enforceHint(""); strings.TrimSpace(h) == "" {
		t.Error("enforceHint gives no hint for an empty reason")
	}
	if h := enforceHint(reason); h != reason {
		t.Errorf("enforceHint(%q) = %q", reason, h)
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
