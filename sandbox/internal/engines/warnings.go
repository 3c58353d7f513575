package engines

import (
	"context"
	"fmt"
	"strings"

	"github.com/bridge-mcp/bridge/sandbox"
)

// droppedLimits picks, from the warnings an engine attaches to a container
// it has just created, those that say a requested limit was not applied.
// Docker Engine and Podman (libpod and its Docker-compatible API alike) then
// create the container anyway, e.g. with
//
//	Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded.
//	Your kernel does not support swap limit capabilities or the cgroup is not mounted. Memory limited without swap.
//	Resource limits are not supported and ignored on cgroups V1 rootless systems
//
// The match is deliberately broad: a warning wrongly taken for a dropped
// limit fails a run, one wrongly let through runs code without its limits.
func droppedLimits(warnings []string) []string {
	var out []string
	for _, w := range warnings {
		lw := strings.ToLower(w)
		if strings.Contains(lw, "ignored") || strings.Contains(lw, "discarded") ||
			strings.Contains(lw, "without swap") || strings.Contains(lw, "not supported") ||
			strings.Contains(lw, "does not support") {
			out = append(out, strings.TrimSpace(w))
		}
	}
	return out
}

// RefuseDroppedLimits fails closed on an engine that created a container
// without some of its limits: when the create warnings say a limit was
// dropped, it removes the container id (with remove, under a context that
// outlives ctx's cancellation) and returns an error wrapping
// ErrLimitsNotEnforced that names the warnings. It returns nil when no
// warning says so. doing describes the create ("creating container NAME").
func RefuseDroppedLimits(ctx context.Context, remove func(context.Context, string) error, doing, id string, warnings []string) error {
	dropped := droppedLimits(warnings)
	if len(dropped) == 0 {
		return nil
	}
	err := fmt.Errorf("%s: the engine dropped resource limits (%s): %w",
		doing, strings.Join(dropped, "; "), sandbox.ErrLimitsNotEnforced)
	return RemoveRefused(ctx, remove, id, err)
}
