// Package runsc is the gVisor engine: a [sandbox.Runtime] that drives the
// runsc binary itself, with OCI bundles it writes, so that a sandbox can be
// checkpointed and restored (Checkpoint, Restore, Wake). Docker and Podman
// run gVisor too, but neither can manage a restored sandbox
// (docs/architecture.md, "Snapshots are files first, and whole where the
// runtime can"). The images stay
// another engine's ([Exporter]: Docker or Podman builds and holds them); a
// bundle's root file system is the image exported once into a cache folder
// per image id, never changed afterwards, since a restore reopens its files
// by path.
//
// sandbox/detect opens it as the engine "runsc" (as root, over the Docker
// or Podman client that exports the images); it is the core's
// [sandbox.Checkpointer], which saves sessions whole (sandbox/checkpoint.go).
package runsc

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
)

// Exporter is the engine that holds the runner images: it builds them and
// says what they are ([sandbox.Images]), and exports one's file system for
// a bundle's root. sandbox/detect gives one over Docker or Podman.
type Exporter interface {
	sandbox.Images
	// Export writes the file system of image ref to w as a tar stream (what
	// a container of it, created and exported, holds) and returns the
	// image's environment (its ENV, as NAME=value): a container starts with
	// it under the spec's own.
	Export(ctx context.Context, ref string, w io.Writer) (env []string, err error)
}

// Options say where and how a [Client] runs runsc.
type Options struct {
	// Command runs runsc: its path or name, behind a prefix if need be
	// ("sudo", "-n", "runsc"). runsc needs root. Default: runsc on PATH.
	Command []string
	// Dir holds the bundles, their logs and the root file systems, private
	// to the bridge's user (made 0700). Required.
	Dir string
	// Root is runsc's state folder (--root). Default: Dir/state.
	Root string
	// CgroupParent is the cgroup under which each sandbox gets its own
	// (two sandboxes in one cgroup make gVisor panic on its pids limit).
	// Default: /bridge.
	CgroupParent string
	// Init is the host's path of a static init (tini-static; Docker's
	// docker-init is one), bind-mounted read-only as the container's first
	// process for a spec that asks for one. Required for such a spec.
	Init string
	// Images builds, describes and exports the images. Required.
	Images Exporter
	// OCISeccomp has gVisor apply the bundle's seccomp filter (the
	// bridge's profile) inside the sandbox, as well as its own outside.
	// Off by default, as runsc is under Docker or Podman: it needs a runsc
	// that honours a rule's errnoRet (Debian's 2022-12 one answers EPERM
	// where the profile says ENOSYS, so glibc does not fall back from
	// clone3 to clone and Python cannot start a thread).
	OCISeccomp bool
}

// Client is the [sandbox.Runtime] that runs each container as a gVisor
// sandbox with runsc, from a bundle of its own in Options.Dir.
type Client struct {
	opts Options
	// rootfsMu makes one export at a time: two creates of a new image
	// export it once.
	rootfsMu sync.Mutex
	mu       sync.Mutex
	// cgroupRoot is where the host's cgroups are mounted (a test's folder
	// in tests).
	cgroupRoot string
	procs      map[string]*proc       // the sandboxes this client started, by id
	logs       map[string]*sandboxLog // their stdout and stderr, by id
}

var _ sandbox.Runtime = (*Client)(nil)

// proc is a sandbox this client started: its end, once `runsc wait` told it.
type proc struct {
	done  chan struct{}
	state sandbox.ExitState
	err   error
}

// Name of the engine, as sandbox.Containers reports it.
const Name = "runsc"

// New checks opts and that runsc answers, and makes the folders.
func New(ctx context.Context, opts Options) (*Client, error) {
	if len(opts.Command) == 0 {
		opts.Command = []string{"runsc"}
	}
	if opts.Dir == "" || !filepath.IsAbs(opts.Dir) {
		return nil, fmt.Errorf("runsc engine: Options.Dir must be an absolute folder for the bundles, got %q", opts.Dir)
	}
	if opts.Images == nil {
		return nil, errors.New("runsc engine: Options.Images must be the engine that holds the runner images (Docker or Podman)")
	}
	opts.Root = cmp.Or(opts.Root, filepath.Join(opts.Dir, "state"))
	opts.CgroupParent = cmp.Or(opts.CgroupParent, "/bridge")
	if !strings.HasPrefix(opts.CgroupParent, "/") {
		return nil, fmt.Errorf("runsc engine: Options.CgroupParent must be a cgroup path starting with /, got %q", opts.CgroupParent)
	}
	if _, err := exec.LookPath(opts.Command[0]); err != nil {
		return nil, fmt.Errorf("%w: runsc engine: %v; install gVisor (https://gvisor.dev/docs/user_guide/install/) or set its path", sandbox.ErrEngineUnreachable, err)
	}
	for _, d := range []string{opts.Dir, opts.Root, filepath.Join(opts.Dir, "bundles"), filepath.Join(opts.Dir, "rootfs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runsc engine: %w", err)
		}
	}
	c := &Client{opts: opts, cgroupRoot: "/sys/fs/cgroup", procs: map[string]*proc{}, logs: map[string]*sandboxLog{}}
	if _, err := c.version(ctx); err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrEngineUnreachable, err)
	}
	return c, nil
}

// Name implements [sandbox.Runtime].
func (c *Client) Name() string { return Name }

// Close implements [sandbox.Runtime]: it closes the Exporter when that is
// an engine's client (an io.Closer: sandbox/detect opens it for this
// Client alone). The sandboxes keep running, as an engine's containers do
// when its client goes.
func (c *Client) Close() error {
	if cl, ok := c.opts.Images.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// ImageInfo implements [sandbox.Runtime], through the Exporter's engine.
func (c *Client) ImageInfo(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	return c.opts.Images.ImageInfo(ctx, ref)
}

// BuildImage implements [sandbox.Runtime], through the Exporter's engine.
func (c *Client) BuildImage(ctx context.Context, opts sandbox.BuildOptions) error {
	return c.opts.Images.BuildImage(ctx, opts)
}

// runFlags are the global flags of the commands that start a sandbox: no
// network (a loopback only), and connect() allowed to host sockets the
// sandbox was given (the relay socket; without it the runner gets EPERM);
// with o.OCISeccomp, the bundle's seccomp filter applied inside it.
func runFlags(o Options) []string {
	flags := []string{"--network=none", "--host-uds=open"}
	if o.OCISeccomp {
		flags = append(flags, "--oci-seccomp")
	}
	return flags
}

// command is runsc with its --root and args, run in dir, its stdout to
// stdout (nil: kept, and returned).
func (c *Client) command(ctx context.Context, dir string, stdout io.Writer, args ...string) ([]byte, error) {
	argv := append(slices.Clone(c.opts.Command[1:]), "--root", c.opts.Root)
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, c.opts.Command[0], argv...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = cmp.Or[io.Writer](stdout, &out)
	tail := engines.NewLogTail(4096)
	if stdout == nil {
		cmd.Stderr = tail
	} else {
		cmd.Stderr = stdout
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("runsc %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(tail.String()))
	}
	return out.Bytes(), nil
}

// version is runsc's first line of --version.
func (c *Client) version(ctx context.Context) (string, error) {
	out, err := c.command(ctx, "", nil, "--version")
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(strings.TrimPrefix(line, "runsc version ")), nil
}

// Info implements [sandbox.Runtime]. Limits hold through the sandbox's own
// cgroup (cgroupsPath), where the host has the controllers mounted.
func (c *Client) Info(ctx context.Context) (sandbox.EngineInfo, error) {
	v, err := c.version(ctx)
	if err != nil {
		return sandbox.EngineInfo{}, fmt.Errorf("%w: %v", sandbox.ErrEngineUnreachable, err)
	}
	cg, enforce := cgroupEnforcement(c.cgroupRoot)
	return sandbox.EngineInfo{
		Name: Name, Socket: c.opts.Command[len(c.opts.Command)-1], Version: v, CgroupVersion: cg,
		OCIRuntime: sandbox.OCIRuntimeRunsc, Enforce: enforce,
		Rootless: false, // runsc runs as root; its sandbox drops to nobody
	}, nil
}

// cgroupEnforcement is the cgroup version under root ("1" or "2") and the
// limits a sandbox's cgroup there can hold.
func cgroupEnforcement(root string) (string, sandbox.Enforcement) {
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		have := strings.Fields(string(b))
		e := sandbox.Enforcement{Memory: slices.Contains(have, "memory"), CPU: slices.Contains(have, "cpu"), Pids: slices.Contains(have, "pids")}
		if !e.All() {
			e.Reason = "the cgroup v2 root lacks a controller of memory, cpu and pids (" + strings.Join(have, " ") + ")"
		}
		return "2", e
	}
	dir := func(name string) bool { st, err := os.Stat(filepath.Join(root, name)); return err == nil && st.IsDir() }
	e := sandbox.Enforcement{Memory: dir("memory"), CPU: dir("cpu"), Pids: dir("pids")}
	if !e.All() {
		e.Reason = "a cgroup v1 controller of memory, cpu and pids is not mounted under " + root
	}
	return "1", e
}

// containerState is what `runsc state` says of a container.
type containerState struct {
	ID     string `json:"id"`
	Status string `json:"status"` // created, running, stopped
	Pid    int    `json:"pid"`
}

// state is runsc's state of container id; ErrNotFound when runsc has none.
func (c *Client) state(ctx context.Context, id string) (containerState, error) {
	out, err := c.command(ctx, "", nil, "state", id)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "no such file") {
			return containerState{}, fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
		}
		return containerState{}, err
	}
	var st containerState
	if err := json.Unmarshal(out, &st); err != nil {
		return containerState{}, fmt.Errorf("runsc state %s: %w", id, err)
	}
	return st, nil
}
