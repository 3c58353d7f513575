// Package paths holds the places that more than one package of the bridge
// must agree on: where the bridge keeps its runs' directories on the host
// (the sandbox makes them, the policy keeps mounts and artifacts out of
// them) and where the policy's read-only mounts appear in the container.
package paths

import (
	"fmt"
	"os"
	"path/filepath"
)

// DataDir is the one folder of the container under which the policy's
// mounts appear (read-only, nosuid, nodev, noexec): mount /srv/sales is
// DataDir/sales unless the policy names another path under it.
const DataDir = "/data"

// RunRoot is the default root of the bridge's run directories:
// $XDG_RUNTIME_DIR/bridge, or bridge-UID in the temp dir ($TMPDIR, else
// /tmp). Each run's directory holds its relay socket.
func RunRoot() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "bridge")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("bridge-%d", os.Getuid()))
}
