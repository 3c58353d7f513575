//go:build bridge_no_kubernetes

package detect

import (
	"context"

	"github.com/bridge-mcp/bridge/sandbox"
)

const haveKubernetes = false

func openKubernetes(context.Context, string) (sandbox.Runtime, error) {
	return nil, errBuiltWithout(sandbox.EngineKubernetes)
}
