package policy

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestCheckSettingSharesTheFileGrammar(t *testing.T) {
	for _, tc := range []struct {
		s    Setting
		want string // "" for valid
	}{
		{Setting{"sandbox.output_limit", "64Ki", "--output-limit"}, ""},
		{Setting{"sandbox.memory", "256Mi", "--memory"}, ""},
		{Setting{"sandbox.memory", "256MB", "--memory"}, `--memory: invalid size "256MB": write 256Mi for 1024s or 256M for 1000s`},
		{Setting{"sandbox.memory", "512m", "--memory"}, `write 512Mi for 1024s or 512M for 1000s`},
		{Setting{"sandbox.memory", "1Mi", "--memory"}, `--memory: 1Mi is out of range: the minimum is 16Mi`},
		{Setting{"sandbox.timeout", "10", "--timeout"}, `--timeout: want a duration such as 30s, 5m or 1h30m, got a number 10: add a unit, e.g. 10s`},
		{Setting{"sandbox.timeout", "0s", "--timeout"}, `--timeout: 0s is out of range: it must be more than 0`},
		{Setting{"sandbox.timeout", "10x", "--timeout"}, `--timeout: invalid duration "10x"`},
		{Setting{"sandbox.engine", "podmn", "--runtime"}, `--runtime: "podmn" is not one of auto, podman, docker, kubernetes, runsc; did you mean "podman"?`},
		{Setting{"sandbox.engine", "runsc", "--runtime"}, ""},
		{Setting{"sandbox.cpus", "0.5", "--cpus"}, ""},
		{Setting{"sandbox.cpus", "2000", "--cpus"}, `--cpus: 2000 is out of range`},
		{Setting{"sandbox.pids", "1.5", "--pids"}, `--pids: want a whole number`},
		{Setting{"sandbox.image", "a b", "--image"}, `an image reference has no spaces`},
		{Setting{"sandbox.variant", "datascience", "--variant"}, ""},
		{Setting{"sandbox.variant", "datascence", "--variant"}, `--variant: "datascence" is not one of slim, datascience; did you mean "datascience"?`},
		{Setting{"sandbox.variant", "", "--variant"}, `--variant: want one of slim, datascience`},
		{Setting{"budgets.call_timeout", "90s", "--call-timeout"}, ""},
		{Setting{"tools.default", "deny", "--x"}, `tools.default is not a key a flag may set`},
	} {
		err := CheckSetting(tc.s)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.s, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to contain %q", tc.s, err, tc.want)
		}
	}
}

func TestWithTightensAndRefusesToLoosen(t *testing.T) {
	file, err := Parse([]byte("version: 1\nsandbox: {memory: 512Mi, timeout: 60s, max_timeout: 5m, engine: podman, image: \"\"}\n"), "/etc/bridge/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Tighter values apply; the file's policy is not changed.
	p, err := file.With([]Setting{
		{"sandbox.memory", "256Mi", "--memory"}, {"sandbox.timeout", "2m", "--timeout"},
		{"sandbox.engine", "podman", "--runtime"}, {"sandbox.oci_runtime", "runsc", "--oci-runtime"},
		{"sandbox.image", "localhost/mine:1", "--image"}, {"sandbox.cpus", "0.5", "--cpus"},
	}, Tighten)
	if err != nil {
		t.Fatal(err)
	}
	if p.Sandbox.Memory != 256<<20 || p.Sandbox.Timeout != 2*time.Minute || p.Sandbox.OCIRuntime != "runsc" ||
		p.Sandbox.Image != "localhost/mine:1" || p.Sandbox.CPUs != 0.5 {
		t.Errorf("tightened: %+v", p.Sandbox)
	}
	if file.Sandbox.Memory != 512<<20 || file.Sandbox.Image != "" {
		t.Errorf("With changed the policy it was called on: %+v", file.Sandbox)
	}

	for _, tc := range []struct {
		s    Setting
		want string
	}{
		{Setting{"sandbox.memory", "1Gi", "--memory"}, "--memory 1Gi would loosen the policy: /etc/bridge/policy.yaml sets sandbox.memory: 512Mi"},
		{Setting{"sandbox.timeout", "10m", "--timeout"}, "sets sandbox.max_timeout: 5m"},
		{Setting{"sandbox.engine", "docker", "--runtime"}, "sets sandbox.engine: podman"},
		{Setting{"sandbox.oci_runtime", "runc", "--oci-runtime"}, "sets sandbox.oci_runtime: default"},
		{Setting{"sandbox.require_enforced_limits", "false", "--allow-unenforced-limits"}, "sets sandbox.require_enforced_limits: true"},
		{Setting{"sandbox.max_concurrent", "5", "--max-concurrent"}, "sets sandbox.max_concurrent: 4"},
	} {
		_, err := file.With([]Setting{tc.s}, Tighten)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "drop "+tc.s.Flag) {
			t.Errorf("%+v: error %v, want it to contain %q and say to drop the flag", tc.s, err, tc.want)
		}
		// A reloaded file the flag is past wins, without an error.
		got, err := file.With([]Setting{tc.s}, Cap)
		if err != nil || got.Value(tc.s.Key) != file.Value(tc.s.Key) {
			t.Errorf("Cap %+v: %v, %v; want the file's value %q", tc.s, got.Value(tc.s.Key), err, file.Value(tc.s.Key))
		}
	}

	// A lower ceiling brings the default timeout with it.
	p, err = file.With([]Setting{{"sandbox.max_timeout", "30s", "--max-timeout"}}, Tighten)
	if err != nil || p.Sandbox.Timeout != 30*time.Second || p.Sandbox.MaxTimeout != 30*time.Second {
		t.Errorf("max_timeout 30s: %+v, %v", p, err)
	}

	// A named image is not replaced by the flag.
	named, _ := Parse([]byte("version: 1\nsandbox: {image: localhost/pinned:2}\n"), "p.yaml")
	if _, err := named.With([]Setting{{"sandbox.image", "localhost/other:1", "--image"}}, Tighten); err == nil {
		t.Error("--image replaced the policy's image")
	}
}

// A flag may choose a variant only where the policy leaves the default
// (slim, and no image); --image and a variant flag together are refused.
func TestWithVariant(t *testing.T) {
	ds := Setting{"sandbox.variant", "datascience", "--variant"}
	for _, tc := range []struct {
		name, file string
		settings   []Setting
		mode       Mode
		image      string
		variant    string
		err        string
	}{
		{"no file", "", []Setting{ds}, Replace, "", "datascience", ""},
		{"file leaves the default", "version: 1\n", []Setting{ds}, Tighten, "", "datascience", ""},
		{"file says slim", "version: 1\nsandbox: {variant: slim}\n", []Setting{ds}, Tighten, "", "datascience", ""},
		{"file chooses datascience, flag the same", "version: 1\nsandbox: {variant: datascience}\n", []Setting{ds}, Tighten, "", "datascience", ""},
		{"file chooses datascience, flag slim", "version: 1\nsandbox: {variant: datascience}\n",
			[]Setting{{"sandbox.variant", "slim", "--variant"}}, Tighten, "", "", "--variant slim would loosen the policy: p.yaml sets sandbox.variant: datascience"},
		{"file names an image", "version: 1\nsandbox: {image: localhost/mine:1}\n", []Setting{ds}, Tighten, "", "",
			"(sandbox.variant: may choose a variant when the policy leaves it slim and sandbox.image empty)"},
		{"file chooses a variant, flag an image", "version: 1\nsandbox: {variant: datascience}\n",
			[]Setting{{"sandbox.image", "localhost/mine:1", "--image"}}, Tighten, "localhost/mine:1", "datascience", ""},
		{"both flags", "", []Setting{{"sandbox.image", "localhost/mine:1", "--image"}, ds}, Replace, "", "",
			"--image localhost/mine:1 and --variant datascience both name the image to run: give one of them"},
		{"both flags under a file", "version: 1\n", []Setting{ds, {"sandbox.image", "localhost/mine:1", "--image"}}, Tighten, "", "",
			"both name the image to run"},
		{"an image and --variant slim", "", []Setting{{"sandbox.image", "localhost/mine:1", "--image"}, {"sandbox.variant", "slim", "--variant"}},
			Replace, "localhost/mine:1", "slim", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Default()
			if tc.file != "" {
				var err error
				if p, err = Parse([]byte(tc.file), "p.yaml"); err != nil {
					t.Fatal(err)
				}
			}
			got, err := p.With(tc.settings, tc.mode)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Sandbox.Image != tc.image || got.Sandbox.Variant != tc.variant {
				t.Errorf("image %q variant %q, want %q %q", got.Sandbox.Image, got.Sandbox.Variant, tc.image, tc.variant)
			}
		})
	}
}

func TestWithReplaceWithoutAFile(t *testing.T) {
	p, err := Default().With([]Setting{{"sandbox.memory", "2Gi", "--memory"}, {"sandbox.max_concurrent", "8", "--max-concurrent"}}, Replace)
	if err != nil || p.Sandbox.Memory != 2<<30 || p.Sandbox.MaxConcurrent != 8 {
		t.Fatalf("%+v, %v", p, err)
	}
	_, err = Default().With([]Setting{{"sandbox.timeout", "10m", "--timeout"}}, Replace)
	if err == nil || !strings.Contains(err.Error(), "--timeout 10m is longer than sandbox.max_timeout 5m") {
		t.Errorf("timeout past max_timeout: %v", err)
	}
}

// Every key a flag may set has a rule, a value, and the same rule in
// docs/policy.md's table of flags.
func TestSettingRules(t *testing.T) {
	doc, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	for _, r := range SettingRules() {
		if r[1] == "" || d.Value(r[0]) == "" {
			t.Errorf("%s: rule %q, value %q", r[0], r[1], d.Value(r[0]))
		}
		found := false
		for _, line := range strings.Split(string(doc), "\n") {
			if strings.Contains(line, "| `"+r[0]+"`") && strings.HasSuffix(line, "| "+r[1]+" |") {
				found = true
			}
		}
		if !found {
			t.Errorf("docs/policy.md's table of flags has no row for %s that says %q", r[0], r[1])
		}
	}
}

func TestAuditCheck(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file, want string
	}{
		{"", ""},
		{"stderr", ""},
		{dir + "/audit.jsonl", ""},
		{dir + "/missing/audit.jsonl", "the folder " + dir + "/missing does not exist: create it (mkdir -p " + dir + "/missing)"},
		{dir, dir + " is a folder; name a file in it"},
	} {
		err := Audit{File: tc.file}.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Check(%q) = %v, want %q", tc.file, err, tc.want)
		}
	}
	if _, err := os.Stat(dir + "/audit.jsonl"); !os.IsNotExist(err) {
		t.Errorf("Check created the audit file: %v", err)
	}
	// Open says the same as Check.
	_, err := OpenAuditor(Audit{File: dir + "/missing/audit.jsonl"}, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "does not exist: create it") {
		t.Errorf("OpenAuditor: %v", err)
	}
}
