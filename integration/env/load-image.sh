#!/usr/bin/env bash
# load-image.sh [--from-docker IMAGE]... IMAGE...: copies images from rootful
# Podman's store into the rootless test user's (podman save | podman load as
# that user), so rootless tests run the very image the rootful ones do. An
# image given with --from-docker is first copied from Docker's store into
# rootful Podman's (docker save | podman load): `make image` builds the
# data-science variant once, with Docker, rather than download and install
# its packages a second time. An image already there with the same ID is
# skipped. Run as root, after setup.sh.
#
# The user comes from BRIDGE_ROOTLESS_USER (else /run/bridge-test/env, else
# bridge-rootless).
set -euo pipefail

# shellcheck source=integration/env/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FROM_DOCKER=()
IMAGES=()
while [ $# -gt 0 ]; do
	case $1 in
	--from-docker)
		[ $# -ge 2 ] || {
			echo "usage: $0 [--from-docker IMAGE]... IMAGE..." >&2
			exit 2
		}
		FROM_DOCKER+=("$2")
		IMAGES+=("$2")
		shift 2
		;;
	*)
		IMAGES+=("$1")
		shift
		;;
	esac
done
[ ${#IMAGES[@]} -ge 1 ] || {
	echo "usage: $0 [--from-docker IMAGE]... IMAGE..." >&2
	exit 2
}
[ "$(id -u)" -eq 0 ] || {
	echo "load-image: must run as root (it reads rootful Podman's store)" >&2
	exit 1
}

if [ -z "${BRIDGE_ROOTLESS_USER:-}" ] && [ -r /run/bridge-test/env ]; then
	BRIDGE_ROOTLESS_USER=$(sed -n 's/^export BRIDGE_ROOTLESS_USER=//p' /run/bridge-test/env)
fi
ROOTLESS_USER=${BRIDGE_ROOTLESS_USER:-bridge-rootless}
R_UID=$(id -u "$ROOTLESS_USER") || {
	echo "load-image: no user $ROOTLESS_USER: run integration/env/setup.sh first" >&2
	exit 1
}
R_RUNTIME=/run/user/$R_UID
unset CONTAINER_HOST CONTAINER_CONNECTION


for image in "${FROM_DOCKER[@]}"; do
	t0=$(date +%s%3N)
	did=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null) || {
		echo "load-image: $image is not in Docker's store (docker images)" >&2
		exit 1
	}
	did=${did#sha256:}
	pid=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
	if [ "$pid" = "$did" ]; then
		echo "load-image: rootful Podman already has $image (${did:0:12})" >&2
		continue
	fi
	# A docker-archive keeps the image's config, so the ID stays the same.
	docker save "$image" | podman load -q >/dev/null
	echo "load-image: copied $image (${did:0:12}) from Docker into rootful Podman's store ($(($(date +%s%3N) - t0)) ms)" >&2
done

for image in "${IMAGES[@]}"; do
	t0=$(date +%s%3N)
	id=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null) || {
		echo "load-image: $image is not in rootful Podman's store (podman images)" >&2
		exit 1
	}
	have=$(as_rootless podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
	if [ "$have" = "$id" ]; then
		echo "load-image: $ROOTLESS_USER already has $image (${id:0:12})" >&2
		continue
	fi
	# podman load reads the archive from stdin; the default docker-archive
	# format keeps the image's config, so the ID stays the same.
	podman save "$image" 2>/dev/null | as_rootless podman load -q >/dev/null
	have=$(as_rootless podman image inspect --format '{{.Id}}' "$image")
	if [ "$have" != "$id" ]; then
		echo "load-image: warning: $image has ID ${have:0:12} for $ROOTLESS_USER but ${id:0:12} in rootful Podman" >&2
	fi
	echo "load-image: loaded $image (${id:0:12}) into $ROOTLESS_USER's store ($(($(date +%s%3N) - t0)) ms)" >&2
done
