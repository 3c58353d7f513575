package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/bridge-mcp/bridge/internal/paths"
)

// DataDir is the folder of the container under which the data mounts
// appear (policy mounts: docs/policy.md).
const DataDir = paths.DataDir

// DataMount is a host folder the code may read: mounted read-only, nosuid,
// nodev and noexec at Path, under DataDir. The code can read what the
// container's user may read there, and nothing else: it cannot write,
// create or delete anything in it (EROFS), execute a file of it or map one
// executable (EACCES), use a setuid bit or a device node of it.
type DataMount struct {
	// Host is the folder on the host: absolute and clean, symlinks already
	// resolved (the policy does that).
	Host string
	// Path is where the container sees it: clean, under DataDir.
	Path string
}

// validateDataMounts checks what every backend relies on: absolute, clean
// host folders; distinct paths under DataDir that do not nest; nothing an
// engine reads as a separator.
func validateDataMounts(ms []DataMount) error {
	for i, m := range ms {
		switch {
		case !filepath.IsAbs(m.Host) || filepath.Clean(m.Host) != m.Host || m.Host == "/":
			return fmt.Errorf("mount %d: host folder %q must be an absolute, clean path other than /", i, m.Host)
		case path.Clean(m.Path) != m.Path || !strings.HasPrefix(m.Path, DataDir+"/"):
			return fmt.Errorf("mount %d: container path %q must be a clean path under %s/", i, m.Path, DataDir)
		case strings.ContainsAny(m.Path+m.Host, ",:\x00"):
			return fmt.Errorf("mount %d: %s → %s: a comma or a colon in a path is not allowed (engines read them as separators)", i, m.Host, m.Path)
		}
		for _, o := range ms[:i] {
			if o.Path == m.Path || strings.HasPrefix(m.Path, o.Path+"/") || strings.HasPrefix(o.Path, m.Path+"/") {
				return fmt.Errorf("mounts at %s and %s overlap: each needs a path of its own, not nested in another", o.Path, m.Path)
			}
		}
	}
	return nil
}

// createScanEntries is how many entries of each mount's folder are looked
// at for FIFOs when a container is made: a few milliseconds at most, so a
// large folder is checked in full only when the policy is read.
const createScanEntries = 10_000

// CheckDataMountHosts fails when a data mount's host folder is gone, no
// longer a folder, or no longer the folder the policy resolved (a symlink
// now stands somewhere on its path, which the engine would follow): the
// policy checked it at load, but folders come and go, and the engines' own
// errors for this say little. It also fails when the folder now holds a
// FIFO (looking at createScanEntries entries).
func CheckDataMountHosts(ms []DataMount) error {
	for _, m := range ms {
		if r, err := filepath.EvalSymlinks(m.Host); err == nil && r != m.Host {
			return fmt.Errorf("the policy's mount %s → %s: the path now leads through a symlink to %s, not to the folder the policy checked: fix the path on the host, or reload the policy", m.Host, m.Path, r)
		}
		fi, err := os.Stat(m.Host)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("the policy's mount %s → %s: the host folder no longer exists: recreate it, or remove the mount from the policy", m.Host, m.Path)
		case err != nil:
			return fmt.Errorf("the policy's mount %s → %s: %w", m.Host, m.Path, err)
		case !fi.IsDir():
			return fmt.Errorf("the policy's mount %s → %s: the host path is no longer a folder: fix it, or remove the mount from the policy", m.Host, m.Path)
		}
		if s := paths.Special(m.Host, createScanEntries); s.NFIFOs > 0 {
			return fmt.Errorf("the policy's mount %s → %s now holds %d FIFO(s) (%s): code could write through one to whatever host process reads it; no container was made: remove them, or mount a folder without them",
				m.Host, m.Path, s.NFIFOs, strings.Join(s.FIFOs, ", "))
		}
	}
	return nil
}

// statDataMounts stats each mount's host folder (nil where that fails),
// to tell later whether it is still the folder a container mounted.
func statDataMounts(ms []DataMount) []os.FileInfo {
	if len(ms) == 0 {
		return nil
	}
	fis := make([]os.FileInfo, len(ms))
	for n, m := range ms {
		fis[n], _ = os.Stat(m.Host)
	}
	return fis
}

// mountsChanged says which of the container's data mounts no longer holds
// the folder it was created with ("" when all do): the host folder was
// deleted, or replaced by another (device and inode differ). Such a
// container shows the code an empty or stale folder, so a ready one is
// discarded rather than run (the pool's take path: a stat per mount).
func (i *Container) mountsChanged() string {
	for n, m := range i.limits.Mounts {
		fi, err := os.Stat(m.Host)
		if err != nil || n >= len(i.mounted) || i.mounted[n] == nil || !os.SameFile(fi, i.mounted[n]) {
			return m.Host
		}
	}
	return ""
}

// ErrDataMountsGVisor means the data mounts cannot be made noexec under
// gVisor on this engine (see docker.Client.Create).
var ErrDataMountsGVisor = errors.New("data mounts cannot be held noexec under gVisor on Docker")
