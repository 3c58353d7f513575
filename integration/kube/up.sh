#!/usr/bin/env bash
# up.sh [--image IMAGE]... [--optional-image IMAGE]...: starts the test
# cluster, a one-node Kubernetes on loopback, and imports the images given
# (from Docker's store) into its containerd. Run as root; `make kube-up`
# runs it with the runner images.
#
#   1. the binaries (build.sh: cached, else built from the Go module proxy)
#   2. what the cluster changes on the host, saved for down.sh: the sysctls
#      the kubelet sets, the iptables chains there are, the directories it
#      creates if missing
#   3. certificates (openssl: a CA, a serving certificate for the API server
#      and for the kubelet, a client certificate per component), kubeconfigs
#      and the components' configuration
#   4. containerd, an instance of its own (config, root, state and socket of
#      its own; Docker's and any other containerd are never touched), with
#      the sandbox image imported; then the images asked for
#   5. etcd, kube-apiserver, kube-controller-manager, kube-scheduler
#   6. the kubelet, with CNI (Debian's macvlan and host-local plugins: each
#      pod gets an address and no route anywhere, and reaches no other pod)
#   7. node Ready, the namespace bridge-runs and its default ServiceAccount
#   8. /run/bridge-test/kube.env: KUBECONFIG, the node, the sockets, the PIDs
#
# Idempotent: with the cluster up and healthy it only imports the images
# (skipping those already there); a cluster left half up (a failed start, a
# killed daemon) is taken down first. Daemons run detached (setsid, output
# in /var/log/bridge-kube/NAME.log). down.sh undoes all of it.
#
# Knobs (environment): BRIDGE_KUBE_CACHE (/var/cache/bridge-kube),
# BRIDGE_KUBE_POD_CIDR (10.213.77.0/24), BRIDGE_KUBE_NODE (bridge-node),
# BRIDGE_KUBE_WAIT_SECONDS (120).
set -euo pipefail

log() { printf 'kube-up: %s\n' "$*" >&2; }
# shellcheck source=integration/kube/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root up.sh kube-up

# One up or down at a time.
mkdir -p "$ENV_DIR"
if [ "${BRIDGE_KUBE_LOCKED:-}" != 1 ]; then
	flock -n "$ENV_DIR/kube.lock" true || log "waiting for another kube-up/kube-down (lock $ENV_DIR/kube.lock)"
	exec env BRIDGE_KUBE_LOCKED=1 flock -o -w 900 "$ENV_DIR/kube.lock" bash "${BASH_SOURCE[0]}" "$@"
fi

T_START=$(now_ms)
IMAGES=()
OPTIONAL_IMAGES=()
while [ $# -gt 0 ]; do
	case $1 in
	--image | --optional-image)
		[ $# -ge 2 ] || die "usage: up.sh [--image IMAGE]... [--optional-image IMAGE]..."
		if [ "$1" = --image ]; then IMAGES+=("$2"); else OPTIONAL_IMAGES+=("$2"); fi
		shift 2
		;;
	*) die "unknown argument $1 (usage: up.sh [--image IMAGE]... [--optional-image IMAGE]...)" ;;
	esac
done

# ---------------------------------------------------------------------------
step "1/8 binaries"
for cmd in containerd containerd-shim-runc-v2 ctr runc openssl curl ip iptables findmnt; do
	command -v "$cmd" >/dev/null ||
		die "$cmd is not on PATH: run 'make setup' (it installs containerd, runc, containernetworking-plugins, openssl, iptables)"
done
for p in macvlan host-local loopback; do
	[ -x "$CNI_SYSTEM_BIN/$p" ] ||
		die "no CNI plugin $CNI_SYSTEM_BIN/$p: run 'make setup' (Debian package containernetworking-plugins) or set BRIDGE_KUBE_CNI_PLUGINS"
done
BIN=$(bash "$KUBE_DIR/build.sh")
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl pause-image.tar; do
	[ -e "$BIN/$b" ] || die "$BIN/$b is missing: remove $(dirname "$BIN") and run 'make kube-build'"
done
PAUSE_IMAGE=$(cat "$BIN/pause-image.name")
KUBECTL=("$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --cache-dir "$KUBECTL_CACHE")
CTR=(ctr -a "$CTRD_SOCK" -n "$CTRD_NS")
step_done "$BIN"

# healthy: true when every daemon kube.env records still runs and the node
# is Ready.
healthy() {
	[ -r "$KUBE_ENV" ] || return 1
	local c var
	for c in "${COMPONENTS[@]}"; do
		var=BRIDGE_KUBE_PID_$(echo "$c" | tr 'a-z-' 'A-Z_')
		alive "$(env_get "$var")" "${c:0:15}" || return 1
	done
	[ "$("${KUBECTL[@]}" get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

import_images() {
	local args=()
	local i
	for i in "${IMAGES[@]}"; do args+=("$i"); done
	for i in "${OPTIONAL_IMAGES[@]}"; do args+=(--optional "$i"); done
	((${#args[@]} == 0)) || bash "$KUBE_DIR/kube.sh" import "${args[@]}"
}

if healthy; then
	log "the cluster is up already (node $NODE_NAME Ready; $KUBE_ENV)"
	import_images
	log "ready in $(($(now_ms) - T_START)) ms"
	exit 0
fi
if [ -e "$RUN" ] || [ -e "$STATE" ] || [ -e "$KUBE_ENV" ]; then
	log "a cluster is partly up or was not taken down: running down.sh first"
	BRIDGE_KUBE_LOCKED=1 bash "$KUBE_DIR/down.sh" || die "down.sh could not clean up what an earlier cluster left; see above"
fi

# Refuse a pod network that overlaps one this host reaches directly
# (docker0, podman's, the LAN): pods would shadow it.
probe=${POD_CIDR%/*}
probe=${probe%.*}.1
if route=$(ip route get "$probe" 2>/dev/null) && ! grep -q ' via ' <<<"$route"; then
	die "the pod network $POD_CIDR overlaps a network on this host ($(head -n 1 <<<"$route")): set BRIDGE_KUBE_POD_CIDR to a free /24"
fi
for port in $APISERVER_PORT $ETCD_CLIENT_PORT $ETCD_PEER_PORT $KUBELET_PORT 10248 10257 10259; do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		die "127.0.0.1:$port is in use already (another Kubernetes?): the test cluster needs ports $APISERVER_PORT, $ETCD_CLIENT_PORT, $ETCD_PEER_PORT, $KUBELET_PORT, 10248, 10257, 10259"
	fi
done

umask 022
mkdir -p "$STATE" "$RUN" "$LOG_DIR" "$SAVED" "$PKI" "$CONF"
# The admin kubeconfig, the keys and etcd's data: root only.
chmod 0700 "$STATE" "$PKI"
# The records of what this start did, for down.sh, as NAME=VALUE lines.
PIDS=$RUN/pids
: >"$PIDS"

# ---------------------------------------------------------------------------
step "2/8 host state"
# The sysctls the kubelet sets when it starts, as "NAME VALUE" lines.
for s in "${KUBELET_SYSCTLS[@]}"; do
	printf '%s %s\n' "$s" "$(sysctl -n "$s")"
done >"$SAVED/sysctl"
# iptables chains there are now (down.sh removes only KUBE-* chains that
# were not here), as "TOOL TABLE CHAIN" lines.
bash "$KUBE_DIR/kube.sh" chains >"$SAVED/chains"
# Network namespaces there are (containerd keeps ours under its state
# directory; down.sh checks).
for ns in /run/netns/cni-*; do [ -e "$ns" ] && echo "$ns"; done >"$SAVED/netns"
# Host paths the cluster may create: down.sh removes those that were absent.
# The kubelet's device-plugin socket is always under /var/lib/kubelet,
# whatever its root directory.
for p in /var/log/containers /var/log/pods /var/lib/cni /var/lib/cni/results /run/containerd /run/containerd/s \
	/var/lib/kubelet /usr/libexec/kubernetes; do
	[ -e "$p" ] || echo "$p"
done >"$SAVED/absent"
# The node's name must resolve to 127.0.0.1: the API server reaches the
# kubelet (logs, exec, attach) by it, and the kubelet serves on loopback only.
if ! grep -qx 127.0.0.1 <<<"$(getent ahostsv4 "$NODE_NAME" 2>/dev/null | awk '{ print $1 }')"; then
	if getent hosts "$NODE_NAME" >/dev/null 2>&1; then
		die "the node name $NODE_NAME resolves to $(getent hosts "$NODE_NAME" | head -n 1 | cut -d' ' -f1), not 127.0.0.1: set BRIDGE_KUBE_NODE to another name"
	fi
	# Appended in place (/etc/hosts may be a bind mount, which a rename
	# would fail on); down.sh removes exactly this line.
	printf '127.0.0.1 %s %s\n' "$NODE_NAME" "$HOSTS_MARK" >>/etc/hosts
	echo "HOSTS_LINE=1" >>"$PIDS"
fi
step_done "saved $(wc -l <"$SAVED/sysctl") sysctls, $(wc -l <"$SAVED/chains") iptables chains; $NODE_NAME resolves to 127.0.0.1"

# ---------------------------------------------------------------------------
step "3/8 certificates and configs"
# EC P-256 keys: fast to make (RSA keys would take a second or two), and
# every component takes them, service-account tokens included.
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI/$1.key" 2>/dev/null; }
# cert NAME SUBJECT EXTENSIONS: a certificate signed by the CA.
cert() {
	local name=$1 subj=$2 ext=$3
	key "$name"
	openssl req -new -key "$PKI/$name.key" -subj "$subj" 2>/dev/null |
		openssl x509 -req -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
			-days 3650 -extfile <(printf '%s\n' "$ext") -out "$PKI/$name.crt" 2>/dev/null ||
		die "openssl could not sign $name"
}
server_ext() { printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s' "$1"; }
CLIENT_EXT=$'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'

key ca
openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=bridge-kube-ca" -days 3650 \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
	-out "$PKI/ca.crt" 2>/dev/null || die "openssl could not make the CA"
cert apiserver "/CN=kube-apiserver" "$(server_ext "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$SERVICE_IP")"
cert etcd "/CN=etcd" "$(server_ext "DNS:localhost,IP:127.0.0.1")"
cert kubelet-serving "/CN=$NODE_NAME" "$(server_ext "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1")"
# Client certificates: the user is the CN, the groups the O's (RBAC).
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" "$CLIENT_EXT"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$CLIENT_EXT"
cert admin "/O=system:masters/CN=bridge-kube-admin" "$CLIENT_EXT"
cert controller-manager "/CN=system:kube-controller-manager" "$CLIENT_EXT"
cert scheduler "/CN=system:kube-scheduler" "$CLIENT_EXT"
cert kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$CLIENT_EXT"
# The service-account token key pair.
key sa
openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
chmod 0600 "$PKI"/*.key

# kubeconfig NAME: $CONF/NAME.kubeconfig with the client certificate NAME
# (admin: $ADMIN_KUBECONFIG).
kubeconfig() {
	local out=$CONF/$1.kubeconfig
	[ "$1" != admin ] || out=$ADMIN_KUBECONFIG
	cat >"$out" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bridge-kube
  cluster:
    server: $APISERVER
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $PKI/$1.crt
    client-key: $PKI/$1.key
contexts:
- name: bridge-kube
  context:
    cluster: bridge-kube
    user: $1
current-context: bridge-kube
EOF
	chmod 0600 "$out"
}
for k in admin controller-manager scheduler kubelet; do kubeconfig "$k"; done

mkdir -p "$CTRD_ROOT" "$CTRD_STATE" "$CNI_CONF_DIR" "$CNI_BIN_DIR" "$CNI_DATA_DIR" "$KUBELET_ROOT" "$STATE/pod-logs"
for p in macvlan host-local loopback; do ln -sfn "$CNI_SYSTEM_BIN/$p" "$CNI_BIN_DIR/$p"; done

cat >"$CTRD_CONFIG" <<EOF
# containerd for the bridge test cluster (integration/kube/up.sh): an instance
# of its own, sharing nothing with Docker's containerd or a system one.
version = 2
root = "$CTRD_ROOT"
state = "$CTRD_STATE"
oom_score = 0
# Snapshotters this host cannot use, and that would only log errors.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$CTRD_SOCK"

[ttrpc]
  address = "$CTRD_SOCK.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$CTRD_ROOT/opt"

  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # runc cannot set the sandbox's oom_score_adj (-998) without
    # CAP_SYS_RESOURCE, which processes here lack ("can't get final child's
    # PID from pipe: EOF"): keep every container's at or above containerd's.
    restrict_oom_score_adj = true
    # Network namespaces under our state directory, not /run/netns.
    netns_mounts_under_state_dir = true
    # Loading containerd's AppArmor profile would leave it in the kernel.
    disable_apparmor = true
    enable_selinux = false
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    max_container_log_line_size = 16384

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          # cgroupfs, as the kubelet's cgroupDriver (no systemd here).
          SystemdCgroup = false
          # runc's state of our containers, apart from other containerds'.
          Root = "$RUN/runc"

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$CNI_BIN_DIR"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
EOF

# The pods' network: each pod gets a macvlan interface, in "private" mode,
# on a bridge of ours that has no address and no ports, and an address from
# $POD_CIDR with no route off it. Private: a pod reaches no other pod (with
# the bridge plugin the pods share one L2 segment, and only Docker's
# FORWARD DROP policy with br_netfilter happens to stop pod-to-pod traffic);
# no address and no ports: nothing reaches the host or beyond.
if ! ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
	ip link add "$CNI_BRIDGE" type bridge
fi
ip link set "$CNI_BRIDGE" up
cat >"$CNI_CONF_DIR/10-$CNI_NET.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "macvlan",
      "master": "$CNI_BRIDGE",
      "mode": "private",
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR" }]],
        "dataDir": "$CNI_DATA_DIR"
      }
    }
  ]
}
EOF

cat >"$CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Serves on loopback only; the API server reaches it as $NODE_NAME.
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$CTRD_SOCK
cgroupDriver: cgroupfs
# cgroup v1 is deprecated; the hosts this runs on have it.
failCgroupV1: false
failSwapOn: false
# Else it adds KUBE-FIREWALL and friends to the host's iptables.
makeIPTablesUtilChains: false
# Every pod: at most 128 processes.
podPidsLimit: 128
podLogsDir: $STATE/pod-logs
volumePluginDir: $KUBELET_ROOT/volume-plugins
# No image can be pulled here: never garbage-collect one.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A shared test machine's disk and memory are not the node's to guard: evict
# only at the edge, so pods are not refused for a full-ish disk.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
registerNode: true
rotateCertificates: false
serverTLSBootstrap: false
shutdownGracePeriod: 0s
resolvConf: ""
EOF

step_done "$PKI, $CONF; pods on $POD_CIDR (macvlan, private, on $CNI_BRIDGE)"

# start NAME CMD...: runs CMD detached (own session and process group,
# output in $LOG_DIR/NAME.log), records "NAME=PID:STARTTIME" in $PIDS and
# sets WATCH to a PID that lives as long as the daemon.
start() {
	local name=$1 rec
	shift
	local logf=$LOG_DIR/$name.log
	: >"$logf"
	setsid -w sh -c "$PIDFILE_WRAPPER" "$RUN/$name.pid" "$@" >>"$logf" 2>&1 </dev/null &
	WATCH=$!
	rec=$(read_pidfile "$RUN/$name.pid")
	echo "$name=$rec" >>"$PIDS"
}

# wait_for NAME LOG CMD...: waits until CMD succeeds; fails fast, with the
# log's tail, when the daemon (WATCH) exits, or after WAIT_SECONDS.
wait_for() {
	local name=$1 logf=$2
	shift 2
	local deadline=$((SECONDS + WAIT_SECONDS))
	until "$@" >/dev/null 2>&1; do
		if ! kill -0 "$WATCH" 2>/dev/null; then
			log "$name exited during start-up; last lines of $logf:"
			tail -n 30 "$logf" >&2 || true
			die "$name did not start: see $logf; 'make kube-down' cleans up"
		fi
		if ((SECONDS >= deadline)); then
			log "$name not ready after ${WAIT_SECONDS}s; last lines of $logf:"
			tail -n 30 "$logf" >&2 || true
			die "$name did not become ready: see $logf; 'make kube-down' cleans up"
		fi
		sleep 0.1
	done
}

# ---------------------------------------------------------------------------
step "4/8 containerd"
start containerd containerd --config "$CTRD_CONFIG"
wait_for containerd "$LOG_DIR/containerd.log" "${CTR[@]}" version
"${CTR[@]}" images import "$BIN/pause-image.tar" >/dev/null ||
	die "could not import the sandbox image $BIN/pause-image.tar into containerd"
step_done "PID $(sed -n 's/^containerd=\([0-9]*\):.*/\1/p' "$PIDS"), socket $CTRD_SOCK; imported $PAUSE_IMAGE"

# The images, in the background while the control plane starts.
IMPORT_LOG=$LOG_DIR/import.log
import_images >"$IMPORT_LOG" 2>&1 &
IMPORT_PID=$!

# ---------------------------------------------------------------------------
step "5/8 control plane"
ETCD_URL=https://127.0.0.1:$ETCD_CLIENT_PORT
# A test cluster's etcd: no fsync (its data is thrown away at kube-down).
start etcd "$BIN/etcd" --name bridge-kube --data-dir "$ETCD_DATA" \
	--listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "bridge-kube=http://127.0.0.1:$ETCD_PEER_PORT" \
	--cert-file "$PKI/etcd.crt" --key-file "$PKI/etcd.key" \
	--client-cert-auth --trusted-ca-file "$PKI/ca.crt" \
	--unsafe-no-fsync --log-level warn
wait_for etcd "$LOG_DIR/etcd.log" curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/apiserver-etcd-client.crt" \
	--key "$PKI/apiserver-etcd-client.key" "$ETCD_URL/health"

# --endpoint-reconciler-type=none: the reconciler refuses a loopback
# advertise address (the "kubernetes" Service has no endpoints, which pods
# without a network do not miss). The kubelet is reached by host name.
start kube-apiserver "$BIN/kube-apiserver" \
	--bind-address 127.0.0.1 --secure-port "$APISERVER_PORT" --advertise-address 127.0.0.1 \
	--endpoint-reconciler-type none \
	--etcd-servers "$ETCD_URL" --etcd-cafile "$PKI/ca.crt" \
	--etcd-certfile "$PKI/apiserver-etcd-client.crt" --etcd-keyfile "$PKI/apiserver-etcd-client.key" \
	--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
	--client-ca-file "$PKI/ca.crt" \
	--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
	--kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority "$PKI/ca.crt" \
	--kubelet-preferred-address-types Hostname \
	--service-account-issuer https://kubernetes.default.svc \
	--service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
	--service-cluster-ip-range "$SERVICE_CIDR" \
	--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction --allow-privileged=true \
	--cert-dir "$STATE/apiserver" --profiling=false
wait_for kube-apiserver "$LOG_DIR/kube-apiserver.log" curl -fsS --cacert "$PKI/ca.crt" \
	--cert "$PKI/admin.crt" --key "$PKI/admin.key" "$APISERVER/readyz"

start kube-controller-manager "$BIN/kube-controller-manager" \
	--kubeconfig "$CONF/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$CONF/controller-manager.kubeconfig" \
	--authorization-kubeconfig "$CONF/controller-manager.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
	--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
	--flex-volume-plugin-dir "$KUBELET_ROOT/volume-plugins" \
	--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
	--profiling=false
CM_WATCH=$WATCH
start kube-scheduler "$BIN/kube-scheduler" \
	--kubeconfig "$CONF/scheduler.kubeconfig" \
	--authentication-kubeconfig "$CONF/scheduler.kubeconfig" \
	--authorization-kubeconfig "$CONF/scheduler.kubeconfig" \
	--bind-address 127.0.0.1 --leader-elect=false --profiling=false
SCHED_WATCH=$WATCH
step_done "etcd, kube-apiserver ($APISERVER), kube-controller-manager, kube-scheduler"

# ---------------------------------------------------------------------------
step "6/8 kubelet"
start kubelet "$BIN/kubelet" --config "$CONF/kubelet.yaml" --kubeconfig "$CONF/kubelet.kubeconfig" \
	--root-dir "$KUBELET_ROOT" --cert-dir "$KUBELET_ROOT/pki" --hostname-override "$NODE_NAME"
KUBELET_WATCH=$WATCH
wait_for kubelet "$LOG_DIR/kubelet.log" curl -fsS http://127.0.0.1:10248/healthz
step_done "PID $(sed -n 's/^kubelet=\([0-9]*\):.*/\1/p' "$PIDS"), root $KUBELET_ROOT"

# ---------------------------------------------------------------------------
step "7/8 node Ready"
node_ready() {
	[ "$("${KUBECTL[@]}" get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}
wait_for "kubelet (node $NODE_NAME Ready)" "$LOG_DIR/kubelet.log" node_ready
"${KUBECTL[@]}" create namespace "$RUN_NAMESPACE" >/dev/null
WATCH=$CM_WATCH
wait_for "kube-controller-manager (default ServiceAccount in $RUN_NAMESPACE)" "$LOG_DIR/kube-controller-manager.log" \
	"${KUBECTL[@]}" -n "$RUN_NAMESPACE" get serviceaccount default
wait_for "kube-controller-manager (default ServiceAccount in default)" "$LOG_DIR/kube-controller-manager.log" \
	"${KUBECTL[@]}" -n default get serviceaccount default
for w in "$SCHED_WATCH" "$KUBELET_WATCH"; do
	kill -0 "$w" 2>/dev/null || die "a daemon exited after start-up: see $LOG_DIR; 'make kube-down' cleans up"
done
step_done "node $NODE_NAME Ready, namespace $RUN_NAMESPACE"
T_READY=$(now_ms)

IMPORT_OK=1
wait "$IMPORT_PID" || IMPORT_OK=
cat "$IMPORT_LOG" >&2

# ---------------------------------------------------------------------------
step "8/8 env file"
rec() { sed -n "s/^$1=//p" "$PIDS"; }
tmp=$(mktemp "$ENV_DIR/kube.env.XXXXXX")
{
	cat <<EOF
# Written by integration/kube/up.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ): the test cluster
# (Kubernetes $KUBE_VERSION, one node on loopback). Source it:
#   . $KUBE_ENV
# The admin kubeconfig (root only).
export KUBECONFIG=$ADMIN_KUBECONFIG
# kubectl's discovery cache (else in \$HOME/.kube/cache).
export KUBECACHEDIR=$KUBECTL_CACHE
export BRIDGE_KUBE_KUBECONFIG=$ADMIN_KUBECONFIG
export BRIDGE_KUBE_APISERVER=$APISERVER
export BRIDGE_KUBE_CA=$PKI/ca.crt
export BRIDGE_KUBE_NODE=$NODE_NAME
# The kubelet's root: the bridge installs its seccomp profile under it.
export BRIDGE_KUBELET_DIR=$KUBELET_ROOT
export BRIDGE_KUBE_NAMESPACE=$RUN_NAMESPACE
export BRIDGE_KUBE_VERSION=$KUBE_VERSION
# The cluster's own containerd (CRI namespace $CTRD_NS): images go in with
# integration/kube/kube.sh import IMAGE...
export BRIDGE_KUBE_CONTAINERD=$CTRD_SOCK
export BRIDGE_KUBE_CONTAINERD_NAMESPACE=$CTRD_NS
export BRIDGE_KUBE_KUBECTL=$BIN/kubectl
export BRIDGE_KUBE_BIN=$BIN
export BRIDGE_KUBE_POD_CIDR=$POD_CIDR
export BRIDGE_KUBE_PAUSE_IMAGE=$PAUSE_IMAGE
# Images imported from Docker's store (space-separated).
export BRIDGE_KUBE_IMAGES="$(xargs 2>/dev/null <"$STATE/images.list" || true)"
# Daemons this start ran, as PID:STARTTIME (field 22 of /proc/PID/stat).
EOF
	for c in "${COMPONENTS[@]}"; do
		echo "BRIDGE_KUBE_PID_$(echo "$c" | tr 'a-z-' 'A-Z_')=$(rec "$c")"
	done
} >"$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$KUBE_ENV"
step_done "wrote $KUBE_ENV"

# The cluster is up and kube.env says so: a failed import is fixed with
# kube.sh import (or another make kube-up, which only imports).
[ -n "$IMPORT_OK" ] ||
	die "importing the images failed (above; log $IMPORT_LOG): the cluster is up; fix, then run 'integration/kube/kube.sh import IMAGE...' or 'make kube-up' again"

log "node Ready in $((T_READY - T_START)) ms; ready (images imported) in $(($(now_ms) - T_START)) ms"
