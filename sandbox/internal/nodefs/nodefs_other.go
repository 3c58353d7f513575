//go:build !linux

package nodefs

import "errors"

var errNotLinux = errors.New("node folders are mounted on a Linux node only")

// Unmount does nothing: only Linux mounts a node folder.
func Unmount(string) error { return nil }

// RemoveDir refuses: a node folder is a Linux node's.
func RemoveDir(string) error { return errNotLinux }
