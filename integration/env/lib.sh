# shellcheck shell=bash
# Shell functions shared by setup.sh, teardown.sh and load-image.sh. Sourced,
# not run.

# start_time PID: the process's start time in clock ticks since boot (field
# 22 of /proc/PID/stat), which together with the PID names a process even if
# the PID is later reused.
start_time() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	# Fields after the command name, which sits in parentheses and may hold spaces.
	stat=${stat##*) }
	# shellcheck disable=SC2086
	set -- $stat
	echo "${20}"
}

# as_rootless CMD...: runs CMD as $ROOTLESS_USER with a clean view of its own
# Podman: its runtime dir ($R_RUNTIME), and none of root's settings that
# would point its Podman at other storage, config or engines.
as_rootless() {
	(cd / && runuser -u "$ROOTLESS_USER" -- env \
		-u XDG_CONFIG_HOME -u XDG_DATA_HOME -u XDG_CACHE_HOME -u CONTAINERS_CONF \
		-u CONTAINERS_STORAGE_CONF -u CONTAINERS_REGISTRIES_CONF -u CONTAINER_HOST \
		-u CONTAINER_CONNECTION -u DOCKER_HOST -u TMPDIR \
		XDG_RUNTIME_DIR="$R_RUNTIME" "$@")
}
