#!/usr/bin/env bash
# engine.sh stop|start|owned docker|podman: stops, or starts again, one of
# the rootful engines that setup.sh started, keeping /run/bridge-test/env
# true (teardown.sh then stops the new daemon). The fault tests use it to
# take an engine away under a running bridge (integration/faults_test.go).
# An engine that setup.sh did not start is not touched: the script says so
# and exits 3; `owned` only asks (0: setup.sh started it, 3: it did not).
set -euo pipefail

# shellcheck source=integration/env/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ENV_FILE=/run/bridge-test/env
LOG_DIR=/var/log/bridge
WAIT_SECONDS=${BRIDGE_WAIT_SECONDS:-60}
DOCKER_SOCK=/var/run/docker.sock
PODMAN_SOCK=/run/podman/podman.sock

log() { printf 'engine: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

[ $# -eq 2 ] || die "usage: engine.sh stop|start|owned docker|podman"
action=$1 engine=$2
case $engine in
docker) var=BRIDGE_SETUP_DOCKERD_PID comm=dockerd name=dockerd ;;
podman) var=BRIDGE_SETUP_PODMAN_PID comm=podman name="podman service" ;;
*) die "unknown engine $engine (docker or podman)" ;;
esac
[ -w "$ENV_FILE" ] || die "no $ENV_FILE: run 'make setup' first"

owned() { [ -n "$(sed -n "s/^$var=//p" "$ENV_FILE")" ]; }

case $action in
owned)
	owned || {
		log "$name was not started by setup.sh (it ran before it)"
		exit 3
	}
	log "$name was started by setup.sh"
	;;
stop)
	if ! owned; then
		log "$name was not started by setup.sh: not stopping it"
		exit 3
	fi
	stop_daemon "$name" "$var" "$comm"
	;;
start)
	if [ "$engine" = docker ]; then
		start_dockerd
		rec=$STARTED_DOCKERD
	else
		start_podman_service
		rec=$STARTED_PODMAN
	fi
	sed -i "s/^$var=.*/$var=$rec/" "$ENV_FILE"
	log "$name started (PID ${rec%%:*})"
	;;
*) die "unknown action $action (stop, start or owned)" ;;
esac
