# shellcheck shell=bash
# Shell functions shared by setup.sh, teardown.sh and load-image.sh. Sourced,
# not run.

# start_time PID: the process's start time in clock ticks since boot (field
# 22 of /proc/PID/stat), which together with the PID names a process even if
# the PID is later reused.
now_ms() { date +%s%3N; }

# step NAME starts a timed step; step_done WHAT logs "NAME: WHAT (N ms)"
# with the caller's log.
STEP_T0=0
STEP_NAME=
step() {
	STEP_NAME=$1
	STEP_T0=$(now_ms)
}
step_done() { log "$STEP_NAME: $* ($(($(now_ms) - STEP_T0)) ms)"; }

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

# The daemons. These need log and die, LOG_DIR, WAIT_SECONDS, ENV_FILE,
# DOCKER_SOCK and PODMAN_SOCK from the script that sources this file.

ping() {
	curl -fsS --max-time 3 --unix-socket "$1" http://d/_ping >/dev/null 2>&1
}


# alive "PID:STARTTIME" NAME: true while that very process, or a process
# called NAME in its process group (each daemon here leads its own; rootless
# Podman serves from a child, see teardown.sh), still runs.
alive() {
	local pid=${1%%:*} st=${1#*:}
	[ -n "$pid" ] || return 1
	[ "$(start_time "$pid" 2>/dev/null)" = "$st" ] || pgrep -g "$pid" -x "$2" >/dev/null 2>&1
}

# wait_ready NAME SOCKET WATCHPID LOG: waits until SOCKET answers; fails fast,
# with the log's tail, when WATCHPID exits or after WAIT_SECONDS.
wait_ready() {
	local name=$1 sock=$2 watch=$3 logf=$4
	local deadline=$((SECONDS + WAIT_SECONDS))
	until ping "$sock"; do
		if ! kill -0 "$watch" 2>/dev/null; then
			log "$name exited during start-up; last lines of $logf:"
			tail -n 30 "$logf" >&2 || true
			die "$name did not start"
		fi
		if ((SECONDS >= deadline)); then
			log "$name does not answer on $sock after ${WAIT_SECONDS}s; last lines of $logf:"
			tail -n 30 "$logf" >&2 || true
			die "$name did not start"
		fi
		sleep 0.2
	done
}

# read_pidfile FILE: "PID:STARTTIME" of the process whose PID is in FILE.
read_pidfile() {
	local pid
	for _ in $(seq 50); do
		pid=$(cat "$1" 2>/dev/null || true)
		[ -n "$pid" ] && break
		sleep 0.1
	done
	[ -n "$pid" ] || die "no PID in $1"
	echo "$pid:$(start_time "$pid")"
}

# A daemon that setsid runs inside `sh -c` writes its own PID (the shell
# execs into the daemon) so the recorded PID is the daemon's, even when a
# wrapper such as runuser forks in between. setsid -w: should setsid have to
# fork, it waits, so the PID that wait_ready watches lives as long as the
# daemon.
# shellcheck disable=SC2016
PIDFILE_WRAPPER='echo $$ >"$0"; exec "$@"'

# start_dockerd: starts dockerd detached (setsid, output in its log) and sets
# STARTED_DOCKERD to its "PID:STARTTIME" once its socket answers.
start_dockerd() {
	local logf=$LOG_DIR/dockerd.log
	mkdir -p "$LOG_DIR"
	setsid -w sh -c "$PIDFILE_WRAPPER" "$LOG_DIR/dockerd.pid" dockerd >>"$logf" 2>&1 </dev/null &
	wait_ready dockerd "$DOCKER_SOCK" $! "$logf"
	STARTED_DOCKERD=$(read_pidfile "$LOG_DIR/dockerd.pid")
}

# start_podman_service: likewise for the rootful Podman API service
# (STARTED_PODMAN).
start_podman_service() {
	local logf=$LOG_DIR/podman.log
	mkdir -p "$(dirname "$PODMAN_SOCK")" "$LOG_DIR"
	rm -f "$PODMAN_SOCK"
	# Podman 4.x's conmon drops an empty "oom" file into the service's
	# working directory after an OOM kill: keep it out of the caller's tree.
	pushd "$LOG_DIR" >/dev/null
	setsid -w sh -c "$PIDFILE_WRAPPER" "$LOG_DIR/podman.pid" \
		podman system service --time=0 "unix://$PODMAN_SOCK" >>"$logf" 2>&1 </dev/null &
	popd >/dev/null
	wait_ready "podman service" "$PODMAN_SOCK" $! "$logf"
	STARTED_PODMAN=$(read_pidfile "$LOG_DIR/podman.pid")
}

# start_podman_runsc_service: a second rootful Podman API service, on
# PODMAN_RUNSC_SOCK, whose containers all run under gVisor (STARTED_PODMAN_RUNSC).
# Podman's API cannot choose a runtime per container, so gVisor needs a
# service of its own; it shares the image store with the first one. runsc
# gets the flags the bridge needs: --network=none (it refuses "no network"
# without it) and --host-uds=open (for the relay's socket).
start_podman_runsc_service() {
	local logf=$LOG_DIR/podman-runsc.log
	mkdir -p "$(dirname "$PODMAN_RUNSC_SOCK")" "$LOG_DIR"
	rm -f "$PODMAN_RUNSC_SOCK"
	# conmon's "oom" files (see start_podman_service) go to the log dir.
	pushd "$LOG_DIR" >/dev/null
	setsid -w sh -c "$PIDFILE_WRAPPER" "$LOG_DIR/podman-runsc.pid" \
		podman --runtime runsc --runtime-flag network=none --runtime-flag host-uds=open \
		system service --time=0 "unix://$PODMAN_RUNSC_SOCK" >>"$logf" 2>&1 </dev/null &
	popd >/dev/null
	wait_ready "podman runsc service" "$PODMAN_RUNSC_SOCK" $! "$logf"
	STARTED_PODMAN_RUNSC=$(read_pidfile "$LOG_DIR/podman-runsc.pid")
}

# api_json SOCKET PATH EXPR: evaluates the Python expression EXPR on the JSON
# that GET PATH answers on SOCKET (as d), and prints it.
api_json() {
	curl -fsS --max-time 10 --unix-socket "$1" "http://d$2" |
		python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$3"
}

# docker_runsc_args SOCKET: the arguments dockerd runs runsc with, one line
# ("" when it has none); fails when dockerd has no runtime called runsc.
docker_runsc_args() {
	local out
	out=$(api_json "$1" /info '"missing" if "runsc" not in (d.get("Runtimes") or {}) else " ".join(d["Runtimes"]["runsc"].get("runtimeArgs") or [])') || return 1
	[ "$out" != missing ] || return 1
	echo "$out"
}

# register_runsc_with_docker CONFIG RUNSC: adds a runtime called runsc (the
# binary RUNSC, with the flags the bridge needs) to the "runtimes" of
# dockerd's config file CONFIG, created if missing. An entry called runsc
# already there is left as it is. Prints "added" or "kept".
register_runsc_with_docker() {
	python3 - "$1" "$2" <<'PY'
import json, os, sys

path, runsc = sys.argv[1], sys.argv[2]
try:
    with open(path) as f:
        text = f.read()
except FileNotFoundError:
    text = ""
conf = json.loads(text) if text.strip() else {}
if not isinstance(conf, dict) or not isinstance(conf.get("runtimes", {}), dict):
    sys.exit(f"{path}: not a JSON object with a \"runtimes\" object; register runsc by hand")
runtimes = conf.setdefault("runtimes", {})
if "runsc" in runtimes:
    print("kept")
    sys.exit(0)
runtimes["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none", "--host-uds=open"]}
tmp = path + ".bridge-tmp"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
os.chmod(tmp, 0o644)
os.replace(tmp, path)
print("added")
PY
}

# stop_daemon NAME VAR COMM: stops the daemon recorded in the env file as VAR, with
# its whole process group. setup.sh starts each daemon under setsid, so the
# group is the daemon's own (PGID = its PID) and holds what it forked that did
# not leave it: rootless Podman re-executes itself inside the user namespace,
# and that child (also called COMM), not the parent, serves the socket.
stop_daemon() {
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
