package runsc

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Paths inside the sandbox that the bundle adds to the spec's.
const (
	// InitPath is where Options.Init is mounted, and what the sandbox
	// starts for a spec with Init: it reaps orphans and passes signals on
	// (the runner's SIGUSR1 after a restore).
	InitPath = "/sbin/bridge-init"
	// TokenFile is where the runner reads a restored sandbox's relay token:
	// a file of the run folder, which is mounted at sandbox.RelayDir.
	TokenFile = sandbox.RelayDir + "/token"
	// EnvTokenFile names TokenFile for the runner; Create sets it, and the
	// runner then can park (docs/protocol.md, "Parking").
	EnvTokenFile = "BRIDGE_RELAY_TOKEN_FILE"
)

// shmOptions are /dev/shm's, as the engines make it (64 MB, noexec).
const shmOptions = "rw,nosuid,nodev,noexec,mode=1777,size=67108864"

// validID is what runsc takes as a container id, and a folder name.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// stateFile is kept in each bundle: what List reports of it.
type stateFile struct {
	ID    string `json:"id"`
	Image string `json:"image"`
	// ImageID is the image the root file system is of (sha256:...): what
	// a checkpoint of the sandbox is restored on.
	ImageID string            `json:"image_id,omitempty"`
	Labels  map[string]string `json:"labels"`
}

// bundleConfig is the OCI config.json of spec's sandbox id: the root file
// system at rootfs (read-only as asked), the image's env under the spec's,
// and every hardening field of spec (a field the bundle cannot hold is an
// error, never dropped).
func bundleConfig(spec sandbox.ContainerSpec, id, rootfs string, imageEnv []string, o Options) (*specs.Spec, error) {
	if err := checkSpec(spec, o); err != nil {
		return nil, err
	}
	uid, gid, err := parseUser(spec.User)
	if err != nil {
		return nil, err
	}
	args := slices.Clone(spec.Command)
	if spec.Init {
		args = append([]string{InitPath, "--"}, args...)
	}
	proc := &specs.Process{
		User:            specs.User{UID: uid, GID: gid},
		Args:            args,
		Env:             mergeEnv(imageEnv, spec.Env),
		Cwd:             cmp.Or(spec.WorkDir, "/"),
		NoNewPrivileges: spec.NoNewPrivileges,
		Capabilities:    &specs.LinuxCapabilities{Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{}},
	}
	for _, rl := range spec.Rlimits {
		proc.Rlimits = append(proc.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_" + strings.ToUpper(rl.Name), Hard: rl.Hard, Soft: rl.Soft})
	}
	seccomp, err := ociSeccomp(engines.SeccompProfile(), runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	return &specs.Spec{
		Version:     "1.0.2",
		Root:        &specs.Root{Path: rootfs, Readonly: spec.ReadOnlyRoot},
		Process:     proc,
		Hostname:    "sandbox",
		Mounts:      bundleMounts(spec, o),
		Annotations: maps.Clone(spec.Labels),
		Linux: &specs.Linux{
			CgroupsPath: o.CgroupParent + "/" + id,
			Resources:   resources(spec),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			Seccomp: seccomp,
		},
	}, nil
}

// checkSpec refuses what this engine cannot make as spec asks.
func checkSpec(spec sandbox.ContainerSpec, o Options) error {
	switch {
	case spec.OCIRuntime != "" && sandbox.OCIRuntimeName(spec.OCIRuntime) != sandbox.OCIRuntimeRunsc:
		return fmt.Errorf("%w: the runsc engine runs every container with runsc, not %s", sandbox.ErrOCIRuntime, spec.OCIRuntime)
	case len(spec.DataMounts) > 0:
		return fmt.Errorf("%w: the runsc engine does not take the policy's mounts yet; remove them, or use the docker or podman engine", sandbox.ErrDataMountsGVisor)
	case !spec.NetworkNone:
		return fmt.Errorf("the runsc engine runs sandboxes without a network only; the spec asks for one")
	case spec.Init && o.Init == "":
		return fmt.Errorf("the spec asks for an init: set the runsc engine's Options.Init to a static init on this host (tini-static, or Docker's docker-init)")
	case !spec.CapDropAll:
		return fmt.Errorf("the runsc engine drops every capability; the spec keeps some")
	}
	return nil
}

// parseUser reads "uid:gid" (numbers only: the sandbox's /etc/passwd is
// not read).
func parseUser(user string) (uint32, uint32, error) {
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("the runsc engine takes the user as uid:gid in numbers, got %q", user)
	}
	return uint32(uid), uint32(gid), nil
}

// mergeEnv is the image's environment with the spec's over it, sorted.
func mergeEnv(image []string, spec map[string]string) []string {
	env := map[string]string{}
	for _, kv := range image {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	maps.Copy(env, spec)
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// resources are the cgroup limits of spec. Swap equals memory: no swap.
func resources(spec sandbox.ContainerSpec) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if spec.Memory > 0 {
		mem, swap := spec.Memory, spec.MemorySwap
		r.Memory = &specs.LinuxMemory{Limit: &mem, Swap: &swap}
	}
	if spec.CPUQuota > 0 {
		q, p := spec.CPUQuota, uint64(spec.CPUPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	if spec.Pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: spec.Pids}
	}
	return r
}

// bundleMounts are the sandbox's file systems: gVisor's own /proc, /dev
// and /sys, /dev/shm, the spec's tmpfs and binds (the run folder), and the
// init.
func bundleMounts(spec sandbox.ContainerSpec, o Options) []specs.Mount {
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: strings.Split(shmOptions, ",")},
	}
	for _, dst := range slices.Sorted(maps.Keys(spec.Tmpfs)) {
		ms = append(ms, specs.Mount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: strings.Split(spec.Tmpfs[dst], ",")})
	}
	for _, m := range spec.Mounts {
		opts := []string{"bind", "nosuid", "nodev", "noexec"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		ms = append(ms, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: opts})
	}
	if spec.Init {
		ms = append(ms, specs.Mount{Destination: InitPath, Type: "bind", Source: o.Init, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	return ms
}

// writeBundle writes dir/config.json and dir/state.json for spec.
func writeBundle(dir string, cfg *specs.Spec, st stateFile) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, v := range map[string]any{"config.json": cfg, "state.json": st} {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// seccompProfile is the part of the bridge's profile (Docker's format)
// that the OCI form needs.
type seccompProfile struct {
	DefaultAction   string `json:"defaultAction"`
	DefaultErrnoRet uint   `json:"defaultErrnoRet"`
	ArchMap         []struct {
		Arch string   `json:"architecture"`
		Sub  []string `json:"subArchitectures"`
	} `json:"archMap"`
	Syscalls []struct {
		Names    []string                `json:"names"`
		Action   string                  `json:"action"`
		ErrnoRet uint                    `json:"errnoRet"`
		Args     []specs.LinuxSeccompArg `json:"args"`
		Includes *struct {
			Arches []string `json:"arches"`
		} `json:"includes"`
	} `json:"syscalls"`
}

// ociArch are the seccomp architectures of a Go GOARCH, as Docker's
// profiles name them in includes.
var ociArch = map[string]string{"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}

// ociSeccomp is the bridge's seccomp profile (engines.SeccompProfile, in
// Docker's format) in the OCI form, for goarch: its architecture and
// sub-architectures, and the rules that apply there.
func ociSeccomp(profile []byte, goarch string) (*specs.LinuxSeccomp, error) {
	var p seccompProfile
	if err := json.Unmarshal(profile, &p); err != nil {
		return nil, fmt.Errorf("the bridge's seccomp profile: %w", err)
	}
	arch, ok := ociArch[goarch]
	if !ok {
		return nil, fmt.Errorf("the runsc engine runs on amd64 and arm64 only, not %s", goarch)
	}
	s := &specs.LinuxSeccomp{DefaultAction: specs.LinuxSeccompAction(p.DefaultAction)}
	if p.DefaultErrnoRet != 0 {
		s.DefaultErrnoRet = &p.DefaultErrnoRet
	}
	for _, a := range p.ArchMap {
		if a.Arch == arch {
			s.Architectures = append(s.Architectures, specs.Arch(a.Arch))
			for _, sub := range a.Sub {
				s.Architectures = append(s.Architectures, specs.Arch(sub))
			}
		}
	}
	for _, r := range p.Syscalls {
		if r.Includes != nil && len(r.Includes.Arches) > 0 && !slices.Contains(r.Includes.Arches, goarch) {
			continue
		}
		sc := specs.LinuxSyscall{Names: r.Names, Action: specs.LinuxSeccompAction(r.Action), Args: r.Args}
		if r.ErrnoRet != 0 {
			errno := r.ErrnoRet
			sc.ErrnoRet = &errno
		}
		s.Syscalls = append(s.Syscalls, sc)
	}
	if len(s.Architectures) == 0 || len(s.Syscalls) == 0 {
		return nil, fmt.Errorf("the bridge's seccomp profile has no rule for %s", arch)
	}
	return s, nil
}
