package engines

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bridge-mcp/bridge/internal/paths"
	"github.com/bridge-mcp/bridge/sandbox"
)

// removeTimeout bounds the removal of a container refused after its create.
const removeTimeout = 30 * time.Second

// RemoveRefused removes the container id that the engine made but the
// bridge refuses (under a context that outlives ctx's cancellation), and
// returns err, joined with the removal's failure if any.
func RemoveRefused(ctx context.Context, remove func(context.Context, string) error, id string, err error) error {
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if rmErr := remove(rmCtx, id); rmErr != nil {
		return errors.Join(err, fmt.Errorf("removing the refused container %s: %w", id, rmErr))
	}
	return err
}

// RefuseGVisorDataMounts is the error for a container with data mounts
// under gVisor on Docker, after removing it (id, if not ""): Docker can
// make a mount noexec only on the host, and gVisor executes a file by
// reading it, which a host mount's noexec does not stop.
func RefuseGVisorDataMounts(ctx context.Context, remove func(context.Context, string) error, doing, id string) error {
	err := fmt.Errorf("%s: %w: runsc reads files through its own gofer, so the host's noexec on the policy's mounts would not hold; "+
		"no code was run. Run gVisor through Podman (engine podman with a runsc service: docs/policy.md#gvisor-oci_runtime-runsc), "+
		"which gives gVisor the mount options itself, or use runc, or remove the policy's mounts", doing, sandbox.ErrDataMountsGVisor)
	if id == "" {
		return err
	}
	return RemoveRefused(ctx, remove, id, err)
}

// CheckRuntimeOf fails closed on a container that the engine created with
// another OCI runtime than spec asked for (Podman's API, for one, ignores a
// per-container runtime): it removes the container and returns an error
// wrapping [sandbox.ErrOCIRuntime]. got is the runtime the engine reports for it.
func CheckRuntimeOf(ctx context.Context, remove func(context.Context, string) error, doing, id, want, got string) error {
	if want == "" || filepath.Base(got) == want {
		return nil
	}
	err := fmt.Errorf("%s: %w: the engine made the container with the OCI runtime %s, not %s; "+
		"no code was run (run `bridge doctor --oci-runtime %s`)", doing, sandbox.ErrOCIRuntime, orUnknown(got), want, want)
	return RemoveRefused(ctx, remove, id, err)
}

// orUnknown is s, or "unknown" when the engine did not say.
func orUnknown(s string) string {
	if s == "" {
		return "an unnamed runtime"
	}
	return s
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
func CheckDataMountHosts(ms []sandbox.DataMount) error {
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

// MatchLabels keeps the containers that carry every label in want.
func MatchLabels(cs []sandbox.ContainerInfo, want map[string]string) []sandbox.ContainerInfo {
	out := cs[:0]
	for _, c := range cs {
		ok := true
		for k, v := range want {
			if c.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, c)
		}
	}
	return out
}
