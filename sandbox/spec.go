package sandbox

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Labels put on every container the bridge creates. Tests and the reaper
// find the bridge's containers by them.
const (
	LabelManaged = "io.github.bridge-mcp.managed"
	LabelRunID   = "io.github.bridge-mcp.run-id"
	// LabelPooled marks a container made ahead of time by the warm pool.
	LabelPooled = "io.github.bridge-mcp.pooled"
)

// Fixed paths inside the container.
const (
	// RelayDir is where the run directory holding the relay socket is
	// bind-mounted, read-only.
	RelayDir = "/run/bridge"
	// RelaySocket is the socket the runner connects to.
	RelaySocket = RelayDir + "/relay.sock"
	// TmpDir is the only writable place in the container, a size-limited tmpfs.
	TmpDir = "/tmp"
	// SandboxUser is the uid:gid the code runs as (nobody:nogroup).
	SandboxUser = "65534:65534"
)

// Environment variables the runner reads.
const (
	EnvRelaySocket = "BRIDGE_RELAY_SOCKET"
	EnvRelayToken  = "BRIDGE_RELAY_TOKEN"
)

// Limits are the resource limits of one run.
type Limits struct {
	// Timeout bounds the code's execution, from the moment it is handed to
	// the runner. The container is killed when it passes.
	Timeout time.Duration
	// Memory is the memory limit in bytes; swap is limited to the same
	// value, so the code gets no swap at all.
	Memory int64
	// CPUs is the CPU quota in cores (1.5 = one and a half cores).
	CPUs float64
	// Pids caps the number of processes and threads in the container.
	Pids int64
	// TmpfsSize is the size of the /tmp tmpfs in bytes.
	TmpfsSize int64
	// NoFile is the RLIMIT_NOFILE (soft and hard) inside the container.
	NoFile uint64
	// NProc is the RLIMIT_NPROC (soft and hard) inside the container. It
	// counts per uid across all containers that share uid 65534, so it is a
	// host-wide backstop set well above Pids; Pids is the per-run cap.
	NProc uint64
	// OutputBytes caps each of stdout and stderr; what is beyond is cut and
	// counted.
	OutputBytes int
	// Mounts are host folders the code reads, under DataDir: read-only,
	// nosuid, nodev and noexec (see DataMount).
	Mounts []DataMount
}

// DefaultLimits are the limits used when nothing else is configured.
func DefaultLimits() Limits {
	return Limits{
		Timeout:     60 * time.Second,
		Memory:      512 << 20,
		CPUs:        1,
		Pids:        128,
		TmpfsSize:   64 << 20,
		NoFile:      1024,
		NProc:       4096,
		OutputBytes: 64 << 10,
	}
}

// Validate reports the first limit that is out of range, in words a user
// can act on.
func (l Limits) Validate() error {
	switch {
	case l.Timeout <= 0:
		return fmt.Errorf("timeout must be positive, got %s", l.Timeout)
	case l.Memory < 16<<20:
		return fmt.Errorf("memory limit must be at least 16 MiB, got %d bytes", l.Memory)
	case math.IsNaN(l.CPUs) || l.CPUs*CPUPeriod < 1000 || l.CPUs > 1024:
		// Below 1 ms per period the kernel refuses the quota and engines
		// silently run without one; NaN and huge values overflow it.
		return fmt.Errorf("cpus must be between 0.01 and 1024, got %g", l.CPUs)
	case l.Pids < 8:
		return fmt.Errorf("pids limit must be at least 8, got %d", l.Pids)
	case l.TmpfsSize < 1<<20:
		return fmt.Errorf("tmpfs size must be at least 1 MiB, got %d bytes", l.TmpfsSize)
	case l.NoFile < 64:
		return fmt.Errorf("nofile limit must be at least 64, got %d", l.NoFile)
	case l.NProc < uint64(l.Pids):
		return fmt.Errorf("nproc limit (%d) must be at least the pids limit (%d)", l.NProc, l.Pids)
	case l.OutputBytes < 1024:
		return fmt.Errorf("output cap must be at least 1 KiB, got %d bytes", l.OutputBytes)
	}
	return validateDataMounts(l.Mounts)
}

// CPUPeriod is the CFS period used to express [Limits.CPUs] as a quota.
const CPUPeriod = 100_000 // microseconds

// Mount is a bind mount from the host into the container.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

// Rlimit is one POSIX resource limit, by its short name ("nofile", "nproc").
type Rlimit struct {
	Name string
	Soft uint64
	Hard uint64
}

// ContainerSpec is the engine-neutral description of one container. Build it
// with NewSpec, which sets every hardening option; backends translate each
// field and must not drop any.
type ContainerSpec struct {
	Name  string
	Image string
	// OCIRuntime is the runtime to run the container with (runc, runsc);
	// "" is the engine's default. A backend that cannot honour it must
	// fail, never run the container with another.
	OCIRuntime string

	Command []string
	Env     map[string]string
	User    string
	Labels  map[string]string
	WorkDir string

	NetworkNone     bool
	ReadOnlyRoot    bool
	CapDropAll      bool
	NoNewPrivileges bool
	Init            bool

	Memory     int64 // bytes
	MemorySwap int64 // bytes, memory plus swap; equal to Memory means no swap
	CPUQuota   int64 // microseconds per CPUPeriod
	CPUPeriod  int64 // microseconds
	Pids       int64
	Rlimits    []Rlimit

	// Tmpfs maps a container path to its mount options.
	Tmpfs  map[string]string
	Mounts []Mount
	// DataMounts are mounted read-only, nosuid, nodev and noexec; a
	// backend that cannot hold all four for the runtime it runs with must
	// refuse to create the container, never mount them with less.
	DataMounts []DataMount
}

// NewSpec returns the hardened spec for one run: no network, read-only root,
// all capabilities dropped, no-new-privileges, uid 65534, an init that reaps
// zombies, cgroup limits, explicit rlimits, a noexec tmpfs as the only
// writable place, the run directory mounted read-only at RelayDir, and
// the limits' data mounts under DataDir.
func NewSpec(runID, image, runDir, token string, l Limits) ContainerSpec {
	return ContainerSpec{
		Name:    "bridge-run-" + runID,
		Image:   image,
		Command: []string{"python3", "-I", "-B", "/opt/bridge/runner.py"},
		Env: map[string]string{
			EnvRelaySocket: RelaySocket,
			EnvRelayToken:  token,
			"HOME":         TmpDir,
			"LANG":         "C.UTF-8",
		},
		User:    SandboxUser,
		Labels:  map[string]string{LabelManaged: "true", LabelRunID: runID},
		WorkDir: TmpDir,

		NetworkNone:     true,
		ReadOnlyRoot:    true,
		CapDropAll:      true,
		NoNewPrivileges: true,
		Init:            true,

		Memory:     l.Memory,
		MemorySwap: l.Memory,
		CPUQuota:   int64(math.Round(l.CPUs * CPUPeriod)),
		CPUPeriod:  CPUPeriod,
		Pids:       l.Pids,
		Rlimits: []Rlimit{
			{Name: "nofile", Soft: l.NoFile, Hard: l.NoFile},
			{Name: "nproc", Soft: l.NProc, Hard: l.NProc},
		},
		Tmpfs: map[string]string{
			TmpDir: "rw,noexec,nosuid,nodev,size=" + strconv.FormatInt(l.TmpfsSize, 10) + ",mode=1777",
		},
		Mounts:     []Mount{{Source: runDir, Target: RelayDir, ReadOnly: true}},
		DataMounts: slices.Clone(l.Mounts),
	}
}

// GVisorHostThreads is what a gVisor sandbox gets on top of the pids limit
// in the host's pids cgroup. Under gVisor the code's processes and threads
// are tasks of gVisor's own kernel, which the host does not see: that cgroup
// counts only the threads of gVisor itself (about 40 idle and 75 under load
// on two cores), and a run killed for lack of them dies with exit code 2.
const GVisorHostThreads = 512

// ForGVisor adapts s to run under gVisor (runsc). gVisor's kernel counts
// RLIMIT_NPROC per sandbox, so it becomes the per-run cap on processes and
// threads (set to Pids); the host's pids cgroup, which sees only gVisor's
// own threads, gets GVisorHostThreads more.
func (s *ContainerSpec) ForGVisor() {
	if s.Pids <= 0 {
		return
	}
	for i := range s.Rlimits {
		if s.Rlimits[i].Name == "nproc" {
			s.Rlimits[i].Soft, s.Rlimits[i].Hard = uint64(s.Pids), uint64(s.Pids)
		}
	}
	s.Pids += GVisorHostThreads
}
