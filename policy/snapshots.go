package policy

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"
)

var snapshotsKeys = []string{"enabled", "dir", "max_count", "max_bytes", "ttl"}

// Snapshots are sessions' states saved on disk (run_python's snapshot and
// restore), per client. They exist only with sessions on: Enabled says
// whether sessions may save and restore them then.
type Snapshots struct {
	// Enabled lets sessions save and restore snapshots; true by default,
	// but it matters only when Sessions.Enabled is true. false: the tool
	// takes neither snapshot nor restore, and nothing is written.
	Enabled bool
	// Dir is the folder that holds them; "" is the default place,
	// $XDG_STATE_HOME/bridge/snapshots or ~/.local/state/bridge/snapshots
	// (see Folder).
	Dir string
	// MaxCount is how many snapshots one client keeps; 20 (1 to 1000).
	// Past it, a save removes the client's oldest.
	MaxCount int
	// MaxBytes bounds one client's snapshots together, and so each one;
	// 1Gi (1Mi to 1Ti). A save larger fails; past it with the others, a
	// save removes the client's oldest.
	MaxBytes int64
	// TTL is how long a snapshot is kept after it was saved; 168h (1m to
	// 8760h).
	TTL time.Duration
}

// Bounds of the snapshots keys.
const (
	maxSnapshotsCount = 1000
	minSnapshotBytes  = 1 << 20
	maxSnapshotBytes  = 1 << 40
	minSnapshotTTL    = time.Minute
	maxSnapshotTTL    = 365 * 24 * time.Hour
)

func defaultSnapshots() Snapshots {
	return Snapshots{Enabled: true, MaxCount: 20, MaxBytes: 1 << 30, TTL: 7 * 24 * time.Hour}
}

// Folder is the snapshots folder: Dir, or the default place under this
// user's state folder.
func (s Snapshots) Folder() (string, error) {
	if s.Dir != "" {
		return s.Dir, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "bridge", "snapshots"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return "", errors.New("no folder for snapshots: this user has no home folder ($HOME is not set); set snapshots.dir in the policy")
	}
	return filepath.Join(home, ".local", "state", "bridge", "snapshots"), nil
}

// snapshots reads the snapshots section.
func (p *parser) snapshots(k, v *yaml.Node, s *Snapshots) {
	p.keys(k, v, "snapshots", snapshotsKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "enabled":
			s.Enabled = p.boolean(k, v, name, s.Enabled)
		case "dir":
			if dir, ok := p.ownFolder(k, v, name, "the snapshots", "~/.local/state/bridge/snapshots"); ok {
				s.Dir = dir
			}
		case "max_count":
			s.MaxCount = int(p.integer(k, v, name, int64(s.MaxCount), 1, maxSnapshotsCount))
		case "max_bytes":
			s.MaxBytes = p.size(k, v, name, s.MaxBytes, minSnapshotBytes, maxSnapshotBytes)
		case "ttl":
			s.TTL = p.durationIn(k, v, name, s.TTL, minSnapshotTTL, maxSnapshotTTL)
		}
	})
}
