#!/usr/bin/env bash
# build.sh: the test cluster's binaries, built from the Go module proxy and
# cached. Kubernetes (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl) from the wrapper module in
# build/kubernetes, etcd (etcd, etcdctl) from build/etcd, and the sandbox
# ("pause") image from pause/, as a docker-archive tar that containerd
# imports (no registry needed).
#
# Cached in $BRIDGE_KUBE_CACHE (/var/cache/bridge-kube) under
# kubernetes-VERSION-etcd-VERSION-KEY/bin, KEY a hash of the wrapper
# modules, the pause source, BUILD_REV (lib.sh) and the Go version: a second
# run finds them and returns at once. A cold build takes about 6.5 minutes
# on 2 cores and fills Go's build cache with 4.2 GB; with that cache warm, a
# rebuild (a new key) takes under a minute. Prints the bin directory on
# stdout.
set -euo pipefail

log() { printf 'kube-build: %s\n' "$*" >&2; }
# shellcheck source=integration/kube/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PAUSE_IMAGE=bridge.invalid/kube-pause:1

command -v go >/dev/null || die "go is not on PATH: the binaries are built from the Go module proxy"
BIN=$(bin_dir)
OUT=$(dirname "$BIN")
if [ -e "$BIN/.complete" ]; then
	log "cached: $BIN"
	echo "$BIN"
	exit 0
fi

mkdir -p "$CACHE_ROOT"
# One build at a time (two terminals, make -j): the second waits and then
# finds the first's binaries. -o: the lock's fd is not passed on to go.
if [ "${BRIDGE_KUBE_BUILD_LOCKED:-}" != 1 ]; then
	flock -n "$CACHE_ROOT/.build.lock" true || log "waiting for another build (lock $CACHE_ROOT/.build.lock)"
	exec env BRIDGE_KUBE_BUILD_LOCKED=1 flock -o -w 3600 "$CACHE_ROOT/.build.lock" bash "${BASH_SOURCE[0]}" "$@"
fi
unset BRIDGE_KUBE_BUILD_LOCKED
if [ -e "$BIN/.complete" ]; then
	log "cached (built meanwhile): $BIN"
	echo "$BIN"
	exit 0
fi

T0=$(now_ms)
PARTIAL=$OUT.partial
rm -rf "$PARTIAL"
mkdir -p "$PARTIAL/bin"
# The Makefile exports GOFLAGS with the main module's build tags: these
# modules are built with their own settings, static and without local paths.
export GOFLAGS='' GOWORK=off CGO_ENABLED=0 GOTOOLCHAIN=local
BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
BUILD_LOG=$PARTIAL/build.log

# go_build DIR LDFLAGS PACKAGE...: builds the commands of the module in DIR
# into the partial bin directory (one go build: they share the compile work).
go_build() {
	local dir=$1 ldflags=$2
	shift 2
	if ! (cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$PARTIAL/bin/" "$@") >>"$BUILD_LOG" 2>&1; then
		tail -n 30 "$BUILD_LOG" >&2
		die "go build failed in $dir (full log: $BUILD_LOG)"
	fi
}

# The version the binaries report (kubectl version, /version, the kubelet's
# node status): component-base's and client-go's version variables.
minor=${KUBE_VERSION#v*.}
minor=${minor%%.*}
major=${KUBE_VERSION#v}
major=${major%%.*}
kver=()
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kver+=("-X $pkg.gitVersion=$KUBE_VERSION" "-X $pkg.gitMajor=$major" "-X $pkg.gitMinor=$minor"
		"-X $pkg.gitTreeState=clean" "-X $pkg.buildDate=$BUILD_DATE")
done

step "kubernetes $KUBE_VERSION"
log "$STEP_NAME: go build (cold: about 6.5 minutes on 2 cores; log $BUILD_LOG)"
go_build "$KUBE_DIR/build/kubernetes" "-s -w ${kver[*]}" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
step_done "kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl"

step "etcd $ETCD_VERSION"
go_build "$KUBE_DIR/build/etcd" "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
	go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3
# go build names the server's command after go.etcd.io/etcd/server/v3's
# last element before the major version: "server".
mv "$PARTIAL/bin/server" "$PARTIAL/bin/etcd"
[ -x "$PARTIAL/bin/etcdctl" ] || die "no etcdctl after the build: $(ls "$PARTIAL/bin")"
step_done "etcd, etcdctl"

step "pause image"
# A docker-archive (what docker save writes): manifest.json, the image
# config and one uncompressed layer holding /pause. Reproducible: fixed
# times and owners, so the same source gives the same image ID.
work=$PARTIAL/pause
mkdir -p "$work/rootfs"
go_build "$REPO_DIR" "-s -w" ./integration/kube/pause
mv "$PARTIAL/bin/pause" "$work/rootfs/pause"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/rootfs" -cf "$work/layer.tar" pause
layer_sum=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
printf '{"architecture":"%s","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"integration/kube/build.sh"}]}' \
	"$(go env GOARCH)" "$layer_sum" >"$work/config.json"
config_sum=$(sha256sum "$work/config.json" | cut -d' ' -f1)
mv "$work/config.json" "$work/$config_sum.json"
mkdir "$work/$layer_sum"
mv "$work/layer.tar" "$work/$layer_sum/layer.tar"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' \
	"$config_sum" "$PAUSE_IMAGE" "$layer_sum" >"$work/manifest.json"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work" \
	-cf "$PARTIAL/bin/pause-image.tar" manifest.json "$config_sum.json" "$layer_sum"
echo "$PAUSE_IMAGE" >"$PARTIAL/bin/pause-image.name"
rm -rf "$work"
step_done "$PAUSE_IMAGE (image ID sha256:${config_sum:0:12})"

"$PARTIAL/bin/kubectl" version --client >>"$BUILD_LOG" 2>&1 || die "the built kubectl does not run (log $BUILD_LOG)"
touch "$PARTIAL/bin/.complete"
rm -rf "$OUT"
mv "$PARTIAL" "$OUT"
log "built in $(($(now_ms) - T0)) ms: $BIN ($(du -sh "$BIN" | cut -f1))"
echo "$BIN"
