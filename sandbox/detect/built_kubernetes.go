//go:build !bridge_no_kubernetes

package detect

import (
	"context"
	"strings"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/kubernetes"
)

const haveKubernetes = true

// openKubernetes opens a cluster from "in-cluster" or "kubeconfig:PATH".
func openKubernetes(ctx context.Context, uri string) (sandbox.Runtime, error) {
	return kubernetes.New(ctx, strings.TrimPrefix(uri, "kubeconfig:"))
}
