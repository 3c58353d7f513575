package kubernetes

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bridge-mcp/bridge/sandbox/internal/nodefs"
)

// linuxNode does the Kubernetes engine's work on its node with mount(2)
// and the cgroup file system; it needs root there.
type linuxNode struct{}

func (linuxNode) mountTmp(dir string, size int64) error {
	opts := fmt.Sprintf("size=%d,mode=1777", size)
	return unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV, opts)
}

// bindReadOnly clones src's mount tree, sets it read-only, nosuid, nodev
// and noexec (recursively) while it is still detached, and only then
// attaches it at dir: there is no moment when dir holds src writable.
func (linuxNode) bindReadOnly(src, dir string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("cloning %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("making the mount of %s read-only, nosuid, nodev and noexec: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting %s at %s: %w", src, dir, err)
	}
	return nil
}

func (linuxNode) unmount(dir string) error { return nodefs.Unmount(dir) }

// pidsRoot is where the pids controller's hierarchy is mounted.
func pidsRoot() string {
	if localCgroupVersion() == "2" {
		return "/sys/fs/cgroup"
	}
	return "/sys/fs/cgroup/pids"
}

func (linuxNode) canSetPids() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "Kubernetes bounds processes per node (the kubelet's podPidsLimit), not per pod; the bridge sets each run's limit in the pod's cgroup, which needs it to run as root on the node"
	}
	root := pidsRoot()
	if err := unix.Access(root, unix.W_OK); err != nil {
		return false, fmt.Sprintf("the pids cgroup %s is not writable here (%v): run the bridge on the node with the host's /sys/fs/cgroup", root, err)
	}
	return true, ""
}

// setPids finds the container's cgroup under the kubelet's (kubepods, with
// the cgroupfs or the systemd driver) and writes its pids.max.
func (linuxNode) setPids(podUID, containerID string, limit int64) error {
	dir, err := findContainerCgroup(pidsRoot(), podUID, containerID)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(limit, 10)), 0)
}

// findContainerCgroup looks under root's kubepods hierarchy for the pod's
// folder (pod<uid>, or kubepods-…-pod<uid with _>.slice) and the
// container's in it.
func findContainerCgroup(root, podUID, containerID string) (string, error) {
	uids := []string{podUID, strings.ReplaceAll(podUID, "-", "_")}
	var found string
	var walk func(dir string, depth int) bool
	walk = func(dir string, depth int) bool {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return false
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			name := e.Name()
			if strings.Contains(name, uids[0]) || strings.Contains(name, uids[1]) {
				sub, _ := os.ReadDir(filepath.Join(dir, name))
				for _, c := range sub {
					if c.IsDir() && strings.Contains(c.Name(), containerID) {
						found = filepath.Join(dir, name, c.Name())
						return true
					}
				}
				return false
			}
			if depth < 3 && strings.HasPrefix(name, "kubepods") && walk(filepath.Join(dir, name), depth+1) {
				return true
			}
		}
		return false
	}
	if !walk(root, 0) {
		return "", fmt.Errorf("no cgroup for container %s of pod %s under %s: %w", containerID, podUID, root, fs.ErrNotExist)
	}
	return found, nil
}

// localCgroupVersion is "2" on a unified cgroup hierarchy, else "1".
func localCgroupVersion() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "2"
	}
	return "1"
}
