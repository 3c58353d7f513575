//go:build !bridge_no_podman

package detect

import (
	"context"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/podman"
)

const havePodman = true

// openPodman opens Podman's libpod API at a socket URI.
func openPodman(ctx context.Context, uri string) (sandbox.Runtime, error) {
	return podman.New(ctx, uri)
}
