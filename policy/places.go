package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/bridge-mcp/bridge/internal/paths"
)

// A host folder the policy names (a mount, the artifacts folder) must keep
// clear of the places that would hand the code the host: the kernel's
// pseudo file systems, the container engines' API sockets and storage,
// and the bridge's own run directories.

// relation is how a place covers a folder.
type relation int

const (
	// itself: the folder is the place.
	itself relation = 1 << iota
	// inside: the folder is under the place.
	inside
	// holding: the folder is an ancestor of the place.
	holding
)

// place is one part of the host a policy may not hand to the code.
type place struct {
	path  string
	what  string   // "Docker's API socket folder", for messages
	check relation // which relations refuse a folder
}

// forbidden lists the places, their paths as given and, where they exist,
// with symlinks resolved (/var/run is /run on most systems).
func forbidden() []place {
	all := itself | inside | holding
	ps := []place{
		{"/", "the host's root folder", itself},
		{"/proc", "the kernel's process file system", itself | inside},
		{"/sys", "the kernel's sysfs", itself | inside},
		{"/dev", "the host's devices", itself | inside},
		{"/var/run", "the folder of Docker's API socket (/var/run/docker.sock)", all},
		{"/run", "the folder of Docker's API socket (/run/docker.sock)", all},
		{"/run/podman", "the folder of Podman's API socket", all},
		{"/var/lib/docker", "Docker's storage (every image's and container's files)", all},
		{"/var/lib/containers", "Podman's storage (every image's and container's files)", all},
		{paths.RunRoot(), "the bridge's run directories (the relay sockets of every run)", all},
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		ps = append(ps, place{filepath.Join(d, "podman"), "the folder of rootless Podman's API socket", all})
	}
	for _, env := range []string{"DOCKER_HOST", "CONTAINER_HOST"} {
		if sock, ok := strings.CutPrefix(os.Getenv(env), "unix://"); ok && filepath.IsAbs(sock) {
			ps = append(ps, place{filepath.Dir(sock), "the folder of the engine socket $" + env, all})
		}
	}
	data := os.Getenv("XDG_DATA_HOME")
	if !filepath.IsAbs(data) {
		if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
			data = filepath.Join(home, ".local", "share")
		}
	}
	if filepath.IsAbs(data) {
		ps = append(ps, place{filepath.Join(data, "containers"), "rootless Podman's storage (every image's and container's files)", all})
	}
	out := make([]place, 0, 2*len(ps))
	for _, p := range ps {
		p.path = filepath.Clean(p.path)
		out = append(out, p)
		if r, err := filepath.EvalSymlinks(p.path); err == nil && r != p.path {
			p.path = r
			out = append(out, p)
		}
	}
	return out
}

// under reports whether path is dir or inside it (both clean and absolute).
func under(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// refusal says why the folder dir (absolute, clean, symlinks resolved) may
// not be handed to the code, or "".
func refusal(dir string) string {
	for _, p := range forbidden() {
		switch {
		case dir == p.path && p.check&itself != 0:
			return fmt.Sprintf("%s is %s", dir, p.what)
		case under(dir, p.path) && dir != p.path && p.check&inside != 0:
			return fmt.Sprintf("%s is inside %s, %s", dir, p.path, p.what)
		case under(p.path, dir) && dir != p.path && p.check&holding != 0:
			return fmt.Sprintf("%s holds %s, %s", dir, p.path, p.what)
		}
	}
	return ""
}

// expandHome turns "~" and "~/..." into this user's home folder; other
// paths are returned as they are.
func expandHome(s string) (string, error) {
	if s != "~" && !strings.HasPrefix(s, "~/") {
		if strings.HasPrefix(s, "~") {
			return "", fmt.Errorf("%q: only ~ and ~/... (this user's home) are expanded, not ~user: write the path out", s)
		}
		return s, nil
	}
	home, err := os.UserHomeDir()
	if err != nil || !filepath.IsAbs(home) {
		return "", fmt.Errorf("%q: this user has no home folder to expand ~ into ($HOME is not set): write the path out", s)
	}
	return filepath.Join(home, s[1:]), nil
}

// hostDir reads a host folder as a policy gives it: absolute or ~/...,
// symlinks resolved. With mustExist, the folder must exist; otherwise the
// longest part of it that exists is resolved and the rest kept. It
// returns the folder and, when resolving changed it, a note for messages
// (" (a symlink to /x)").
func hostDir(s string, mustExist bool) (dir, note string, err error) {
	if s == "" {
		return "", "", errors.New("an empty path: give an absolute path, or one starting with ~/")
	}
	given, err := expandHome(s)
	if err != nil {
		return "", "", err
	}
	if !filepath.IsAbs(given) {
		return "", "", fmt.Errorf("%q is a relative path: give an absolute path, or one starting with ~/", s)
	}
	given = filepath.Clean(given)
	dir, err = resolve(given, mustExist)
	if err != nil {
		return "", "", err
	}
	if !utf8.ValidString(dir) || strings.IndexFunc(dir, unicode.IsControl) >= 0 {
		return "", "", fmt.Errorf("%s resolves to %q, which is not plain UTF-8 text: rename what the symlinks lead to", given, dir)
	}
	if dir != given {
		note = fmt.Sprintf(" (%s resolves to %s: symlinks are followed)", given, dir)
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return "", "", fmt.Errorf("%s%s is a file, not a folder: name the folder that holds it", given, note)
	}
	return dir, note, nil
}

// resolve is filepath.EvalSymlinks of the absolute, clean path p; unless
// mustExist, a path that does not exist yet resolves to its longest
// existing part, resolved, joined with the rest.
func resolve(p string, mustExist bool) (string, error) {
	r, err := filepath.EvalSymlinks(p)
	if err == nil {
		return r, nil
	}
	if errors.Is(err, fs.ErrPermission) {
		return "", fmt.Errorf("%s cannot be reached by this user (uid %d): %v; let it in (chmod o+x on each folder above it), or run the bridge as a user that can", p, os.Getuid(), errors.Unwrap(err))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: %v", p, err)
	}
	if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("%s is a symlink to a path that does not exist: fix the link, or give the real path", p)
	}
	if mustExist {
		return "", fmt.Errorf("%s does not exist: create it, or fix the path", p)
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p, nil
	}
	rp, err := resolve(parent, false)
	if err != nil {
		return "", err
	}
	return filepath.Join(rp, filepath.Base(p)), nil
}

// ownFolder reads the key name as a host folder the bridge keeps what (its
// files, its skills) in: absolute or ~/..., symlinks resolved, not one of
// the forbidden places. It need not exist. ok is false when the value is
// "" or was reported as wrong.
func (p *parser) ownFolder(k, v *yaml.Node, name, what, example string) (string, bool) {
	s, ok := p.str(k, v, name)
	if !ok || s == "" {
		return "", false
	}
	dir, note, err := hostDir(s, false)
	if err != nil {
		p.errorf(v, "%s: %v", name, err)
		return "", false
	}
	if why := refusal(dir); why != "" {
		p.errorf(v, "%s: %s%s: give the bridge a folder of its own for %s, e.g. %s", name, why, note, what, example)
		return "", false
	}
	return dir, true
}
