//go:build !bridge_no_docker

package detect

import (
	"context"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/docker"
)

const haveDocker = true

// openDocker opens the Docker engine (or Podman's Docker-compatible API)
// at a socket URI.
func openDocker(ctx context.Context, uri string) (sandbox.Runtime, error) {
	return docker.New(ctx, uri)
}
