package integration

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/sandbox"
)

// TestRootlessPodman runs as an unprivileged user against that user's own
// Podman service (`make integration` does this with BRIDGE_TEST_ROOTLESS=1).
// Every other test in this package runs there too; this one checks what is
// special about rootless: which limits hold, and that the bridge refuses to
// pretend otherwise.
func TestRootlessPodman(t *testing.T) {
	if !rootless() {
		t.Skip("runs as the unprivileged user with BRIDGE_TEST_ROOTLESS=1 (make integration does)")
	}
	if os.Getuid() == 0 {
		t.Fatal("BRIDGE_TEST_ROOTLESS=1 but running as root")
	}
	if len(testSuite.engines) != 1 || testSuite.engines[0].name != "podman-rootless" {
		t.Fatalf("want the rootless Podman engine under test, have %d engines", len(testSuite.engines))
	}
	e := testSuite.engines[0]
	ctx := context.Background()
	info, err := e.rt.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Rootless {
		t.Fatal("engine says it is not rootless")
	}
	t.Logf("rootless podman %s, cgroup v%s, enforce %+v", info.Version, info.CgroupVersion, info.Enforce)
	if info.CgroupVersion == "1" {
		if info.Enforce.Memory || info.Enforce.Pids || info.Enforce.CPU || !strings.Contains(info.Enforce.Reason, "cgroup v1") {
			t.Fatalf("rootless on cgroup v1 cannot enforce limits, but Info says %+v", info.Enforce)
		}
	}
	if info.Enforce.All() {
		return
	}
	// Fail closed: without AllowUnenforcedLimits no container is created.
	ex, err := sandbox.NewExecutor(ctx, e.rt, sandbox.ExecutorOptions{Image: images.Name(), Logger: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ex.Run(ctx, sandbox.Request{Code: "print(1)", Limits: limits()})
	if !errors.Is(err, sandbox.ErrLimitsNotEnforced) || !strings.Contains(err.Error(), "--allow-unenforced-limits") {
		t.Fatalf("err = %v, want ErrLimitsNotEnforced naming the way out", err)
	}
	// With the operator's consent the code runs, and the timeout (enforced
	// by the bridge, not the cgroup) still holds.
	l := limits()
	l.Timeout = 3e9
	res := run(t, e, "print('rootless', flush=True)\nwhile True: pass", l)
	if res.Status != sandbox.StatusTimeout || res.Stdout != "rootless\n" {
		t.Fatalf("status %s, stdout %q", res.Status, res.Stdout)
	}
}
