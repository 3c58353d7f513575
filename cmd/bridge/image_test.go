package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
)

// runCLI runs the command line args with no engine reachable, and returns
// stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	t.Setenv("CONTAINER_HOST", "unix:///nonexistent/podman.sock")
	t.Setenv("HOME", t.TempDir()) // no default policy file
	var stdout, stderr bytes.Buffer
	code := run(args, strings.NewReader(""), &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

func TestImageName(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a_pkg-1.0-py3-none-any.whl"), []byte("PK\x03\x04"), 0o644); err != nil {
		t.Fatal(err)
	}
	custom, err := images.Custom{Variant: images.DataScience, Apt: []string{"jq"}, WheelsDir: dir}.Name()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, images.Name()},
		{[]string{"--variant", "slim"}, images.Name()},
		{[]string{"--variant", "datascience"}, images.NameOf(images.DataScience)},
		{[]string{"--variant", "datascience", "--apt", "jq", "--wheels", dir}, custom},
		{[]string{"--wheels", dir, "--apt", "jq", "--variant=datascience"}, custom},
	} {
		out, errOut, code := runCLI(t, append([]string{"image", "name"}, tc.args...)...)
		if code != 0 || strings.TrimSpace(out) != tc.want {
			t.Errorf("image name %v: exit %d, %q, want %s\n%s", tc.args, code, out, tc.want, errOut)
		}
	}
}

// Bad flags are usage errors (exit 2) that say what to do, before any
// engine is reached.
func TestImageFlagErrors(t *testing.T) {
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"image", "build", "--variant", "datascence"}, `invalid value "datascence" for --variant: "datascence" is not a variant: want one of slim, datascience; did you mean "datascience"?`},
		{[]string{"image", "name", "--variant", "fat"}, `"fat" is not a variant`},
		{[]string{"image", "build", "--apt", "-o=APT::Get::AllowUnauthenticated=1"}, "cannot start with '-'"},
		{[]string{"image", "build", "--apt", "jq,Curl"}, `Debian package names are lowercase: "curl"`},
		{[]string{"image", "build", "--wheels", empty}, "holds no .whl files"},
		{[]string{"image", "build", "--wheels", filepath.Join(empty, "x")}, "no such folder"},
		{[]string{"image", "name", "--wheels", empty}, "holds no .whl files"},
		{[]string{"image", "build", "extra"}, "image build takes no arguments"},
		{[]string{"run", "--variant", "datascence", "-"}, `"datascence" is not one of slim, datascience; did you mean "datascience"?`},
		{[]string{"run", "--variant", "datascience", "--image", "localhost/x:1", "-"}, "--image localhost/x:1 and --variant datascience both name the image to run"},
		{[]string{"doctor", "--variant", "big"}, `"big" is not one of slim, datascience`},
	} {
		_, errOut, code := runCLI(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, want %d and %q:\n%s", tc.args, code, exitUsage, tc.want, errOut)
		}
	}
}

func TestImageHelp(t *testing.T) {
	out, _, code := runCLI(t, "image", "-h")
	for _, want := range []string{"--variant V", "--apt PKG... --wheels DIR", "datascience", "sandbox.variant", "sandbox.image", "docs/images.md"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("bridge image -h (exit %d) does not say %q:\n%s", code, want, out)
		}
	}
	_, errOut, code := runCLI(t, "image", "build", "-h")
	for _, want := range []string{"--variant variant", "--apt packages", "--wheels folder", images.NameOf(images.DataScience), "sandbox.image"} {
		if code != 0 || !strings.Contains(errOut, want) {
			t.Errorf("bridge image build -h (exit %d) does not say %q:\n%s", code, want, errOut)
		}
	}
}

// The policy's sandbox.variant takes exactly the variants the images
// package builds.
func TestPolicyVariantsAreTheImages(t *testing.T) {
	for _, v := range images.Variants() {
		if err := policy.CheckSetting(policy.Setting{Key: "sandbox.variant", Value: v}); err != nil {
			t.Errorf("sandbox.variant %s: %v", v, err)
		}
	}
	err := policy.CheckSetting(policy.Setting{Key: "sandbox.variant", Value: "none"})
	if want := "is not one of " + strings.Join(images.Variants(), ", "); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("sandbox.variant none: %v, want %q", err, want)
	}
	if policy.Default().Sandbox.Variant != images.Slim {
		t.Errorf("the default variant is %q", policy.Default().Sandbox.Variant)
	}
}

// The image a policy runs: its image, else its variant's.
func TestRunnerImage(t *testing.T) {
	p := policy.Default()
	if got := runnerImage(p); got != images.Name() {
		t.Errorf("default: %s", got)
	}
	ds, err := p.With([]policy.Setting{{Key: "sandbox.variant", Value: "datascience", Flag: "--variant"}}, policy.Replace)
	if err != nil {
		t.Fatal(err)
	}
	if got := runnerImage(ds); got != images.NameOf(images.DataScience) {
		t.Errorf("datascience: %s", got)
	}
	mine, err := p.With([]policy.Setting{{Key: "sandbox.image", Value: "localhost/mine:1", Flag: "--image"}}, policy.Replace)
	if err != nil {
		t.Fatal(err)
	}
	if got := runnerImage(mine); got != "localhost/mine:1" {
		t.Errorf("image: %s", got)
	}
}
