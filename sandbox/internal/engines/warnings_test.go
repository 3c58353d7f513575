package engines

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
)

func TestDroppedLimits(t *testing.T) {
	dropped := []string{
		// Docker Engine and Podman (libpod and compat API), cgroup v1 and v2.
		"Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded.",
		"Your kernel does not support swap limit capabilities or the cgroup is not mounted. Memory limited without swap.",
		"Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded.",
		"Your kernel does not support PIDs limit capabilities or the cgroup is not mounted. PIDs limit discarded.",
		"Your kernel does not support CPU cfs quota or the cgroup is not mounted. Quota discarded.",
		"Your kernel does not support CPU CFS period or the cgroup is not mounted. Period discarded.",
		// Podman, rootless on cgroup v1.
		"Resource limits are not supported and ignored on cgroups V1 rootless systems",
		"Realtime period not supported on cgroups V2 systems",
	}
	harmless := []string{
		"",
		"The requested image's platform (linux/arm64) does not match the detected host platform (linux/amd64) and no specific platform was requested",
		"something harmless",
	}
	for _, w := range dropped {
		if got := droppedLimits([]string{w}); !slices.Equal(got, []string{w}) {
			t.Errorf("droppedLimits(%q) = %q, want it picked", w, got)
		}
	}
	for _, w := range harmless {
		if got := droppedLimits([]string{w}); len(got) != 0 {
			t.Errorf("droppedLimits(%q) = %q, want nothing", w, got)
		}
	}
	all := append(append([]string(nil), harmless...), dropped...)
	if got := droppedLimits(all); !slices.Equal(got, dropped) {
		t.Errorf("droppedLimits(mixed) = %q, want %q", got, dropped)
	}
	if got := droppedLimits(nil); got != nil {
		t.Errorf("droppedLimits(nil) = %q", got)
	}
}

func TestRefuseDroppedLimits(t *testing.T) {
	var removed []string
	var rmErr error
	remove := func(ctx context.Context, id string) error {
		if ctx.Err() != nil {
			t.Errorf("remove called with an ended context: %v", ctx.Err())
		}
		removed = append(removed, id)
		return rmErr
	}
	// A cancelled create context must not stop the removal.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	if err := RefuseDroppedLimits(ctx, remove, "create container c1", "id1", []string{"something harmless"}); err != nil || removed != nil {
		t.Fatalf("harmless warning: err %v, removed %q", err, removed)
	}
	if err := RefuseDroppedLimits(ctx, remove, "create container c1", "id1", nil); err != nil || removed != nil {
		t.Fatalf("no warning: err %v, removed %q", err, removed)
	}

	warn := "Your kernel does not support pids limit capabilities or the cgroup is not mounted. PIDs limit discarded."
	err := RefuseDroppedLimits(ctx, remove, "create container c1", "id1", []string{"something harmless", warn})
	if !errors.Is(err, sandbox.ErrLimitsNotEnforced) {
		t.Fatalf("err = %v, want ErrLimitsNotEnforced", err)
	}
	for _, s := range []string{"create container c1", warn} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	if strings.Contains(err.Error(), "harmless") {
		t.Errorf("%q names a harmless warning", err)
	}
	if !slices.Equal(removed, []string{"id1"}) {
		t.Errorf("removed %q, want [id1]", removed)
	}

	rmErr = errors.New("engine gone")
	err = RefuseDroppedLimits(ctx, remove, "create container c2", "id2", []string{warn})
	if !errors.Is(err, sandbox.ErrLimitsNotEnforced) || !errors.Is(err, rmErr) || !strings.Contains(err.Error(), "id2") {
		t.Errorf("err = %v, want ErrLimitsNotEnforced and the removal's error naming id2", err)
	}
}
