package doctor

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/detect"
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

// Under gVisor the limits are read back from gVisor's own view.
func TestGVisorLimitChecks(t *testing.T) {
	want := smokeLimits()
	held := cgroupLimits{Source: "gvisor", Memory: ptr("134217728"), Pids: ptr("64"), CPU: ptr("0.52")}
	for _, c := range limitChecks(sandbox.Enforcement{Memory: true, Pids: true, CPU: true}, held, want) {
		if !c.OK || c.Hint != "" || !strings.Contains(c.Detail, "gVisor") && c.Name != "cpu_limit" {
			t.Errorf("held: %+v", c)
		}
	}
	// --ignore-cgroups: gVisor sees the host's memory, the loop is not
	// paused; a missing rlimit shows as unlimited.
	dropped := cgroupLimits{Source: "gvisor", Memory: ptr("25769803776"), Pids: ptr("4096"), CPU: ptr("0.99")}
	for _, c := range limitChecks(sandbox.Enforcement{Memory: true, Pids: true, CPU: true}, dropped, want) {
		if c.OK || c.Hint == "" {
			t.Errorf("dropped: %+v", c)
		}
	}
	for _, tt := range []struct {
		got  *string
		cpus float64
		ok   bool
	}{
		{ptr("0.50"), 0.5, true},
		{ptr("0.62"), 0.5, true},
		{ptr("0.74"), 0.5, true},
		{ptr("0.76"), 0.5, false},
		{ptr("1.00"), 0.5, false},
		{ptr("0.30"), 0.25, true},
		{ptr("0.50"), 1, false}, // a whole core cannot be seen from one loop
		{ptr("0"), 0.5, false},
		{ptr("x"), 0.5, false},
		{nil, 0.5, false},
	} {
		if got := cpuShareHolds(tt.got, tt.cpus); got != tt.ok {
			t.Errorf("cpuShareHolds(%s, %g) = %v, want %v", deref(tt.got), tt.cpus, got, tt.ok)
		}
	}
}

func TestGVisorCheck(t *testing.T) {
	found := func(string) (string, error) { return "/usr/bin/runsc", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	docker := func(runtimes map[string]sandbox.OCIRuntimeInfo) sandbox.EngineInfo {
		return sandbox.EngineInfo{Name: "docker", OCIRuntime: "runc", OCIRuntimes: runtimes}
	}
	tests := []struct {
		name     string
		info     sandbox.EngineInfo
		lookPath func(string) (string, error)
		ok       bool
		detail   []string
		hint     []string
	}{
		{"docker registered", docker(map[string]sandbox.OCIRuntimeInfo{"runc": {}, "runsc": {Path: "/usr/bin/runsc", Args: []string{"--network=none", "--host-uds=open"}}}),
			found, true, []string{"available", "/usr/bin/runsc --network=none --host-uds=open"}, nil},
		{"docker shim", docker(map[string]sandbox.OCIRuntimeInfo{"runsc": {}}), found, true, []string{"available", "shim"}, nil},
		{"docker registered without flags", docker(map[string]sandbox.OCIRuntimeInfo{"runsc": {Path: "/usr/bin/runsc"}}),
			found, false, []string{"without --network=none --host-uds=open"}, []string{"runtimeArgs", "daemon.json", "kill -HUP"}},
		{"docker not registered", docker(map[string]sandbox.OCIRuntimeInfo{"runc": {}}), found, false,
			[]string{"installed at /usr/bin/runsc but not registered with docker"}, []string{"daemon.json", `"--network=none", "--host-uds=open"`}},
		{"docker not installed", docker(map[string]sandbox.OCIRuntimeInfo{"runc": {}}), missing, false,
			[]string{"not installed"}, []string{"apt-get install runsc", "daemon.json"}},
		{"podman runsc service", sandbox.EngineInfo{Name: "podman", OCIRuntime: "runsc"}, found, true, []string{"runs every container with runsc"}, nil},
		{"podman runc service", sandbox.EngineInfo{Name: "podman", OCIRuntime: "runc"}, found, false,
			[]string{"installed at /usr/bin/runsc", "runs every container with runc", "cannot choose a runtime per container"},
			[]string{"--runtime runsc --runtime-flag network=none --runtime-flag host-uds=open", "CONTAINER_HOST"}},
		{"podman not installed", sandbox.EngineInfo{Name: "podman", OCIRuntime: "crun"}, missing, false,
			[]string{"not installed", "crun"}, []string{"apt-get install runsc", "system service"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := gvisorCheck(tt.info, tt.lookPath)
			if c.Name != "gvisor" || c.OK != tt.ok || (c.OK && c.Hint != "") || (!c.OK && c.Hint == "") {
				t.Fatalf("%+v, want ok=%v with a hint only when not ok", c, tt.ok)
			}
			for _, s := range tt.detail {
				if !strings.Contains(c.Detail, s) {
					t.Errorf("detail lacks %q: %s", s, c.Detail)
				}
			}
			for _, s := range tt.hint {
				if !strings.Contains(c.Hint, s) {
					t.Errorf("hint lacks %q: %s", s, c.Hint)
				}
			}
		})
	}
}

// An optional check that fails is a note, not a failure.
func TestWriteTextOptional(t *testing.T) {
	rep := Report{Engines: []EngineReport{{Engine: "podman", Socket: "s", Source: "x", Usable: true, Checks: []Check{
		{Name: "gvisor", Detail: "not installed", Hint: "apt-get install runsc", Optional: true},
	}}}, OK: true}
	var b bytes.Buffer
	WriteText(&b, rep)
	if out := b.String(); !strings.Contains(out, "note gvisor") || !strings.Contains(out, "to use it: apt-get install runsc") || strings.Contains(out, "FAIL") {
		t.Errorf("output:\n%s", out)
	}
}

// A permission held beyond the bridge's needs is a warning: marked WARN
// with its fix, never FAIL, and the engine stays usable.
func TestWriteTextWarning(t *testing.T) {
	rep := Report{Engines: []EngineReport{{Engine: "kubernetes", Socket: "s", Source: "x", Usable: true, Checks: []Check{
		{Name: "kubernetes_rbac_extra", Detail: "may also create pods/exec (a way into every live run pod)", Hint: "bind only rbac.yaml", Warning: true},
	}}}, OK: true}
	var b bytes.Buffer
	WriteText(&b, rep)
	out := b.String()
	if !strings.Contains(out, "WARN kubernetes_rbac_extra") || !strings.Contains(out, "fix: bind only rbac.yaml") ||
		strings.Contains(out, "FAIL") || !strings.Contains(out, "bridge can run code safely") {
		t.Errorf("output:\n%s", out)
	}
}

// A socket that refuses this user gets its own fix, not "start the engine":
// also when the refusal comes wrapped, as from Info.
func TestUnreachableCheck(t *testing.T) {
	c := detect.Candidate{Engine: sandbox.EngineDocker, URI: "unix:///var/run/docker.sock", Why: "default Docker socket"}
	denied := &sandbox.AccessError{Engine: sandbox.EngineDocker, Socket: "/var/run/docker.sock", Who: "root:docker, mode 0660",
		Hint: "add yourself to the `docker` group", Err: errors.New("connect: permission denied")}
	for _, tt := range []struct {
		name              string
		err               error
		detail, hint, not string
	}{
		{"denied", denied, "permission denied on /var/run/docker.sock: you are not allowed to use this Docker engine (the socket is root:docker, mode 0660)",
			"add yourself to the `docker` group", "start"},
		{"denied, wrapped", fmt.Errorf("read engine info: %w", denied), "permission denied on /var/run/docker.sock",
			"add yourself to the `docker` group", "start"},
		{"not running", fmt.Errorf("%w: no docker socket at /var/run/docker.sock", sandbox.ErrEngineUnreachable), "no docker socket",
			"start Docker", "group"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := unreachableCheck(c, tt.err)
			if got.Name != "reachable" || got.OK || !strings.Contains(got.Detail, tt.detail) || !strings.Contains(got.Hint, tt.hint) ||
				strings.Contains(got.Hint, tt.not) || strings.Contains(got.Detail, tt.hint) {
				t.Errorf("got %+v", got)
			}
		})
	}
}

// The packages line: Debian's notable packages with versions, then the
// wheels; an image with none of them says so.
func TestPackagesText(t *testing.T) {
	for _, tc := range []struct {
		pkgs []Package
		want string
	}{
		{nil, "Python 3.11.2; none of numpy, pandas, matplotlib, scipy, scikit-learn, Pillow, openpyxl, tabulate, Jinja2"},
		{[]Package{{Name: "numpy", Version: "1.24.2"}, {Name: "pandas", Version: "1.5.3"}}, "Python 3.11.2, numpy 1.24.2, pandas 1.5.3"},
		{[]Package{{Name: "numpy", Version: "1.24.2"}, {Name: "mine", Version: "0.1", Wheel: true}}, "Python 3.11.2, numpy 1.24.2; from wheels: mine 0.1"},
		{[]Package{{Name: "mine", Version: "0.1", Wheel: true}}, "Python 3.11.2; none of numpy, pandas, matplotlib, scipy, scikit-learn, Pillow, openpyxl, tabulate, Jinja2; from wheels: mine 0.1"},
	} {
		if got := packagesText("3.11.2", tc.pkgs); got != tc.want {
			t.Errorf("packagesText(%v) = %q, want %q", tc.pkgs, got, tc.want)
		}
	}
	// smoke.py looks for the same packages doctor names.
	for _, name := range NotablePackages() {
		if !strings.Contains(smokeCode, `"`+name+`"`) {
			t.Errorf("smoke.py does not look for %s", name)
		}
	}
}
