//go:build bridge_no_podman

package detect

import (
	"context"

	"github.com/bridge-mcp/bridge/sandbox"
)

const havePodman = false

func openPodman(context.Context, string) (sandbox.Runtime, error) {
	return nil, errBuiltWithout(sandbox.EnginePodman)
}
