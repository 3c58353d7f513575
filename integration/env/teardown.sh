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


# Reverse order of start-up.
stop_daemon "rootless podman service" BRIDGE_SETUP_ROOTLESS_PODMAN_PID podman
stop_daemon "podman runsc service" BRIDGE_SETUP_PODMAN_RUNSC_PID podman
stop_daemon "podman service" BRIDGE_SETUP_PODMAN_PID podman
stop_daemon dockerd BRIDGE_SETUP_DOCKERD_PID dockerd
