# shellcheck shell=bash disable=SC2034
# Settings and helpers shared by the test cluster's scripts (build.sh, up.sh,
# down.sh, kube.sh). Sourced, not run. Each script defines log (its own
# prefix) before sourcing this file; the variables are theirs to use.

KUBE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$KUBE_DIR/../.." && pwd)
# shellcheck source=integration/env/lib.sh
. "$REPO_DIR/integration/env/lib.sh"

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.3

# The built binaries, kept across runs and machines' lives (down leaves them).
CACHE_ROOT=${BRIDGE_KUBE_CACHE:-/var/cache/bridge-kube}
# Everything the cluster writes while up, removed by down: persistent state
# (containerd's images and snapshots, etcd, the kubelet's root), run-time
# state (sockets, containerd's state, PIDs), certificates and configs.
STATE=/var/lib/bridge-kube
RUN=/run/bridge-kube
LOG_DIR=/var/log/bridge-kube
PKI=$STATE/pki
CONF=$STATE/conf
# The admin kubeconfig: root only.
ADMIN_KUBECONFIG=$STATE/admin.kubeconfig
# kubectl's discovery cache, for the scripts and for kube.env's users.
KUBECTL_CACHE=$RUN/kubectl-cache

# containerd, our own instance: never Docker's (/run/containerd,
# /var/run/docker/containerd) and never the system one.
CTRD_ROOT=$STATE/containerd
CTRD_STATE=$RUN/containerd
CTRD_SOCK=$RUN/containerd/containerd.sock
CTRD_CONFIG=$CONF/containerd.toml
CTRD_NS=k8s.io

KUBELET_ROOT=$STATE/kubelet
ETCD_DATA=$STATE/etcd

# CNI: our own config, plugin and state directories; the plugins are
# Debian's (containernetworking-plugins). CNI_BRIDGE: the bridge (no
# address, no ports) the pods' macvlan interfaces hang off.
CNI_CONF_DIR=$STATE/cni/conf
CNI_BIN_DIR=$STATE/cni/bin
CNI_DATA_DIR=$STATE/cni/networks
CNI_SYSTEM_BIN=${BRIDGE_KUBE_CNI_PLUGINS:-/usr/lib/cni}
CNI_NET=bridge-kube
CNI_BRIDGE=bkube0
POD_CIDR=${BRIDGE_KUBE_POD_CIDR:-10.213.77.0/24}
SERVICE_CIDR=10.213.78.0/24
SERVICE_IP=10.213.78.1

NODE_NAME=${BRIDGE_KUBE_NODE:-bridge-node}
APISERVER_PORT=6443
APISERVER=https://127.0.0.1:$APISERVER_PORT
ETCD_CLIENT_PORT=2479
ETCD_PEER_PORT=2480
KUBELET_PORT=10250
RUN_NAMESPACE=bridge-runs

# The line up.sh adds to /etc/hosts when the node name does not resolve:
# the API server reaches the kubelet (logs, exec) by the node's host name.
HOSTS_MARK="# bridge-kube node (integration/kube), removed by kube-down"

# What kube-up found and changed, for kube-down (sysctls, iptables chains
# and directories that were there before).
SAVED=$RUN/saved

ENV_DIR=/run/bridge-test
KUBE_ENV=$ENV_DIR/kube.env
WAIT_SECONDS=${BRIDGE_KUBE_WAIT_SECONDS:-120}

# The sysctls the kubelet sets at start (its kernel tunables), saved by up.sh
# and restored by down.sh.
KUBELET_SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

# The control-plane processes, in start order: NAME BINARY.
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)

die() {
	log "ERROR: $*"
	exit 1
}

need_root() {
	[ "$(id -u)" -eq 0 ] || die "$1 needs root (it runs containerd and a kubelet): sudo make ${2:-kube-up}"
}

# How build.sh builds (its flags, what it packs): bump this when that changes,
# so the cache of a different recipe is not taken for this one's.
BUILD_REV=1

# cache_key: the first 12 hex digits of a hash over both wrapper modules
# (go.mod and go.sum), the pause source, BUILD_REV and the Go version: the
# binaries of one key are built once.
cache_key() {
	{
		cat "$KUBE_DIR/build/kubernetes/go.mod" "$KUBE_DIR/build/kubernetes/go.sum" \
			"$KUBE_DIR/build/etcd/go.mod" "$KUBE_DIR/build/etcd/go.sum" "$KUBE_DIR/pause/main.go"
		echo "$BUILD_REV"
		go env GOVERSION GOARCH
	} | sha256sum | cut -c1-12
}

# bin_dir: where the binaries of this tree's key live.
bin_dir() { echo "$CACHE_ROOT/kubernetes-$KUBE_VERSION-etcd-$ETCD_VERSION-$(cache_key)/bin"; }

# env_get VAR: VAR's value in kube.env ("" when absent).
env_get() {
	[ -r "$KUBE_ENV" ] || return 0
	sed -n "s/^\(export \)\?$1=//p" "$KUBE_ENV" | tail -n 1
}
