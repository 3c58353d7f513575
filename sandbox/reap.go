package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// LabelOwner names the bridge process that created a container, as
// "HOST/PID/START" (START is the process's start time in clock ticks since
// boot, so a reused PID is not mistaken for the owner).
const LabelOwner = "io.github.bridge-mcp.owner"

// matchLabels keeps the containers that carry every label in want.
func matchLabels(cs []Container, want map[string]string) []Container {
	out := cs[:0]
	for _, c := range cs {
		ok := true
		for k, v := range want {
			if c.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, c)
		}
	}
	return out
}

// processOwner identifies the process pid on this host for LabelOwner and
// run directory names. It returns "" when /proc does not say.
func processOwner(pid int) string {
	host, _ := os.Hostname()
	start := processStart(pid)
	if host == "" || start == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d/%s", host, pid, start)
}

// processStart returns field 22 of /proc/PID/stat, the start time.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces and parentheses: split
	// after its closing parenthesis. Field 22 is then the 20th.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// ownerGone reports whether owner names a process of this host that no
// longer runs. Owners of other hosts (a remote engine shared by several
// machines) are never gone as far as this host can tell.
func ownerGone(owner string) bool {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return false
	}
	host, _ := os.Hostname()
	pid, err := strconv.Atoi(parts[1])
	if parts[0] != host || err != nil || pid <= 0 {
		return false
	}
	return processStart(pid) != parts[2]
}

// Reap removes what bridge processes of this host that died left behind:
// their containers (found by LabelOwner) and their run directories under
// runRoot (named after the owner's PID and start time). It is safe to call
// while other bridges run: it only touches what belongs to dead processes.
func Reap(ctx context.Context, rt Runtime, runRoot string, log zerolog.Logger) (int, error) {
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
		pidStart, _, _ := strings.Cut(rest, "-")
		pid, start, _ := strings.Cut(pidStart, ".")
		host, _ := os.Hostname()
		if ownerGone(host + "/" + pid + "/" + start) {
			if err := os.RemoveAll(filepath.Join(runRoot, e.Name())); err == nil {
				log.Info().Str("dir", e.Name()).Msg("removed a dead bridge's run directory")
			}
		}
	}
	return n, nil
}
