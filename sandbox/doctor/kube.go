//go:build !bridge_no_kubernetes

package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/kubernetes"
)

// engineChecks are the checks only one engine needs: today those of the
// kubernetes engine.
func engineChecks(ctx context.Context, rt sandbox.Runtime, add func(name string, ok bool, detail, hint string) bool, warn func(Check)) {
	if k, ok := rt.(*kubernetes.Client); ok {
		kubeChecks(ctx, k, add, warn)
	}
}

// kubeChecks are what only the kubernetes engine needs: the node and
// namespace its pods go to, the permissions of its identity (and, with
// warn, those it holds beyond its needs), and the seccomp profile its pods
// get.
func kubeChecks(ctx context.Context, k *kubernetes.Client, add func(name string, ok bool, detail, hint string) bool, warn func(Check)) {
	add("kubernetes_node", true, fmt.Sprintf("run pods go to node %s, namespace %s", k.Node(), k.Namespace()), "")
	missing, err := k.Missing(ctx)
	switch {
	case err != nil:
		add("kubernetes_rbac", false, err.Error(), "the API server did not answer what the bridge may do")
	default:
		var need, optional []string
		for _, p := range missing {
			if p.Optional {
				optional = append(optional, p.String())
			} else {
				need = append(need, p.String())
			}
		}
		var all []string
		for _, p := range kubernetes.Permissions() {
			all = append(all, p.String())
		}
		detail := "may " + strings.Join(all, ", ")
		if len(need) > 0 {
			detail = "may not " + strings.Join(need, ", ")
		} else if len(optional) > 0 {
			detail += " (but not " + strings.Join(optional, ", ") + ": gVisor's RuntimeClass cannot be found)"
		}
		add("kubernetes_rbac", len(need) == 0, detail, "bind the bridge's identity to the Role and ClusterRole of deploy/kubernetes/rbac.yaml")
	}
	if c, ok := kubeExtraCheck(ctx, k); ok {
		warn(c)
	}
	add("seccomp_profile", true, k.Seccomp(), "")
}

// kubeExtraCheck warns of the permissions the bridge's identity holds that
// it never uses and that would let a stolen token into the runs, the node
// or the cluster (kubernetes.DangerousPermissions). It is only a warning:
// the bridge works, but its identity is worth more than it needs to be.
// No check (false) when the API server does not answer.
func kubeExtraCheck(ctx context.Context, k *kubernetes.Client) (Check, bool) {
	extra, err := k.Extra(ctx)
	if err != nil {
		return Check{}, false
	}
	c := Check{Name: "kubernetes_rbac_extra", OK: len(extra) == 0, Warning: len(extra) > 0,
		Detail: "holds no permission beyond its needs that leads into a run, the node or the cluster"}
	if len(extra) > 0 {
		var what []string
		for _, p := range extra {
			what = append(what, p.String()+" ("+p.Why+")")
		}
		c.Detail = "may also " + strings.Join(what, ", ")
		c.Hint = "the bridge uses none of these: bind its identity only to the Role and ClusterRole of deploy/kubernetes/rbac.yaml, " +
			"and find what grants the rest with `kubectl get rolebindings,clusterrolebindings -A -o wide`"
	}
	return c, true
}
