#!/usr/bin/env bash
# kube.sh COMMAND: the test cluster (a one-node Kubernetes on loopback, see
# README.md beside this file).
#
#   build                      the binaries (cached; build.sh)
#   up [--image IMAGE]... [--optional-image IMAGE]...
#                              start it, import the images (up.sh)
#   down                       stop it, undo its host changes, check (down.sh)
#   check                      only down's check: is anything left?
#   import [--optional] IMAGE...
#                              copy images from Docker's store into the
#                              cluster's containerd (skipped when the same
#                              image ID is there already); --optional: the
#                              images after it may be missing from Docker
#   mem                        RSS in MiB of each control-plane process and
#                              containerd, and their total
#   status                     the daemons, the node, the pods
#   chains                     the host's iptables chains, "TOOL TABLE CHAIN"
#                              (up.sh saves them, down.sh compares)
#
# All but build, mem, status and chains need root.
set -euo pipefail

log() { printf 'kube: %s\n' "$*" >&2; }
# shellcheck source=integration/kube/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
	sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
	exit 2
}

# The runner images live in the local dockerd, whatever the caller's
# environment points docker at.
export DOCKER_HOST=unix:///var/run/docker.sock
unset DOCKER_CONTEXT

# normalize IMAGE: the name containerd and the kubelet give IMAGE
# ("debian:12" is docker.io/library/debian:12).
normalize() {
	local n=$1 first=${1%%/*}
	if [[ $n != */* ]]; then
		n=docker.io/library/$n
	elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
		n=docker.io/$n
	fi
	local last=${n##*/}
	[[ $last == *:* || $n == *@* ]] || n=$n:latest
	echo "$n"
}

cmd_import() {
	need_root "kube.sh import" kube-up
	local optional='' image id name stamp t0 done=()
	local ctr=(ctr -a "$CTRD_SOCK" -n "$CTRD_NS")
	timeout 10 "${ctr[@]}" version >/dev/null 2>&1 ||
		die "the cluster's containerd does not answer on $CTRD_SOCK: make kube-up"
	mkdir -p "$STATE/images"
	for image in "$@"; do
		if [ "$image" = --optional ]; then
			optional=1
			continue
		fi
		t0=$(now_ms)
		if ! id=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null); then
			[ -n "$optional" ] && {
				log "import: $image is not in Docker's store: skipped (optional)"
				continue
			}
			die "import: $image is not in Docker's store: build it first (make image)"
		fi
		name=$(normalize "$image")
		stamp=$STATE/images/$(echo "$name" | sha256sum | cut -c1-16)
		# (grep -q in a pipe would end ctr early: with pipefail, a failure.)
		if [ "$(cat "$stamp" 2>/dev/null)" = "$id" ] && grep -qxF "$name" <<<"$("${ctr[@]}" images ls -q)"; then
			log "import: $name (${id:7:12}) is there already"
		else
			# docker save writes a docker-archive; ctr unpacks it for the
			# CRI's snapshotter (overlayfs). The image keeps its ID.
			docker save "$image" | "${ctr[@]}" images import - >/dev/null ||
				die "import: docker save $image | ctr images import failed"
			if ! grep -qxF "$name" <<<"$("${ctr[@]}" images ls -q)"; then
				die "import: $image was imported but containerd has no image $name ($("${ctr[@]}" images ls -q | xargs))"
			fi
			echo "$id" >"$stamp"
			log "import: $name (${id:7:12}) imported ($(($(now_ms) - t0)) ms)"
		fi
		grep -qxF "$name" "$STATE/images.list" 2>/dev/null || echo "$name" >>"$STATE/images.list"
		done+=("$name")
	done
	# The kubelet lists a node's images in its status, which is how the
	# bridge checks that its runner is there: wait until it shows these
	# (it reports within its status period, 10 s) when the node is up.
	local kubectl
	kubectl=$(bash "$KUBE_DIR/build.sh")/kubectl
	if ((${#done[@]} > 0)) && [ -r "$ADMIN_KUBECONFIG" ] &&
		"$kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --cache-dir "$KUBECTL_CACHE" get node "$NODE_NAME" >/dev/null 2>&1; then
		local shown t1
		t1=$(now_ms)
		for name in "${done[@]}"; do
			for _ in $(seq 1 120); do
				shown=$("$kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --cache-dir "$KUBECTL_CACHE" get node "$NODE_NAME" \
					-o jsonpath='{range .status.images[*]}{range .names[*]}{@}{"\n"}{end}{end}' 2>/dev/null || true)
				grep -qxF "$name" <<<"$shown" && break
				sleep 0.5
			done
			grep -qxF "$name" <<<"$shown" || die "import: node $NODE_NAME does not list $name in its status after 60 s"
		done
		log "import: node $NODE_NAME lists the images ($(($(now_ms) - t1)) ms)"
	fi
	# kube.env lists the images (when up.sh wrote it already).
	if [ -w "$KUBE_ENV" ] && ((${#done[@]} > 0)); then
		sed -i "s|^export BRIDGE_KUBE_IMAGES=.*|export BRIDGE_KUBE_IMAGES=\"$(xargs <"$STATE/images.list")\"|" "$KUBE_ENV"
	fi
}

# rss PID: the process's resident set in MiB (one decimal).
rss() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null; }

cmd_mem() {
	[ -r "$KUBE_ENV" ] || die "no $KUBE_ENV: the cluster is not up (make kube-up)"
	local c r pid total=0 v
	printf '%-24s %8s %10s\n' process PID "RSS MiB"
	for c in "${COMPONENTS[@]}"; do
		r=$(env_get "BRIDGE_KUBE_PID_$(echo "$c" | tr 'a-z-' 'A-Z_')")
		pid=${r%%:*}
		if [ -n "$pid" ] && [ "$(start_time "$pid" 2>/dev/null)" = "${r#*:}" ]; then
			v=$(rss "$pid")
			printf '%-24s %8s %10s\n' "$c" "$pid" "$v"
			total=$(awk -v a="$total" -v b="$v" 'BEGIN { printf "%.1f", a + b }')
		else
			printf '%-24s %8s %10s\n' "$c" - "not running"
		fi
	done
	printf '%-24s %8s %10s\n' total "" "$total"
	# The shims (one per pod) are the pods' cost, not the control plane's.
	local shims=0 n=0
	for pid in $(pgrep -x containerd-shim 2>/dev/null); do
		grep -qF "$CTRD_SOCK" "/proc/$pid/cmdline" 2>/dev/null || continue
		shims=$(awk -v a="$shims" -v b="$(rss "$pid")" 'BEGIN { printf "%.1f", a + b }')
		n=$((n + 1))
	done
	printf '%-24s %8s %10s\n' "(shims, per pod)" "$n" "$shims"
}

cmd_status() {
	if [ ! -r "$KUBE_ENV" ]; then
		log "not up (no $KUBE_ENV)"
		return 1
	fi
	cmd_mem
	echo
	local kubectl=("$(env_get BRIDGE_KUBE_KUBECTL)" --kubeconfig "$(env_get KUBECONFIG)" --cache-dir "$KUBECTL_CACHE")
	"${kubectl[@]}" get nodes -o wide
	"${kubectl[@]}" get pods -A -o wide
}

cmd_chains() {
	local fam tool
	for fam in ip ip6; do
		for tool in "${fam}tables-nft" "${fam}tables-legacy"; do
			command -v "$tool-save" >/dev/null || continue
			# Reading legacy tables would load their kernel modules: only when
			# something uses them already.
			if [[ $tool == *-legacy ]] && [ ! -e "/proc/net/${fam}_tables_names" ]; then
				continue
			fi
			"$tool-save" 2>/dev/null | awk -v t="$tool" '/^\*/ { table = substr($0, 2) } /^:/ { print t, table, substr($1, 2) }'
		done
	done
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
build) bash "$KUBE_DIR/build.sh" "$@" >/dev/null ;;
up) exec bash "$KUBE_DIR/up.sh" "$@" ;;
down) exec bash "$KUBE_DIR/down.sh" "$@" ;;
check) exec bash "$KUBE_DIR/down.sh" --check ;;
import)
	[ $# -ge 1 ] || usage
	cmd_import "$@"
	;;
mem) cmd_mem ;;
status) cmd_status ;;
chains) cmd_chains ;;
-h | --help | help) usage ;;
*) usage ;;
esac
