//go:build unix

package paths

import (
	"fmt"
	"os"
	"syscall"
)

// EnsurePrivateDir creates dir with mode 0700, or checks that an existing
// one is a directory of ours that no one else can enter.
func EnsurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating run directory root: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("run directory root %s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("run directory root %s belongs to uid %d, not to this user: remove it or set XDG_RUNTIME_DIR", dir, st.Uid)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("making %s private: %w", dir, err)
		}
	}
	return nil
}
