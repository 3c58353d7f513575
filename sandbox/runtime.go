// Package sandbox runs untrusted Python in fresh, hardened, network-less
// containers, and links no engine: an engine is a [Runtime] (the
// [Containers] and [Images] interfaces, runtime.go) that a package of its
// own implements (sandbox/docker, sandbox/podman, sandbox/kubernetes) and
// sandbox/detect opens, given to an [Engine] by whoever wires the bridge
// (engine.go: opened on first use, with its executor and pool). The core
// holds the hardened container spec (spec.go), the OCI runtimes
// (ociruntime.go), and a run's life: an [Instance] acquired (a container
// started for it, instance.go, or a warm one of the pool, pool.go), its
// runner served over the relay socket within the run's host budget
// (conn.go, budget.go), and removed (removals.go; a dead bridge's
// leftovers, reap.go).
package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// Engine names, as a bridge is told which to open ("auto" picks the first
// that answers among Podman and Docker; Kubernetes and runsc only when
// asked for).
const (
	EngineAuto       = "auto"
	EnginePodman     = "podman"
	EngineDocker     = "docker"
	EngineKubernetes = "kubernetes"
	// EngineRunsc is gVisor driven by the bridge itself (sandbox/runsc),
	// as root, with the images of Docker or Podman: the engine that can
	// checkpoint and restore a sandbox.
	EngineRunsc = "runsc"
)

// OtherEngine is the engine that is not engine: EngineDocker for
// EnginePodman and the other way round; "" for any other name.
func OtherEngine(engine string) string {
	switch engine {
	case EnginePodman:
		return EngineDocker
	case EngineDocker:
		return EnginePodman
	}
	return ""
}

// Runtime is one container engine's API as the bridge opened it (a Docker
// or Podman socket, a Kubernetes cluster): the containers it runs
// ([Containers]) and the images it holds ([Images]). The packages
// sandbox/docker, sandbox/podman and sandbox/kubernetes implement it, and
// sandbox/detect opens the one that answers. Two neighbours bear close
// names: an [Engine] is not a Runtime but what opens one on first use (and
// again after it went away) and runs code on it, with its executor and
// pool; an OCI runtime ([ExecutorOptions.OCIRuntime]: runc, crun, runsc)
// is the program the engine starts each container with. Implementations
// talk to the engine's API, never to its CLI. All methods are safe for
// concurrent use.
type Runtime interface {
	Containers
	Images
	// Close releases the connection to the engine.
	Close() error
}

// Containers is the part of an engine that runs containers: what it can
// enforce, whether an image is there to run, and a container's life from
// create to remove. An [Executor] needs this much of an engine.
type Containers interface {
	// Name is the engine's: EngineDocker, EnginePodman, EngineKubernetes
	// or EngineRunsc (or a test's own).
	Name() string
	// Info describes the engine and what it can enforce.
	Info(ctx context.Context) (EngineInfo, error)
	// ImageInfo reports whether ref exists locally. A missing image returns
	// ErrImageNotFound.
	ImageInfo(ctx context.Context, ref string) (ImageInfo, error)
	// Create creates (but does not start) a container and returns its id.
	Create(ctx context.Context, spec ContainerSpec) (string, error)
	// Start starts a created container.
	Start(ctx context.Context, id string) error
	// Wait blocks until the container has exited and reports how.
	Wait(ctx context.Context, id string) (ExitState, error)
	// Kill sends SIGKILL. Killing a container that is not running is not an error.
	Kill(ctx context.Context, id string) error
	// Remove force-removes a container. Removing one that is gone is not an error.
	Remove(ctx context.Context, id string) error
	// Logs returns at most limit bytes of the tail of the container's own
	// stdout and stderr (the runner's diagnostics when it fails early).
	Logs(ctx context.Context, id string, limit int) (string, error)
	// List returns the containers, running or not, that carry all the
	// given labels.
	List(ctx context.Context, labels map[string]string) ([]ContainerInfo, error)
}

// Images is the part of an engine that holds images: package images
// builds the runner images with it.
type Images interface {
	// Name is the engine's: EngineDocker, EnginePodman or
	// EngineKubernetes (or a test's own).
	Name() string
	// ImageInfo reports whether ref exists locally. A missing image returns
	// ErrImageNotFound.
	ImageInfo(ctx context.Context, ref string) (ImageInfo, error)
	// BuildImage builds an image as opts says and writes the build log to
	// opts.Out.
	BuildImage(ctx context.Context, opts BuildOptions) error
}

// BuildOptions say what BuildImage builds.
type BuildOptions struct {
	// ContextDir is the build context, a directory on this machine.
	ContextDir string
	// Dockerfile is the Dockerfile's path relative to ContextDir.
	Dockerfile string
	// Tag names the image built.
	Tag string
	// Target is the stage of a multi-stage Dockerfile to build ("": the
	// last one).
	Target string
	// Args are the build arguments (ARG) and their values.
	Args map[string]string
	// Out receives the build log as plain text (nil: discarded).
	Out io.Writer
}

// EngineInfo is what doctor and the limit checks need to know about an engine.
type EngineInfo struct {
	Name          string `json:"name"`
	Socket        string `json:"socket"`
	Version       string `json:"version"`
	APIVersion    string `json:"api_version"`
	Rootless      bool   `json:"rootless"`
	CgroupVersion string `json:"cgroup_version"` // "1" or "2"
	// OCIRuntime is the runtime a container gets when it asks for none
	// (runc, crun, runsc).
	OCIRuntime string `json:"oci_runtime"`
	// OCIRuntimes are the runtimes a container may ask for by name (Docker's
	// registered runtimes). Nil where every container runs with OCIRuntime:
	// Podman's API cannot choose a runtime per container.
	OCIRuntimes map[string]OCIRuntimeInfo `json:"oci_runtimes,omitempty"`
	// Enforce says which resource limits the engine really applies.
	Enforce Enforcement `json:"enforce"`
}

// Enforcement says which cgroup limits an engine applies to containers.
type Enforcement struct {
	Memory bool `json:"memory"`
	Pids   bool `json:"pids"`
	CPU    bool `json:"cpu"`
	// Reason explains a false above, with what would fix it.
	Reason string `json:"reason,omitempty"`
}

// All reports whether every limit is enforced.
func (e Enforcement) All() bool { return e.Memory && e.Pids && e.CPU }

// ImageInfo describes a local image.
type ImageInfo struct {
	ID      string            `json:"id"`
	Created time.Time         `json:"created"`
	Size    int64             `json:"size"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// ContainerInfo is one entry of [Containers.List].
type ContainerInfo struct {
	ID     string
	Labels map[string]string
}

// ExitState is how a container ended.
type ExitState struct {
	ExitCode  int
	OOMKilled bool
	// OOMGuessed means the engine cannot report OOM kills; OOMKilled was
	// inferred from SIGKILL under a memory limit.
	OOMGuessed bool
}

// Sentinel errors that callers branch on. Backends wrap them with the detail
// a user needs (socket path tried, image name).
var (
	// ErrEngineUnreachable means the engine's API socket could not be reached.
	ErrEngineUnreachable = errors.New("container engine unreachable")
	// ErrEngineDenied means the engine's API socket refused this user
	// (permission denied). An error that wraps it also wraps
	// ErrEngineUnreachable, and an *AccessError says what would let the
	// user in.
	ErrEngineDenied = errors.New("permission denied on the container engine socket")
	// ErrImageNotFound means the runner image is not present locally.
	// Backends say which image and where; what to do about it depends on
	// the image (see [ExecutorOptions.ImageHint]).
	ErrImageNotFound = errors.New("image not found")
	// ErrNotFound means a container is gone.
	ErrNotFound = errors.New("container not found")
	// ErrLimitsNotEnforced means the engine would silently drop a requested limit.
	ErrLimitsNotEnforced = errors.New("resource limits cannot be enforced")
	// ErrNoRoom means a Start gave up because the engine had no room for
	// the container and its caller took another one ([WithNoRoom]).
	ErrNoRoom = errors.New("no room for the container")
)
