package detect

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/runsc"
)

// runscCandidates are the engines that may hold the images of the runsc
// engine: Podman ($CONTAINER_HOST, else its rootful socket) and Docker
// ($DOCKER_HOST, else its default socket), as root uses them. A socket an
// environment variable names comes first: the operator said where the
// images are.
func runscCandidates(getenv func(string) string) []Candidate {
	c := func(images, uri string) Candidate {
		return Candidate{Engine: sandbox.EngineRunsc, URI: uri, Why: "gVisor (runsc), images from " + images, Images: images}
	}
	var set, defaults []Candidate
	if h := getenv("CONTAINER_HOST"); h != "" {
		set = append(set, c(sandbox.EnginePodman, h))
	} else {
		defaults = append(defaults, c(sandbox.EnginePodman, "unix:///run/podman/podman.sock"))
	}
	if h := getenv("DOCKER_HOST"); h != "" {
		set = append(set, c(sandbox.EngineDocker, h))
	} else {
		defaults = append(defaults, c(sandbox.EngineDocker, "unix:///var/run/docker.sock"))
	}
	return append(set, defaults...)
}

// runscNotRootError is the runsc engine asked for by a user who is not root.
// It wraps ErrEngineDenied and ErrEngineUnreachable, as a socket that
// refuses the user does: the engine is there, not for this user.
type runscNotRootError struct{ euid int }

func (e runscNotRootError) Error() string {
	return fmt.Sprintf("the runsc engine drives runsc itself, which needs root (this bridge runs as uid %d): "+
		"run the bridge as root, or use engine docker or podman with `oci_runtime: runsc` (gVisor without memory snapshots)", e.euid)
}

func (runscNotRootError) Unwrap() []error {
	return []error{sandbox.ErrEngineDenied, sandbox.ErrEngineUnreachable}
}

// runscHost is what the runsc engine takes from the host: who the bridge
// runs as, its environment, and where to look for programs (tests give
// their own).
type runscHost struct {
	euid   int
	getenv func(string) string
	inits  []string // static inits, in order of preference
}

// defaultInits are the static inits a host may have: tini's static build,
// Docker's docker-init (tini, in two places), Podman's catatonit.
func defaultInits() []string {
	return []string{
		"/usr/bin/tini-static", "/usr/libexec/docker/docker-init", "/usr/bin/docker-init",
		"/usr/libexec/podman/catatonit", "/usr/bin/catatonit",
	}
}

// openRunsc opens the runsc engine of candidate c: the engine that holds
// the images (c.Images at c.URI) and runsc.New over it.
func openRunsc(ctx context.Context, c Candidate, h runscHost) (sandbox.Runtime, error) {
	if h.euid != 0 {
		return nil, runscNotRootError{h.euid}
	}
	if c.Images != sandbox.EngineDocker && c.Images != sandbox.EnginePodman {
		return nil, fmt.Errorf("the runsc engine takes its images from docker or podman, not %q", c.Images)
	}
	init := findInit(h.inits)
	if init == "" {
		return nil, fmt.Errorf("%w: the runsc engine found no static init on this host (tried %v): install tini (Debian and Ubuntu: `apt-get install tini`, which has tini-static)",
			sandbox.ErrEngineUnreachable, h.inits)
	}
	dir, err := runscDir(h.getenv)
	if err != nil {
		return nil, err
	}
	imgs, err := Connect(ctx, Candidate{Engine: c.Images, URI: c.URI, Why: c.Why})
	if err != nil {
		return nil, fmt.Errorf("the runsc engine's images: %w", err)
	}
	exp, ok := imgs.(runsc.Exporter)
	if !ok {
		imgs.Close()
		return nil, fmt.Errorf("the %s engine of this build cannot export images for the runsc engine", c.Images)
	}
	rt, err := runsc.New(ctx, runsc.Options{Command: []string{runscCommand()}, Dir: dir, Init: init, Images: exp})
	if err != nil {
		imgs.Close()
		return nil, err
	}
	return rt, nil
}

// findInit is the first of paths that is a static executable (no program
// interpreter): it is bind-mounted into images that may lack the host's
// libraries. Symbolic links are followed, since the mount's source must be
// the file.
func findInit(paths []string) string {
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		f, err := elf.Open(real)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			static = static && prog.Type != elf.PT_INTERP
		}
		f.Close()
		if static {
			return real
		}
	}
	return ""
}

// runscCommand is runsc on the PATH, or where it is installed when the PATH
// lacks it (a service's may); "runsc" when nowhere, for runsc.New to say
// so.
func runscCommand() string {
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, "runsc")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return "runsc"
}

// RunscDir is the runsc engine's folder (bundles, runsc's state, the
// images' root file systems): $XDG_STATE_HOME/bridge/runsc, else
// /var/lib/bridge/runsc, as the engine runs as root.
func RunscDir(getenv func(string) string) string {
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "bridge", "runsc")
	}
	return "/var/lib/bridge/runsc"
}

// runscDir is RunscDir, made private to root if it is not there, and
// refused when others may read or write it: its bundles hold the runs'
// files.
func runscDir(getenv func(string) string) (string, error) {
	dir := RunscDir(getenv)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("the runsc engine's folder: %w: create it (mode 0700), or set XDG_STATE_HOME to a folder of root's", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("the runsc engine's folder: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("the runsc engine's folder %s has mode %04o, open to other users: `chmod 700 %s`", dir, fi.Mode().Perm(), dir)
	}
	// Its root file systems are every sandbox's: a folder another user
	// owns could have them changed under the sandboxes.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("the runsc engine's folder %s belongs to uid %d, not to the bridge's user (%d): `chown %d %s`, or use another folder (XDG_STATE_HOME)", dir, st.Uid, os.Geteuid(), os.Geteuid(), dir)
	}
	return dir, nil
}
