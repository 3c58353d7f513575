package runsc

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// imageDirName is an image id's folder name in the rootfs cache.
var imageDirName = regexp.MustCompile(`^[a-f0-9]{12,128}$`)

// rootfs is the root file system of image ref and its environment, from
// the cache (Dir/rootfs/<image id>/rootfs, its env.json written last: a
// folder without it is an export that did not finish), exported on first
// use. A cached rootfs is never changed: a restored sandbox reopens its
// files by path.
//
// ref may be an image id ("sha256:..."), as a restore names the image its
// checkpoint was taken on: its cached rootfs is taken as it is, even when
// the engine no longer has the image. Else the export is of the id ref
// names now, so that a tag moved meanwhile (an image rebuilt) cannot put
// another image's files under this id.
func (c *Client) rootfs(ctx context.Context, ref string) (dir string, env []string, id string, err error) {
	if name, ok := strings.CutPrefix(ref, "sha256:"); ok && imageDirName.MatchString(name) {
		final := filepath.Join(c.opts.Dir, "rootfs", name)
		if env, err := readEnv(final); err == nil {
			return filepath.Join(final, "rootfs"), env, ref, nil
		}
	}
	info, err := c.opts.Images.ImageInfo(ctx, ref)
	if err != nil {
		return "", nil, "", err
	}
	name := strings.TrimPrefix(info.ID, "sha256:")
	if !imageDirName.MatchString(name) {
		return "", nil, "", fmt.Errorf("image %s has the id %q, not one the runsc engine can name its root file system by", ref, info.ID)
	}
	id = "sha256:" + name
	dir, env, err = c.cachedRootfs(ctx, id, name)
	return dir, env, id, err
}

// cachedRootfs is the cached rootfs of image id (name: its hex), exported
// on first use.
func (c *Client) cachedRootfs(ctx context.Context, id, name string) (dir string, env []string, err error) {
	ref := id
	final := filepath.Join(c.opts.Dir, "rootfs", name)
	if env, err := readEnv(final); err == nil {
		return filepath.Join(final, "rootfs"), env, nil
	}
	c.rootfsMu.Lock()
	defer c.rootfsMu.Unlock()
	if env, err := readEnv(final); err == nil {
		return filepath.Join(final, "rootfs"), env, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(c.opts.Dir, "rootfs"), ".export-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(tmp) // gone once renamed
	env, err = c.export(ctx, ref, filepath.Join(tmp, "rootfs"))
	if err == nil {
		err = writeEnv(tmp, env)
	}
	if err == nil {
		err = os.Rename(tmp, final)
		if err != nil {
			// Another bridge on the same folder may have put its export
			// there first: it is whole (renamed in with its env.json) and
			// may be in use, so take it. Without its env.json it is what
			// a removal cut short left: replaced.
			if env, rerr := readEnv(final); rerr == nil {
				return filepath.Join(final, "rootfs"), env, nil
			}
			_ = os.RemoveAll(final)
			err = os.Rename(tmp, final)
		}
	}
	if err != nil {
		return "", nil, fmt.Errorf("export image %s for the runsc engine: %w", ref, err)
	}
	return filepath.Join(final, "rootfs"), env, nil
}

func readEnv(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "env.json"))
	if err != nil {
		return nil, err
	}
	var env []string
	return env, json.Unmarshal(b, &env)
}

func writeEnv(dir string, env []string) error {
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "env.json"), b, 0o600)
}

// export unpacks image ref's file system into dir, with the mount points
// the bundle needs (the run folder, the init), which a read-only root
// cannot get later.
func (c *Client) export(ctx context.Context, ref, dir string) ([]string, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	var env []string
	done := make(chan error, 1)
	go func() {
		var err error
		env, err = c.opts.Images.Export(ctx, ref, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	err := untar(pr, dir)
	pr.CloseWithError(errors.New("unpacking stopped")) // the exporter must not block on a reader gone
	if xerr := <-done; xerr != nil {
		return nil, xerr
	}
	if err != nil {
		return nil, err
	}
	return env, mountPoints(dir)
}

// mountPoints makes what the bundle mounts on in a read-only root.
func mountPoints(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, d := range []string{"run/bridge", "tmp", "proc", "sys", "dev"} {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := root.MkdirAll(path.Dir(InitPath[1:]), 0o755); err != nil {
		return err
	}
	f, err := root.OpenFile(InitPath[1:], os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	return f.Close()
}

// untar unpacks a tar stream into dir, never outside it (os.Root): folders,
// files, links and hard links with their owners, modes (without setuid and
// setgid) and, for files, times (Python's bytecode is checked against its
// source's); devices and FIFOs are left out (gVisor has its own /dev).
func untar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." {
			continue
		}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		if err := untarEntry(root, tr, h, name); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}

// untarEntry makes one entry of the archive under root.
func untarEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string) error {
	mode := os.FileMode(h.Mode) & os.ModePerm
	if h.Mode&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		_ = root.Remove(name)
		return root.Symlink(h.Linkname, name)
	case tar.TypeLink:
		_ = root.Remove(name)
		return root.Link(path.Clean(strings.TrimPrefix(h.Linkname, "/")), name)
	default:
		return nil // devices, FIFOs
	}
	if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
		return err
	}
	if err := root.Chmod(name, mode); err != nil {
		return err
	}
	if h.Typeflag == tar.TypeReg {
		return root.Chtimes(name, time.Now(), h.ModTime)
	}
	return nil
}
