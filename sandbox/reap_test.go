package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// deadOwner returns the owner string of a process of this host that has exited.
func deadOwner(t *testing.T) (owner string, pid int, start string) {
	t.Helper()
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid = cmd.Process.Pid
	owner, start = processOwner(pid), processStart(pid)
	cmd.Process.Kill()
	cmd.Wait()
	if owner == "" {
		t.Fatal("no owner for a running process")
	}
	return owner, pid, start
}

func TestOwnerGone(t *testing.T) {
	self := processOwner(os.Getpid())
	if self == "" {
		t.Fatal("processOwner of this process is empty")
	}
	dead, _, _ := deadOwner(t)
	host, _ := os.Hostname()
	tests := map[string]bool{
		self: false,
		dead: true,
		fmt.Sprintf("%s/%d/1", host, os.Getpid()): true, // same PID, other start: reused
		"another-host/1/1":                        false,
		"garbage":                                 false,
		"":                                        false,
	}
	for owner, want := range tests {
		if got := ownerGone(owner); got != want {
			t.Errorf("ownerGone(%q) = %v, want %v", owner, got, want)
		}
	}
}

func TestReap(t *testing.T) {
	dead, pid, start := deadOwner(t)
	rt := newFake(func(ctx context.Context, _, _ string, _ ContainerSpec) ExitState { <-ctx.Done(); return ExitState{} })
	add := func(owner string) string {
		spec := ContainerSpec{Labels: map[string]string{LabelManaged: "true"}, Mounts: []Mount{{Source: t.TempDir()}}}
		if owner != "" {
			spec.Labels[LabelOwner] = owner
		}
		id, err := rt.Create(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	deadID := add(dead)
	liveID := add(processOwner(os.Getpid()))
	foreignID := add("another-host/1/1")
	noOwnerID := add("")

	root := t.TempDir()
	deadDir := filepath.Join(root, fmt.Sprintf("run-%d.%s-123", pid, start))
	liveDir := filepath.Join(root, fmt.Sprintf("run-%d.%s-456", os.Getpid(), processStart(os.Getpid())))
	for _, d := range []string{deadDir, liveDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n, err := Reap(context.Background(), rt, root, zerolog.New(io.Discard))
	if err != nil || n != 1 {
		t.Fatalf("Reap = %d, %v; want 1 container", n, err)
	}
	left, _ := rt.List(context.Background(), nil)
	ids := map[string]bool{}
	for _, c := range left {
		ids[c.ID] = true
	}
	if ids[deadID] || !ids[liveID] || !ids[foreignID] || !ids[noOwnerID] {
		t.Fatalf("after Reap: %v (dead %s, live %s, foreign %s, no owner %s)", ids, deadID, liveID, foreignID, noOwnerID)
	}
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("dead bridge's run directory still there: %v", err)
	}
	if _, err := os.Stat(liveDir); err != nil {
		t.Errorf("live bridge's run directory removed: %v", err)
	}
	for id := range ids {
		rt.Remove(context.Background(), id)
	}
}
