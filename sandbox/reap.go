package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/bridge-mcp/bridge/sandbox/internal/nodefs"
	"github.com/rs/zerolog"
)

// LabelOwner names the bridge process that created a container, as
// "HOST/BOOT/PIDNS/PID/START": the hostname, the kernel's boot id, the PID
// namespace ("pid:[4026531836]"), the PID, and the process's start time in
// clock ticks since boot (so that a reused PID is not mistaken for the
// owner). PID and START only mean something to a process that shares the
// boot and the PID namespace: a bridge in a container (which sees the host's
// hostname when it is given it, and the engine's socket when it is mounted)
// or one on another machine of the same name must not take another's live
// containers for a dead bridge's.
const LabelOwner = "io.github.bridge-mcp.owner"

// processOwner identifies the process pid, as this process sees it, for
// LabelOwner. It returns "" when /proc does not say.
func processOwner(pid int) string {
	me := ownerScope()
	start := processStart(pid)
	if me == "" || start == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d/%s", me, pid, start)
}

// ownerScope is "HOST/BOOT/PIDNS" for this process: where its PIDs mean
// something. It is "" when one of them is unknown or would not parse back.
var ownerScope = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	ns, _ := os.Readlink("/proc/self/ns/pid")
	parts := []string{host, strings.TrimSpace(string(boot)), ns}
	for _, p := range parts {
		if p == "" || strings.Contains(p, "/") {
			return ""
		}
	}
	return strings.Join(parts, "/")
})

// processStart returns field 22 of /proc/PID/stat, the start time, or "".
func processStart(pid int) string {
	start, _ := readProcessStart(pid)
	return start
}

// readProcessStart is processStart with the error: one wrapping
// fs.ErrNotExist means no process pid runs.
func readProcessStart(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) may hold spaces and parentheses: split
	// after its closing parenthesis. Field 22 is then the 20th.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return f[19], nil
}

// ownerGone reports whether owner (a LabelOwner value) names a process that
// no longer runs. Only an owner of this host's boot and this process's PID
// namespace can be gone: others (another machine sharing the engine, a
// bridge in a container) cannot be checked from here. A malformed owner is
// never gone.
func ownerGone(owner string) bool {
	parts := strings.Split(owner, "/")
	me := ownerScope()
	if len(parts) != 5 || me == "" || strings.Join(parts[:3], "/") != me {
		return false
	}
	return processGone(parts[3], parts[4])
}

// processGone reports whether the process with the PID and start time given
// as text, in this PID namespace, no longer runs: no process has that PID,
// or the one that has it started at another time. Malformed values, or a
// /proc that cannot be read (or does not show this process), are not gone.
func processGone(pidText, start string) bool {
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || strconv.Itoa(pid) != pidText || !isDigits(start) {
		return false
	}
	if processStart(os.Getpid()) == "" {
		return false // no /proc, or not ours: every process would look gone
	}
	now, err := readProcessStart(pid)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
	}
	return now != start
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Reap removes what bridge processes that died left behind: their
// containers (found by LabelOwner, and only those of bridges of this host's
// boot and this process's PID namespace) and their run directories under
// runRoot (named after the owner's PID and start time). It is safe to call
// while other bridges run: it only touches what belongs to dead processes.
func Reap(ctx context.Context, rt Containers, runRoot string, log zerolog.Logger) (int, error) {
	cs, err := rt.List(ctx, map[string]string{LabelManaged: "true"})
	if err != nil {
		return 0, fmt.Errorf("listing the bridge's containers: %w", err)
	}
	n := 0
	for _, c := range cs {
		if !ownerGone(c.Labels[LabelOwner]) {
			continue
		}
		if err := rt.Remove(ctx, c.ID); err != nil {
			log.Warn().Err(err).Str("container", c.ID).Msg("removing a dead bridge's container")
			continue
		}
		log.Info().Str("container", c.ID).Str("owner", c.Labels[LabelOwner]).Str("run_id", c.Labels[LabelRunID]).Msg("removed a dead bridge's container")
		n++
	}
	entries, _ := os.ReadDir(runRoot)
	for _, e := range entries {
		// run-PID.START-RANDOM
		rest, ok := strings.CutPrefix(e.Name(), "run-")
		if !ok || !e.IsDir() {
			continue
		}
		// The directories are local to this host and this user's run root,
		// so PID and start time name their bridge.
		pidStart, _, _ := strings.Cut(rest, "-")
		pid, start, _ := strings.Cut(pidStart, ".")
		if processGone(pid, start) {
			remove := os.RemoveAll
			if strings.HasSuffix(e.Name(), ".node") {
				remove = nodefs.RemoveDir // a pod's mounts: detached first
			}
			if err := remove(filepath.Join(runRoot, e.Name())); err == nil {
				log.Info().Str("dir", e.Name()).Msg("removed a dead bridge's run directory")
			} else {
				log.Warn().Err(err).Str("dir", e.Name()).Msg("removing a dead bridge's run directory")
			}
		}
	}
	return n, nil
}
