#!/usr/bin/env bash
# down.sh [--check]: stops the test cluster that up.sh started and undoes
# what it changed on the host, then checks that nothing is left. Run as
# root; `make kube-down` and integration/env/teardown.sh run it.
#
#   1. pods: kube-controller-manager and kube-scheduler stopped (nothing
#      recreates pods), every pod deleted, so the kubelet stops their
#      containers and tears their network down
#   2. the kubelet, then kube-apiserver, then etcd
#   3. containerd, after killing any container still running; then its
#      shims and any process left in the kubepods cgroups; the sockets of
#      killed shims in /run/containerd/s
#   4. mounts under the cluster's own directories (deepest first), then
#      /var/lib/bridge-kube
#   5. the pods' bridge (and any macvlan on it), the kubepods cgroups
#      (every controller, leaf first, empty ones only), what the kubelet and
#      libcni left outside our directories (/var/log/containers links,
#      /var/lib/cni results, /var/lib/kubelet when up.sh found none), the
#      /etc/hosts line for the node, the iptables chains the kubelet added
#      (KUBE-* chains that were not there before up.sh)
#   6. the sysctls the kubelet set, back to the values up.sh saved
#   7. the check: no process, mount, interface, cgroup, chain, changed
#      sysctl or file of ours left; exits 1 and says what when something
#      is; then /run/bridge-kube and kube.env go
#
# The binaries' cache (/var/cache/bridge-kube) and the logs
# (/var/log/bridge-kube) stay. Idempotent: with nothing up it only checks.
# --check: only the check.
set -euo pipefail

log() { printf 'kube-down: %s\n' "$*" >&2; }
# shellcheck source=integration/kube/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CHECK_ONLY=
case ${1:-} in
--check) CHECK_ONLY=1 ;;
"") ;;
*) die "usage: down.sh [--check]" ;;
esac
need_root down.sh kube-down

mkdir -p "$ENV_DIR"
if [ "${BRIDGE_KUBE_LOCKED:-}" != 1 ]; then
	flock -n "$ENV_DIR/kube.lock" true || log "waiting for another kube-up/kube-down (lock $ENV_DIR/kube.lock)"
	exec env BRIDGE_KUBE_LOCKED=1 flock -o -w 900 "$ENV_DIR/kube.lock" bash "${BASH_SOURCE[0]}" "$@"
fi

T_START=$(now_ms)
PIDS=$RUN/pids
STOP_SECONDS=${BRIDGE_KUBE_STOP_SECONDS:-30}

# rec NAME: "PID:STARTTIME" of component NAME as up.sh recorded it.
rec() {
	local r=
	[ -r "$PIDS" ] && r=$(sed -n "s/^$1=//p" "$PIDS" | tail -n 1)
	[ -n "$r" ] || r=$(env_get "BRIDGE_KUBE_PID_$(echo "$1" | tr 'a-z-' 'A-Z_')")
	echo "$r"
}

# ours: "PID NAME" of every process of this cluster that runs: the daemons
# (a component's name, and a command line that names our directories: a
# kube-apiserver or etcd of another set-up, envtest's say, does not),
# containerd's shims for our socket, and whatever runs in the kubepods
# cgroups.
ours() {
	local d pid cmd comm
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		comm=$(cat "$d/comm" 2>/dev/null) || continue
		case $comm in
		containerd | containerd-shim | etcd | kube-apiserver | kube-controller | kube-scheduler | kubelet) ;;
		*) continue ;;
		esac
		cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
		case " $cmd " in
		*" $STATE/"* | *"=$STATE/"* | *" $RUN/"* | *"=$RUN/"*) echo "$pid $comm" ;;
		esac
	done
	local m
	for m in $(cgroup_mounts); do
		[ -d "$m/kubepods" ] || continue
		find "$m/kubepods" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r pid; do
			echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null)"
		done
	done
}

cgroup_mounts() { findmnt -rn -t cgroup,cgroup2 -o TARGET; }

# running PID...: true while one of the processes runs. A zombie does not:
# what reaps the daemons (they outlive up.sh, so init does) may take a
# second or two to.
running() {
	local pid st
	for pid in "$@"; do
		st=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
		st=${st##*) }
		[ "${st%% *}" = Z ] || return 0
	done
	return 1
}

# stop NAME...: stops the components NAME... together (SIGTERM, then SIGKILL
# after STOP_SECONDS): the processes up.sh recorded, if they still are
# those processes, and any other process of ours with those names.
stop() {
	local name r pid st comm targets=() t0
	for name in "$@"; do
		r=$(rec "$name")
		if [ -n "$r" ]; then
			pid=${r%%:*} st=${r#*:}
			[ "$(start_time "$pid" 2>/dev/null || true)" != "$st" ] || targets+=("$pid")
		fi
		while read -r pid comm; do
			[ "$comm" = "${name:0:15}" ] && [[ " ${targets[*]} " != *" $pid "* ]] && targets+=("$pid")
		done < <(ours)
	done
	if ((${#targets[@]} == 0)); then
		return 0
	fi
	t0=$(now_ms)
	kill -TERM "${targets[@]}" 2>/dev/null || true
	local deadline=$((SECONDS + STOP_SECONDS))
	while running "${targets[@]}"; do
		if ((SECONDS >= deadline)); then
			log "$* (PID ${targets[*]}): still running after ${STOP_SECONDS}s, sending SIGKILL"
			kill -KILL "${targets[@]}" 2>/dev/null || true
			sleep 0.2
			break
		fi
		sleep 0.05
	done
	log "$* (PID ${targets[*]}): stopped ($(($(now_ms) - t0)) ms)"
}

# mounts_under: mount points under the cluster's directories, deepest first.
mounts_under() {
	findmnt -rn -o TARGET | awk -v s="$STATE" -v r="$RUN" \
		'index($0, s "/") == 1 || $0 == s || index($0, r "/") == 1 || $0 == r' | sort -r
}

# new_chains: "TOOL TABLE CHAIN" of the KUBE-* iptables chains that are
# there now and were not when up.sh ran (none when up.sh's list is gone:
# then nothing tells ours from another Kubernetes').
new_chains() {
	[ -r "$SAVED/chains" ] || return 0
	comm -13 <(sort "$SAVED/chains") <(bash "$KUBE_DIR/kube.sh" chains | sort) | awk '$3 ~ /^KUBE-/'
}

# ---------------------------------------------------------------------------
# The check: prints what is left and returns 1 when something is.
check() {
	local left=() l
	while read -r pid comm; do
		left+=("process $pid ($comm) $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | cut -c1-120)")
	done < <(ours | sort -u)
	while read -r l; do left+=("mount $l"); done < <(mounts_under)
	ip link show "$CNI_BRIDGE" >/dev/null 2>&1 && left+=("interface $CNI_BRIDGE")
	for m in $(cgroup_mounts); do
		[ -d "$m/kubepods" ] && left+=("cgroup $m/kubepods ($(find "$m/kubepods" -type d | wc -l) directories)")
	done
	while read -r l; do left+=("iptables chain $l"); done < <(new_chains)
	if [ -r "$SAVED/sysctl" ]; then
		while read -r name value; do
			[ "$(sysctl -n "$name")" = "$value" ] || left+=("sysctl $name = $(sysctl -n "$name") (was $value)")
		done <"$SAVED/sysctl"
	fi
	grep -qF "$HOSTS_MARK" /etc/hosts && left+=("/etc/hosts line for $NODE_NAME")
	for l in /var/lib/cni/results/"$CNI_NET"-*; do
		[ ! -e "$l" ] || left+=("CNI result $l")
	done
	if [ -d /var/log/containers ]; then
		while read -r l; do left+=("log link $l"); done < <(find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*")
	fi
	for l in /run/netns/cni-*; do
		[ -e "$l" ] || continue
		grep -qxF "$l" "$SAVED/netns" 2>/dev/null || left+=("network namespace $l")
	done
	[ ! -e "$STATE" ] || left+=("directory $STATE")
	if [ -r "$SAVED/absent" ]; then
		while read -r l; do
			[ ! -e "$l" ] || left+=("$l (created while up)")
		done < <(grep -xE '/var/lib/kubelet|/usr/libexec/kubernetes|/var/log/pods' "$SAVED/absent")
	fi
	if ((${#left[@]} == 0)); then
		log "check: nothing left (processes, mounts, $CNI_BRIDGE, kubepods cgroups, KUBE-* chains, sysctls, /etc/hosts, netns)"
		return 0
	fi
	log "check: LEFT BEHIND:"
	for l in "${left[@]}"; do log "  $l"; done
	return 1
}

if [ -n "$CHECK_ONLY" ]; then
	check
	exit
fi

# ---------------------------------------------------------------------------
step "1/7 pods"
BIN=$(env_get BRIDGE_KUBE_BIN)
[ -n "$BIN" ] || BIN=$(bin_dir 2>/dev/null || true)
KUBECTL=("$BIN/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" --cache-dir "$KUBECTL_CACHE" --request-timeout 10s)
CTR=(ctr -a "$CTRD_SOCK" -n "$CTRD_NS")
api_up() {
	[ -x "$BIN/kubectl" ] && [ -r "$ADMIN_KUBECONFIG" ] &&
		curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$APISERVER/readyz" >/dev/null 2>&1
}
ctrd_up() { [ -S "$CTRD_SOCK" ] && timeout 5 "${CTR[@]}" version >/dev/null 2>&1; }
if api_up; then
	# Nothing may recreate what is deleted (a DaemonSet's pods, say).
	stop kube-controller-manager kube-scheduler
	n=$("${KUBECTL[@]}" get pods -A -o name 2>/dev/null | wc -l)
	if ((n > 0)); then
		"${KUBECTL[@]}" delete pods --all -A --grace-period=1 --wait=false >/dev/null 2>&1 || true
		# A pod leaves the API once the kubelet has stopped its containers.
		deadline=$((SECONDS + STOP_SECONDS))
		while [ -n "$("${KUBECTL[@]}" get pods -A -o name 2>/dev/null)" ]; do
			if ((SECONDS >= deadline)) || ! alive "$(rec kubelet)" kubelet; then
				log "$STEP_NAME: pods still there after ${STOP_SECONDS}s (or no kubelet): removing them from the API; their containers are killed below"
				"${KUBECTL[@]}" delete pods --all -A --grace-period=0 --force >/dev/null 2>&1 || true
				break
			fi
			sleep 0.2
		done
		# Then the kubelet stops the pods' sandboxes (CNI teardown).
		deadline=$((SECONDS + 15))
		while ctrd_up && [ -n "$("${CTR[@]}" tasks ls -q 2>/dev/null)" ] && ((SECONDS < deadline)); do
			sleep 0.2
		done
	fi
	step_done "deleted $n pods"
else
	step_done "no API server answers: nothing to delete"
fi

# ---------------------------------------------------------------------------
step "2/7 kubelet and control plane"
stop kubelet
stop kube-controller-manager kube-scheduler
# The API server before etcd: stopped together, it waits for etcd for 30 s.
stop kube-apiserver
stop etcd
step_done "stopped"

# ---------------------------------------------------------------------------
step "3/7 containerd"
msg=()
# shim_ids: the IDs of the shims containerd started (one per pod sandbox):
# the shims' sockets sit in the global /run/containerd/s (containerd 1.6
# does not place them under its state directory), named by a hash of our
# socket, the namespace and the ID; a shim that is killed leaves its socket.
shim_ids() {
	ls "$CTRD_STATE/io.containerd.runtime.v2.task/$CTRD_NS" 2>/dev/null || true
	ls "$CTRD_ROOT/io.containerd.grpc.v1.cri/sandboxes" 2>/dev/null || true
	local pid
	for pid in $(pgrep -x containerd-shim 2>/dev/null); do
		grep -qxF "$CTRD_SOCK" <<<"$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null)" || continue
		tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n '/^-id$/{n;p}'
	done
}
mapfile -t SHIM_IDS < <(shim_ids | sort -u)
if ctrd_up; then
	mapfile -t tasks < <("${CTR[@]}" tasks ls -q 2>/dev/null)
	if ((${#tasks[@]} > 0)); then
		for t in "${tasks[@]}"; do
			"${CTR[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
		done
		sleep 0.5
		for t in "${tasks[@]}"; do
			"${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1 || true
		done
		msg+=("killed ${#tasks[@]} containers still running")
	fi
fi
stop containerd
# Shims outlive containerd; processes in the kubepods cgroups outlive their
# shims. Whatever of ours still runs now is killed.
mapfile -t rest < <(ours | awk '{ print $1 }' | sort -u)
if ((${#rest[@]} > 0)); then
	kill -KILL "${rest[@]}" 2>/dev/null || true
	for _ in $(seq 100); do
		running "${rest[@]}" || break
		sleep 0.05
	done
	msg+=("killed ${#rest[@]} left-over processes (shims, containers)")
fi
step_done "stopped${msg:+; $(
	IFS=';'
	echo "${msg[*]}"
)}"

n=0
for id in "${SHIM_IDS[@]}"; do
	sock=/run/containerd/s/$(printf '%s' "$CTRD_SOCK/$CTRD_NS/$id" | sha256sum | cut -d' ' -f1)
	if [ -e "$sock" ]; then
		rm -f "$sock"
		n=$((n + 1))
	fi
done
((n == 0)) || log "$STEP_NAME: removed $n shim sockets from /run/containerd/s"

# ---------------------------------------------------------------------------
step "4/7 mounts and directories"
n=0
while read -r m; do
	[ -n "$m" ] || continue
	# findmnt -r writes blanks and the like as \xNN.
	m=$(printf '%b' "$m")
	umount "$m" 2>/dev/null || umount -l "$m" || log "$STEP_NAME: could not unmount $m"
	n=$((n + 1))
done < <(mounts_under)
if [ -n "$(mounts_under)" ]; then
	mounts_under | sed 's/^/  /' >&2
	die "mounts are left under $STATE or $RUN (above): not removing those directories, which would reach into the mounted trees"
fi
# Nothing is mounted under them, so nothing outside them can be reached.
had=
[ ! -e "$STATE" ] || had=1
rm -rf --one-file-system "$STATE"
step_done "unmounted $n${had:+; removed $STATE}"

# ---------------------------------------------------------------------------
step "5/7 network, cgroups, files, iptables"
msg=()
# The pods' bridge; deleting it deletes any macvlan interface left on it.
if ip link show "$CNI_BRIDGE" >/dev/null 2>&1; then
	ip link delete "$CNI_BRIDGE"
	msg+=("deleted $CNI_BRIDGE")
fi
for ns in /run/netns/cni-*; do
	[ -e "$ns" ] || continue
	# Only those up.sh did not see (none without its list).
	[ -r "$SAVED/netns" ] || continue
	grep -qxF "$ns" "$SAVED/netns" && continue
	umount "$ns" 2>/dev/null || true
	rm -f "$ns"
	msg+=("removed $ns")
done
nc=0
for m in $(cgroup_mounts); do
	[ -d "$m/kubepods" ] || continue
	# Leaf first; rmdir refuses a cgroup that still has processes or children.
	while read -r d; do
		rmdir "$d" 2>/dev/null && nc=$((nc + 1))
	done < <(find "$m/kubepods" -depth -type d)
done
((nc == 0)) || msg+=("removed $nc kubepods cgroups")
if [ -d /var/log/containers ]; then
	nl=$(find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" | wc -l)
	find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete
	((nl == 0)) || msg+=("removed $nl /var/log/containers links")
fi
# libcni's cache of results (its directory is not configurable through
# containerd 1.6): our network's, and the loopback's of our sandboxes. Both
# are gone after a clean CNI teardown.
nr=0
for f in /var/lib/cni/results/"$CNI_NET"-*-eth0; do
	[ -e "$f" ] || continue
	id=${f#/var/lib/cni/results/"$CNI_NET"-}
	id=${id%-eth0}
	rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
	nr=$((nr + 1))
done
for id in "${SHIM_IDS[@]}"; do
	f=/var/lib/cni/results/cni-loopback-$id-lo
	[ ! -e "$f" ] || { rm -f "$f" && nr=$((nr + 1)); }
done
((nr == 0)) || msg+=("removed $nr /var/lib/cni results")
# The kubelet's device-plugin socket and checkpoint, in /var/lib/kubelet
# whatever its root directory: that tree, when up.sh found none (and nothing
# is mounted in it).
if grep -qxF /var/lib/kubelet "$SAVED/absent" 2>/dev/null && [ -d /var/lib/kubelet ]; then
	if grep -q '^/var/lib/kubelet\(/\|$\)' <<<"$(findmnt -rn -o TARGET)"; then
		log "$STEP_NAME: mounts under /var/lib/kubelet: left in place"
	else
		rm -rf --one-file-system /var/lib/kubelet
		msg+=("removed /var/lib/kubelet")
	fi
fi
# The flex-volume directory kube-controller-manager and the kubelet create
# when missing (both are pointed elsewhere; this is in case).
if grep -qxF /usr/libexec/kubernetes "$SAVED/absent" 2>/dev/null && [ -d /usr/libexec/kubernetes ]; then
	find /usr/libexec/kubernetes -depth -type d -empty -delete
	[ -e /usr/libexec/kubernetes ] || msg+=("removed /usr/libexec/kubernetes")
fi
# Directories that were not there before up.sh, when empty now.
if [ -r "$SAVED/absent" ]; then
	while read -r d; do
		[ -d "$d" ] && rmdir "$d" 2>/dev/null && msg+=("removed $d")
	done < <(sort -r "$SAVED/absent")
fi
if grep -qF "$HOSTS_MARK" /etc/hosts; then
	hosts=$(grep -vF "$HOSTS_MARK" /etc/hosts || true)
	# In place: /etc/hosts may be a bind mount.
	printf '%s\n' "$hosts" >/etc/hosts
	msg+=("removed $NODE_NAME from /etc/hosts")
fi
# The kubelet's iptables chains: rules that jump to them first, then the
# chains themselves, in one iptables-restore per tool and table.
nch=0
while read -r tool table; do
	mapfile -t chains < <(new_chains | awk -v t="$tool" -v b="$table" '$1 == t && $2 == b { print $3 }')
	{
		echo "*$table"
		"$tool-save" -t "$table" 2>/dev/null | awk -v list=" ${chains[*]} " '
			/^-A / {
				n = split($0, f, " ")
				own = index(list, " " f[2] " ") > 0
				for (i = 3; i < n; i++)
					if ((f[i] == "-j" || f[i] == "-g") && index(list, " " f[i + 1] " ") && !own) {
						sub(/^-A /, "-D "); print; break
					}
			}'
		for c in "${chains[@]}"; do echo "-F $c"; done
		for c in "${chains[@]}"; do echo "-X $c"; done
		echo COMMIT
	} | "$tool-restore" --noflush || log "$STEP_NAME: $tool-restore could not remove ${chains[*]} from table $table"
	nch=$((nch + ${#chains[@]}))
done < <(new_chains | awk '{ print $1, $2 }' | sort -u)
((nch == 0)) || msg+=("removed $nch iptables chains")
step_done "${msg[*]:-nothing to do}"

# ---------------------------------------------------------------------------
step "6/7 sysctls"
msg=()
if [ -r "$SAVED/sysctl" ]; then
	while read -r name value; do
		now=$(sysctl -n "$name")
		if [ "$now" != "$value" ]; then
			sysctl -qw "$name=$value"
			msg+=("$name $now -> $value")
		fi
	done <"$SAVED/sysctl"
fi
step_done "${msg[*]:-nothing to restore}"

# ---------------------------------------------------------------------------
step "7/7 check"
if check; then
	gone=()
	[ ! -e "$RUN" ] || gone+=("$RUN")
	[ ! -e "$KUBE_ENV" ] || gone+=("$KUBE_ENV")
	rm -rf --one-file-system "$RUN"
	rm -f "$KUBE_ENV"
	if ((${#gone[@]} > 0)); then step_done "removed ${gone[*]}"; else step_done "clean"; fi
	log "down in $(($(now_ms) - T_START)) ms"
else
	die "something is left (above): $RUN/saved is kept for another 'make kube-down'"
fi
