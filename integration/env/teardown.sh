#!/usr/bin/env bash
# Stops the daemons that setup.sh started, and only those: their PIDs (with
# start times, so a reused PID is never hit) are in /run/bridge-test/env.
# Engines that were already running when setup.sh ran are left alone.
# `make test` calls this on exit when CI=true; on a developer machine the
# engines stay up for the next run.
set -euo pipefail

# shellcheck source=integration/env/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENV_FILE=/run/bridge-test/env
WAIT_SECONDS=${BRIDGE_WAIT_SECONDS:-30}

log() { printf 'teardown: %s\n' "$*" >&2; }

[ -r "$ENV_FILE" ] || {
	log "no $ENV_FILE: nothing to stop"
	exit 0
}


# stop NAME VAR COMM: stops the daemon recorded in the env file as VAR, with
# its whole process group. setup.sh starts each daemon under setsid, so the
# group is the daemon's own (PGID = its PID) and holds what it forked that did
# not leave it: rootless Podman re-executes itself inside the user namespace,
# and that child (also called COMM), not the parent, serves the socket.
stop() {
	local name=$1 var=$2 comm=$3 rec pid st
	rec=$(sed -n "s/^$var=//p" "$ENV_FILE")
	if [ -z "$rec" ]; then
		log "$name: not started by setup.sh, left running"
		return 0
	fi
	pid=${rec%%:*} st=${rec#*:}
	# Whose group it is: the leader's start time guards against a reused PID.
	# With the leader gone, only processes called COMM left in the group are
	# taken for the daemon's.
	local targets=()
	if [ "$(start_time "$pid" 2>/dev/null || true)" = "$st" ]; then
		targets=("-$pid")
	else
		mapfile -t targets < <(pgrep -g "$pid" -x "$comm" || true)
	fi
	if ((${#targets[@]} == 0)); then
		log "$name (PID $pid): already gone"
	else
		local t0 deadline
		t0=$(date +%s%3N)
		deadline=$((SECONDS + WAIT_SECONDS))
		kill -TERM -- "${targets[@]}" 2>/dev/null || true
		while pgrep -g "$pid" -x "$comm" >/dev/null 2>&1 || kill -0 -- "${targets[@]}" 2>/dev/null; do
			if ((SECONDS >= deadline)); then
				log "$name (PID $pid): still running after ${WAIT_SECONDS}s, sending SIGKILL"
				kill -KILL -- "${targets[@]}" 2>/dev/null || true
				break
			fi
			sleep 0.1
		done
		log "$name (PID $pid): stopped ($(($(date +%s%3N) - t0)) ms)"
	fi
	# Forget it, so a later teardown does not look for it again.
	sed -i "s/^$var=.*/$var=/" "$ENV_FILE"
}

# Reverse order of start-up.
stop "rootless podman service" BRIDGE_SETUP_ROOTLESS_PODMAN_PID podman
stop "podman service" BRIDGE_SETUP_PODMAN_PID podman
stop dockerd BRIDGE_SETUP_DOCKERD_PID dockerd
