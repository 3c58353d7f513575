// Package nodefs detaches and removes the folders a run's engine mounted
// on the node (a Kubernetes pod's /tmp and data mounts), for the engine
// that made them and for the reaping of a dead bridge's: nothing is ever
// removed through a mount.
package nodefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Unmount detaches the mount at dir, lazily and without following a
// symbolic link. A dir that is not a mount point (any more) is not an error.
func Unmount(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // not a mount point (any more)
	}
	return fmt.Errorf("unmounting %s: %w", dir, err)
}

// RemoveDir removes a pod's node folder: each mount in it is detached
// first, and nothing is removed through a mount that could not be (a data
// mount holds a user's folder).
func RemoveDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var top unix.Stat_t
	if err := unix.Lstat(dir, &top); err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if err := Unmount(p); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil && st.Dev != top.Dev {
			return fmt.Errorf("%s is still a mount point: not removed", p)
		}
	}
	return os.RemoveAll(dir)
}
