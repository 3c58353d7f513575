//go:build bridge_no_docker

package detect

import (
	"context"

	"github.com/bridge-mcp/bridge/sandbox"
)

const haveDocker = false

func openDocker(context.Context, string) (sandbox.Runtime, error) {
	return nil, errBuiltWithout(sandbox.EngineDocker)
}
