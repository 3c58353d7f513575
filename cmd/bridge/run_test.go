package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunTimeoutOverMax: a --timeout over sandbox.max_timeout names the
// key, the policy in force (a file, or the built-in defaults) and how to
// raise it with bridge run: --policy FILE with that key.
func TestRunTimeoutOverMax(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no default policy file
	_, errOut, code := runCLI(t, "run", "--timeout", "10m", "-")
	for _, want := range []string{"--timeout 10m is longer than sandbox.max_timeout", "5m", "the built-in defaults",
		"no policy file", "max_timeout: 10m", "--policy FILE"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("without a policy file: stderr does not say %q:\n%s", want, errOut)
		}
	}
	if code != exitUsage {
		t.Errorf("exit %d", code)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nsandbox:\n  max_timeout: 2m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, _ = runCLI(t, "run", "--policy", pol, "--timeout", "10m", "-")
	for _, want := range []string{"--timeout 10m is longer than sandbox.max_timeout", "2m", pol, "raise sandbox.max_timeout to at least 10m"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("with %s: stderr does not say %q:\n%s", pol, want, errOut)
		}
	}
}

// TestImageHintOtherEngine: an image missing on the engine picked but held
// by the other one gets --runtime for that one first.
func TestImageHintOtherEngine(t *testing.T) {
	held := map[string]bool{"docker localhost/mine:1": true}
	var asked []string
	hint := missingImageHint(func(engine, image string) bool {
		asked = append(asked, engine+" "+image)
		return held[engine+" "+image]
	})
	h := hint("localhost/mine:1", "podman")
	if !strings.HasPrefix(h, "docker holds localhost/mine:1: run with --runtime docker") || !strings.Contains(h, "pull or build localhost/mine:1 yourself with podman") {
		t.Errorf("hint %q", h)
	}
	if h := hint("localhost/other:1", "docker"); strings.Contains(h, "--runtime podman") || !strings.Contains(h, "with docker") {
		t.Errorf("hint %q", h)
	}
	if strings.Join(asked, ",") != "docker localhost/mine:1,podman localhost/other:1" {
		t.Errorf("asked %q", asked)
	}
}
