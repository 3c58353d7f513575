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

// Specials are the FIFOs and unix sockets Special found in a folder.
type Specials struct {
	FIFOs, Sockets []string // paths, at most MaxSpecialsListed each
	NFIFOs         int      // how many FIFOs it found
	NSockets       int      // how many sockets
	Scanned        int      // the entries it looked at
	Complete       bool     // it looked at every entry (within maxEntries)
}

// MaxSpecialsListed is how many paths of each kind Specials lists.
const MaxSpecialsListed = 10

// Special walks dir (not following symbolic links) for FIFOs and unix
// sockets, looking at maxEntries entries at most. A read-only mount stops
// writes to files but not to these: code that finds one may write to
// whatever host process reads the FIFO or listens on the socket. Folders
// it cannot read are skipped (the sandbox's user cannot read them either,
// as it reads with the permissions for others).
func Special(dir string, maxEntries int) Specials {
	s := Specials{Complete: true}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if s.Scanned >= maxEntries {
			s.Complete = false
			return filepath.SkipAll
		}
		s.Scanned++
		switch d.Type() & (os.ModeNamedPipe | os.ModeSocket) {
		case os.ModeNamedPipe:
			s.NFIFOs++
			if len(s.FIFOs) < MaxSpecialsListed {
				s.FIFOs = append(s.FIFOs, p)
			}
		case os.ModeSocket:
			s.NSockets++
			if len(s.Sockets) < MaxSpecialsListed {
				s.Sockets = append(s.Sockets, p)
			}
		}
		return nil
	})
	return s
}
