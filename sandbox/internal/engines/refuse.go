package engines

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

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
	if want == "" || sandbox.OCIRuntimeName(got) == want {
		return nil
	}
	err := fmt.Errorf("%s: %w: the engine made the container with the OCI runtime %s, not %s; "+
		"no code was run (run `bridge doctor --oci-runtime %s`)", doing, sandbox.ErrOCIRuntime, cmp.Or(got, "an unnamed runtime"), want, want)
	return RemoveRefused(ctx, remove, id, err)
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
