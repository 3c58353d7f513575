package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestRunRoot(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1234")
	if got := RunRoot(); got != "/run/user/1234/bridge" {
		t.Errorf("RunRoot() = %q with XDG_RUNTIME_DIR set", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", "/var/tmp/x")
	if got, want := RunRoot(), filepath.Join("/var/tmp/x", fmt.Sprintf("bridge-%d", os.Getuid())); got != want {
		t.Errorf("RunRoot() = %q, want %q", got, want)
	}
}
