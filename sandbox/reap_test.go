package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	if owner == "" || start == "" {
		t.Fatal("no owner for a running process")
	}
	return owner, pid, start
}

// otherOwners are owners of the dead process pid/start as seen from
// elsewhere: they differ from ours only in the host, the boot or the PID
// namespace, so they cannot be checked from here and are never reaped.
func otherOwners(t *testing.T, pid int, start string) map[string]string {
	t.Helper()
	host, _ := os.Hostname()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ns, "pid:[") {
		t.Fatalf("PID namespace %q", ns)
	}
	b := strings.TrimSpace(string(boot))
	if got, want := ownerScope(), host+"/"+b+"/"+ns; got != want {
		t.Fatalf("ownerScope() = %q, want %q", got, want)
	}
	ps := fmt.Sprintf("%d/%s", pid, start)
	return map[string]string{
		"another host":          "another-host/" + b + "/" + ns + "/" + ps,
		"another boot":          host + "/00000000-0000-0000-0000-000000000000/" + ns + "/" + ps,
		"another PID namespace": host + "/" + b + "/pid:[1]/" + ps,
	}
}

func TestOwnerGone(t *testing.T) {
	self := processOwner(os.Getpid())
	if self == "" {
		t.Fatal("processOwner of this process is empty")
	}
	dead, pid, start := deadOwner(t)
	if !strings.HasSuffix(dead, fmt.Sprintf("/%d/%s", pid, start)) || !strings.HasPrefix(dead, ownerScope()+"/") {
		t.Fatalf("processOwner(%d) = %q", pid, dead)
	}
	host, _ := os.Hostname()
	scope := ownerScope()
	tests := map[string]bool{
		self: false,
		dead: true,
		fmt.Sprintf("%s/%d/1", scope, os.Getpid()): true, // same PID, other start: reused
		// Malformed: never reaped.
		fmt.Sprintf("%s/%d/%s", host, pid, start):    false, // HOST/PID/START
		fmt.Sprintf("%s/+%d/%s", scope, pid, start):  false,
		fmt.Sprintf("%s/%d/%sx", scope, pid, start):  false,
		fmt.Sprintf("%s/%d/", scope, pid):            false,
		fmt.Sprintf("%s/0/%s", scope, start):         false,
		fmt.Sprintf("%s/%d/%s/x", scope, pid, start): false,
		fmt.Sprintf("%s//%d/%s", host, pid, start):   false,
		"garbage": false,
		"":        false,
	}
	for why, owner := range otherOwners(t, pid, start) {
		if got := ownerGone(owner); got {
			t.Errorf("ownerGone(%q) = true for an owner of %s", owner, why)
		}
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
	keep := map[string]string{
		"live":     add(processOwner(os.Getpid())),
		"no owner": add(""),
		"old form": add(fmt.Sprintf("%s/%d/%s", func() string { h, _ := os.Hostname(); return h }(), pid, start)),
	}
	for why, owner := range otherOwners(t, pid, start) {
		keep[why] = add(owner)
	}

	root := t.TempDir()
	deadDir := filepath.Join(root, fmt.Sprintf("run-%d.%s-123", pid, start))
	keepDirs := []string{
		filepath.Join(root, fmt.Sprintf("run-%d.%s-456", os.Getpid(), processStart(os.Getpid()))),
		filepath.Join(root, "run-789"),                    // made by a bridge without /proc
		filepath.Join(root, fmt.Sprintf("run-%d-1", pid)), // no start time
		filepath.Join(root, fmt.Sprintf("run-x%d.%s-1", pid, start)),
	}
	for _, d := range append([]string{deadDir}, keepDirs...) {
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
	if ids[deadID] {
		t.Errorf("the dead bridge's container %s is still there", deadID)
	}
	for why, id := range keep {
		if !ids[id] {
			t.Errorf("the container with the %s owner was removed", why)
		}
	}
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("dead bridge's run directory still there: %v", err)
	}
	for _, d := range keepDirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("run directory %s removed: %v", filepath.Base(d), err)
		}
	}
	for id := range ids {
		rt.Remove(context.Background(), id)
	}
}
