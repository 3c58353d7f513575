#!/usr/bin/env bash
# Stops the daemons that setup.sh started, and only those: their PIDs (with
# start times, so a reused PID is never hit) are in /run/bridge-test/env.
# Engines that were already running when setup.sh ran are left alone. The
# Kubernetes test cluster (make kube-up) is taken down first.
# `make test` calls this on exit when CI=true; on a developer machine the
# engines stay up for the next run.
set -euo pipefail

# shellcheck source=integration/env/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENV_FILE=/run/bridge-test/env
WAIT_SECONDS=${BRIDGE_WAIT_SECONDS:-30}

log() { printf 'teardown: %s\n' "$*" >&2; }

# The Kubernetes test cluster first (integration/kube; make kube-up), when
# it is up or was left half up: it runs on its own containerd, not on these
# engines, but its down also restores what it changed on the host. A failure
# there does not keep the engines running; it fails this script at the end.
KUBE_RC=0
if [ -e /run/bridge-test/kube.env ] || [ -e /run/bridge-kube ]; then
	bash "$(dirname "${BASH_SOURCE[0]}")/../kube/kube.sh" down || KUBE_RC=$?
fi

[ -r "$ENV_FILE" ] || {
	log "no $ENV_FILE: nothing to stop"
	exit "$KUBE_RC"
}


# Reverse order of start-up.
stop_daemon "rootless podman service" BRIDGE_SETUP_ROOTLESS_PODMAN_PID podman
stop_daemon "podman runsc service" BRIDGE_SETUP_PODMAN_RUNSC_PID podman
stop_daemon "podman service" BRIDGE_SETUP_PODMAN_PID podman
stop_daemon dockerd BRIDGE_SETUP_DOCKERD_PID dockerd
if [ "$KUBE_RC" -ne 0 ]; then
	log "the Kubernetes test cluster's down failed (above): see integration/kube/README.md"
	exit "$KUBE_RC"
fi
