// Package podman is the Podman engine: a [sandbox.Runtime] over Podman's
// libpod REST API through its v5 bindings
// (github.com/containers/podman/v5/pkg/bindings), the hardened container
// spec as a specgen.SpecGenerator, and image builds.
package podman

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
	buildahDefine "github.com/containers/buildah/define"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/system"
	entTypes "github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
)

var _ sandbox.Runtime = (*Client)(nil)

// podmanLogSizeMax caps the log file conmon keeps for a container's own
// stdout and stderr. When it is full conmon truncates it and goes on, so a
// run that floods its stdout cannot fill the host's disk; Logs only ever
// needs the tail.
const podmanLogSizeMax = 1 << 20

// podmanHostname is the hostname inside every container, so nothing of the
// host's name or the container id shows through.
const podmanHostname = "sandbox"

// Client is the [sandbox.Runtime] backed by the Podman REST API (libpod
// endpoints), driven through the v5 bindings. It never runs the podman CLI.
type Client struct {
	// conn carries the bindings connection as context values. It is never
	// cancelled: each call merges it with the caller's context (see call).
	conn context.Context
	// uri is the socket URI as given, path the socket path for messages.
	uri, path string
	// oomUnreported is set for services older than 5.0: they run conmon
	// without --persist-dir, so conmon writes its "oom" marker into its
	// working directory and the service never sets State.OOMKilled
	// (containers/conmon#504). Wait then infers OOM kills (see Wait).
	oomUnreported bool
	// killed holds the ids Kill was called for, so that Wait does not
	// mistake our own SIGKILL for the OOM killer's.
	killed sync.Map
	// seccomp is the bridge's seccomp profile as a file (sandbox/internal/engines).
	seccomp engines.SeccompFile
}

// New connects to the Podman API service at socketURI, e.g.
// "unix:///run/podman/podman.sock" (rootful) or
// "unix:///run/user/1000/podman/podman.sock" (rootless). A socket that
// cannot be reached returns an error wrapping ErrEngineUnreachable; one that
// refuses this user, an *AccessError.
func New(ctx context.Context, socketURI string) (*Client, error) {
	path := podmanSocketPath(socketURI)
	conn, err := bindings.NewConnection(ctx, socketURI)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, fmt.Errorf("connecting to the podman API socket at %s: %w", path, ctx.Err())
		}
		return nil, podmanUnreachable(socketURI, path, err)
	}
	// Keep the connection's values but not the cancellation of the ctx it
	// was made with: New's ctx may end long before the Podman does.
	return &Client{
		conn:          context.WithoutCancel(conn),
		uri:           socketURI,
		path:          path,
		oomUnreported: bindings.ServiceVersion(conn).Major < 5,
	}, nil
}

// podmanSocketPath is the file system path of a unix:// URI, or the URI itself.
func podmanSocketPath(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "unix" {
		return uri
	}
	if u.Host != "" { // unix://run/x.sock, which the bindings read as /run/x.sock
		return "/" + u.Host + u.Path
	}
	return u.Path
}

// podmanUnreachableError is an engine connection failure: its text says what to
// do, and it wraps both ErrEngineUnreachable and the cause.
type podmanUnreachableError struct {
	msg   string
	cause error
}

func (e *podmanUnreachableError) Error() string { return e.msg }
func (e *podmanUnreachableError) Unwrap() []error {
	return []error{sandbox.ErrEngineUnreachable, e.cause}
}

func podmanUnreachable(uri, path string, cause error) error {
	if errors.Is(cause, fs.ErrPermission) && path != uri {
		return sandbox.NewAccessError(sandbox.EnginePodman, path, cause)
	}
	return &podmanUnreachableError{
		msg: fmt.Sprintf("podman API socket not reachable at %s: start it with `podman system service --time=0 %s` "+
			"(rootless: `systemctl --user start podman.socket`), or run `bridge doctor` (%v)",
			path, uri, cause),
		cause: cause,
	}
}

// podmanConnCtx is the caller's context (deadline, cancellation, values) with the
// bindings connection's values layered on top.
type podmanConnCtx struct {
	context.Context
	conn context.Context
}

func (c podmanConnCtx) Value(key any) any {
	if v := c.conn.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// call returns the context to hand to the bindings for one call made under ctx.
func (p *Client) call(ctx context.Context) context.Context {
	return podmanConnCtx{Context: ctx, conn: p.conn}
}

// podmanAPICode is the HTTP status of an error the service returned, or 0.
func podmanAPICode(err error) int {
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) {
		return em.ResponseCode
	}
	var pem *errorhandling.PodConflictErrorModel
	if errors.As(err, &pem) {
		return pem.Code()
	}
	return 0
}

// podmanAPICause is the cause the service gave for an error ("container state
// improper", "image not known"), or "". Older services (4.x) answer 500 with
// such a cause where newer ones use 404 or 409.
func podmanAPICause(err error) string {
	var em *errorhandling.ErrorModel
	if errors.As(err, &em) {
		return em.Because
	}
	return ""
}

// wrap adds what is needed to act on an error from the bindings: the
// operation, and ErrEngineUnreachable when the socket could not be dialled.
func (p *Client) wrap(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("podman: %s: %w (%v)", op, ctxErr, err)
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return fmt.Errorf("podman: %s: %w", op, podmanUnreachable(p.uri, p.path, err))
	}
	return fmt.Errorf("podman: %s: %w", op, err)
}

// Name implements [sandbox.Runtime].
func (p *Client) Name() string { return "podman" }

// Info implements [sandbox.Runtime].
func (p *Client) Info(ctx context.Context) (sandbox.EngineInfo, error) {
	info, err := system.Info(p.call(ctx), nil)
	if err != nil {
		return sandbox.EngineInfo{}, p.wrap(ctx, "reading engine info", err)
	}
	ei := sandbox.EngineInfo{
		Name:       p.Name(),
		Socket:     p.uri,
		Version:    info.Version.Version,
		APIVersion: info.Version.APIVersion,
	}
	var controllers []string
	if h := info.Host; h != nil {
		ei.Rootless = h.Security.Rootless
		ei.CgroupVersion = strings.TrimPrefix(h.CgroupsVersion, "v")
		if h.OCIRuntime != nil {
			ei.OCIRuntime = sandbox.OCIRuntimeName(h.OCIRuntime.Name)
		}
		controllers = h.CgroupControllers
	}
	ei.Enforce = podmanEnforcement(ei.Rootless, ei.CgroupVersion, controllers)
	return ei, nil
}

// podmanEnforcement says which limits Podman applies given how it runs.
func podmanEnforcement(rootless bool, cgroupVersion string, controllers []string) sandbox.Enforcement {
	if rootless && cgroupVersion == "1" {
		return sandbox.Enforcement{Reason: "rootless Podman on cgroup v1 ignores memory, pids and CPU limits " +
			"(the kernel gives unprivileged users no cgroup delegation): run Podman rootful, " +
			"or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"}
	}
	if cgroupVersion != "1" && cgroupVersion != "2" {
		return sandbox.Enforcement{Reason: fmt.Sprintf("podman reported an unknown cgroup version %q, so no limit can be "+
			"assumed to hold: check `podman info` (host.cgroupVersion) or run `bridge doctor`", cgroupVersion)}
	}
	e := sandbox.Enforcement{
		Memory: slices.Contains(controllers, "memory"),
		Pids:   slices.Contains(controllers, "pids"),
		CPU:    slices.Contains(controllers, "cpu"),
	}
	if e.All() {
		return e
	}
	var missing []string
	for _, c := range []struct {
		name string
		ok   bool
	}{{"memory", e.Memory}, {"pids", e.Pids}, {"cpu", e.CPU}} {
		if !c.ok {
			missing = append(missing, c.name)
		}
	}
	list := strings.Join(missing, ", ")
	switch {
	case rootless: // cgroup v2
		e.Reason = fmt.Sprintf("rootless Podman on cgroup v2 has no %s cgroup controller delegated to this user, "+
			"so those limits are ignored: delegate them (systemd: create /etc/systemd/system/user@.service.d/delegate.conf "+
			"with \"[Service]\\nDelegate=memory pids cpu\", run `systemctl daemon-reload` and log in again), or run Podman rootful",
			list)
	case cgroupVersion == "2":
		e.Reason = fmt.Sprintf("the %s cgroup controller is not enabled for Podman's cgroups, so those limits are ignored: "+
			"enable it in cgroup.subtree_control of /sys/fs/cgroup and of the parents of Podman's cgroup", list)
	default:
		e.Reason = fmt.Sprintf("the %s cgroup v1 controller is not mounted under /sys/fs/cgroup, so those limits are ignored: "+
			"enable it in the kernel and mount it, or boot with cgroup v2", list)
	}
	return e
}

// ImageInfo implements [sandbox.Runtime].
func (p *Client) ImageInfo(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	img, err := images.GetImage(p.call(ctx), ref, nil)
	if err != nil {
		if podmanAPICode(err) == http.StatusNotFound || podmanAPICause(err) == "image not known" {
			return sandbox.ImageInfo{}, fmt.Errorf("podman: %w: %s is not in the local storage of %s", sandbox.ErrImageNotFound, ref, p.path)
		}
		return sandbox.ImageInfo{}, p.wrap(ctx, fmt.Sprintf("inspecting image %q", ref), err)
	}
	if img == nil || img.ImageData == nil {
		return sandbox.ImageInfo{}, fmt.Errorf("podman: inspecting image %q: empty answer from the service", ref)
	}
	ii := sandbox.ImageInfo{ID: img.ID, Size: img.Size, Labels: img.Labels}
	if img.Created != nil {
		ii.Created = *img.Created
	}
	if len(ii.Labels) == 0 && img.Config != nil {
		ii.Labels = img.Config.Labels
	}
	return ii, nil
}

// BuildImage implements [sandbox.Runtime]. The build context is sent as a tarball, so
// opts.ContextDir is any directory on this machine.
func (p *Client) BuildImage(ctx context.Context, bo sandbox.BuildOptions) error {
	contextDir, dockerfile, tag, out := bo.ContextDir, bo.Dockerfile, bo.Tag, bo.Out
	dir, err := filepath.Abs(contextDir)
	if err != nil {
		return fmt.Errorf("podman: build context %q: %w", contextDir, err)
	}
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("podman: build context: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("podman: build context %s is not a directory", dir)
	}
	// The bindings resolve a relative Dockerfile against the process's
	// working directory, not the context: make it absolute here.
	df := dockerfile
	if !filepath.IsAbs(df) {
		df = filepath.Join(dir, df)
	}
	if _, err := os.Stat(df); err != nil {
		return fmt.Errorf("podman: Dockerfile: %w", err)
	}
	if out == nil {
		out = io.Discard
	}
	opts := entTypes.BuildOptions{BuildOptions: buildahDefine.BuildOptions{
		ContextDirectory:        dir,
		Output:                  tag,
		Target:                  bo.Target,
		Args:                    bo.Args,
		Out:                     out,
		Err:                     out,
		ReportWriter:            out,
		RemoveIntermediateCtrs:  true,
		ForceRmIntermediateCtrs: true,
		Layers:                  true,
		OutputFormat:            buildahDefine.OCIv1ImageManifest,
		PullPolicy:              buildahDefine.PullIfMissing,
	}}
	if _, err := images.Build(p.call(ctx), []string{df}, opts); err != nil {
		return p.wrap(ctx, fmt.Sprintf("building image %s from %s", tag, df), err)
	}
	return nil
}

// Create implements [sandbox.Runtime].
func (p *Client) Create(ctx context.Context, cs sandbox.ContainerSpec) (string, error) {
	for _, m := range cs.Mounts {
		if _, err := os.Stat(m.Source); err != nil {
			return "", fmt.Errorf("podman: bind mount source for %s: %w", m.Target, err)
		}
	}
	if err := sandbox.CheckDataMountHosts(cs.DataMounts); err != nil {
		return "", fmt.Errorf("podman: creating container %s: %w", cs.Name, err)
	}
	s := podmanSpec(cs)
	// The bridge's own seccomp profile (sandbox/internal/engines).
	prof, err := p.seccomp.Get()
	if err != nil {
		return "", fmt.Errorf("podman: %w", err)
	}
	s.SeccompProfilePath = prof
	if err := s.Validate(); err != nil {
		return "", fmt.Errorf("podman: invalid container spec: %w", err)
	}
	resp, err := containers.CreateWithSpec(p.call(ctx), s, nil)
	if err != nil {
		if podmanAPICode(err) == http.StatusNotFound || podmanAPICause(err) == "image not known" {
			return "", fmt.Errorf("podman: creating container %s: %w: %s is not in the local storage of %s",
				cs.Name, sandbox.ErrImageNotFound, cs.Image, p.path)
		}
		return "", p.wrap(ctx, fmt.Sprintf("creating container %s from image %q", cs.Name, cs.Image), err)
	}
	// The service drops a limit it cannot apply with only a warning (e.g.
	// rootless on cgroup v1): never run a container without its limits.
	if err := engines.RefuseDroppedLimits(ctx, p.Remove, "podman: creating container "+cs.Name, resp.ID, resp.Warnings); err != nil {
		return "", err
	}
	if cs.OCIRuntime != "" {
		// The service ignores a per-container runtime (Podman 4.3 to 5.x
		// alike) and uses its own default: check what it really chose.
		got := "unknown"
		if data, err := containers.Inspect(p.call(ctx), resp.ID, nil); err != nil {
			got += " (" + p.wrap(ctx, "inspecting container "+resp.ID, err).Error() + ")"
		} else if data != nil {
			got = data.OCIRuntime
		}
		if err := engines.CheckRuntimeOf(ctx, p.Remove, "podman: creating container "+cs.Name, resp.ID, cs.OCIRuntime, got); err != nil {
			return "", err
		}
	}
	return resp.ID, nil
}

// podmanSpec translates every field of cs into a SpecGenerator. It is pure,
// so tests can check each hardening option without an engine.
func podmanSpec(cs sandbox.ContainerSpec) *specgen.SpecGenerator {
	s := specgen.NewSpecGenerator(cs.Image, false)
	s.RawImageName = cs.Image
	s.Name = cs.Name
	// Services up to 5.x ignore it (Create checks what they chose).
	s.OCIRuntime = cs.OCIRuntime
	if len(cs.Command) > 0 {
		// The command is exactly cs.Command: no image ENTRYPOINT in front,
		// no image CMD after.
		s.Entrypoint = slices.Clone(cs.Command[:1])
		s.Command = slices.Clone(cs.Command[1:])
	}
	if len(cs.Env) > 0 {
		s.Env = make(map[string]string, len(cs.Env))
		for k, v := range cs.Env {
			s.Env[k] = v
		}
	}
	s.User = cs.User
	if len(cs.Labels) > 0 {
		s.Labels = make(map[string]string, len(cs.Labels))
		for k, v := range cs.Labels {
			s.Labels[k] = v
		}
	}
	s.WorkDir = cs.WorkDir

	podmanHygiene(s)
	podmanHardening(s, cs)
	s.ResourceLimits, s.Rlimits = podmanResources(cs)
	s.Mounts = podmanMounts(cs)
	return s
}

// podmanHygiene sets what holds for every container: nothing of the host's
// environment, proxy settings, hostname or cgroup paths leaks in; private
// pid, ipc and uts namespaces even if containers.conf says otherwise; the
// image cannot add writable volumes; a stop is an immediate SIGKILL; the
// log file is capped.
func podmanHygiene(s *specgen.SpecGenerator) {
	s.EnvHost = podmanPtr(false)
	s.HTTPProxy = podmanPtr(false)
	s.Hostname = podmanHostname
	// resolv.conf comes from the image: Podman's would copy the host's
	// DNS servers, of no use without a network. /etc/hosts stays Podman's
	// (localhost must resolve, and images often have no /etc/hosts).
	s.UseImageResolvConf = podmanPtr(true)
	s.UtsNS = specgen.Namespace{NSMode: specgen.Private}
	s.PidNS = specgen.Namespace{NSMode: specgen.Private}
	s.IpcNS = specgen.Namespace{NSMode: specgen.Private}
	// A private cgroup namespace hides the host's cgroup layout (the
	// default on cgroup v1 is the host's).
	s.CgroupNS = specgen.Namespace{NSMode: specgen.Private}
	s.ImageVolumeMode = "ignore"
	s.Systemd = "false"
	s.Privileged = podmanPtr(false)
	s.Terminal = podmanPtr(false)
	s.Stdin = podmanPtr(false)
	s.StopTimeout = podmanPtr(uint(0))
	s.LogConfiguration = &specgen.LogConfig{Driver: "k8s-file", Size: podmanLogSizeMax}
}

// podmanHardening applies the spec's hardening switches.
func podmanHardening(s *specgen.SpecGenerator, cs sandbox.ContainerSpec) {
	if cs.NetworkNone {
		s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	}
	if cs.ReadOnlyRoot {
		s.ReadOnlyFilesystem = podmanPtr(true)
		// Podman would otherwise mount writable tmpfs on /run, /tmp and
		// /var/tmp of a read-only container.
		s.ReadWriteTmpfs = podmanPtr(false)
	}
	if cs.CapDropAll {
		s.CapDrop = []string{"ALL"}
	}
	if cs.NoNewPrivileges {
		s.NoNewPrivileges = podmanPtr(true)
	}
	if cs.Init {
		s.Init = podmanPtr(true)
	}
}

// podmanResources are the spec's cgroup limits (nil when it sets none) and
// its rlimits.
func podmanResources(cs sandbox.ContainerSpec) (*spec.LinuxResources, []spec.POSIXRlimit) {
	var res spec.LinuxResources
	if cs.Memory > 0 || cs.MemorySwap > 0 {
		res.Memory = &spec.LinuxMemory{}
		if cs.Memory > 0 {
			res.Memory.Limit = podmanPtr(cs.Memory)
		}
		if cs.MemorySwap > 0 {
			res.Memory.Swap = podmanPtr(cs.MemorySwap)
		}
	}
	if cs.CPUQuota > 0 || cs.CPUPeriod > 0 {
		res.CPU = &spec.LinuxCPU{}
		if cs.CPUQuota > 0 {
			res.CPU.Quota = podmanPtr(cs.CPUQuota)
		}
		if cs.CPUPeriod > 0 {
			res.CPU.Period = podmanPtr(uint64(cs.CPUPeriod))
		}
	}
	if cs.Pids > 0 {
		res.Pids = &spec.LinuxPids{Limit: cs.Pids}
	}
	var out *spec.LinuxResources
	if res.Memory != nil || res.CPU != nil || res.Pids != nil {
		out = &res
	}
	var rlimits []spec.POSIXRlimit
	for _, r := range cs.Rlimits {
		// Short names: the service prefixes RLIMIT_ and upper-cases.
		name := strings.ToLower(strings.TrimPrefix(strings.ToUpper(r.Name), "RLIMIT_"))
		rlimits = append(rlimits, spec.POSIXRlimit{Type: name, Soft: r.Soft, Hard: r.Hard})
	}
	return out, rlimits
}

// podmanMounts are the spec's tmpfs (in a stable order), bind and data
// mounts.
func podmanMounts(cs sandbox.ContainerSpec) []spec.Mount {
	var mounts []spec.Mount
	targets := make([]string, 0, len(cs.Tmpfs))
	for t := range cs.Tmpfs {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		var opts []string
		for o := range strings.SplitSeq(cs.Tmpfs[t], ",") {
			if o = strings.TrimSpace(o); o != "" {
				opts = append(opts, o)
			}
		}
		mounts = append(mounts, spec.Mount{Destination: t, Type: "tmpfs", Source: "tmpfs", Options: opts})
	}
	for _, m := range cs.Mounts {
		// nosuid, nodev and noexec: a bind mount brings data (the relay
		// socket), never programs or devices.
		opts := []string{"rbind", "nosuid", "nodev", "noexec"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		mounts = append(mounts, spec.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: opts})
	}
	for _, m := range cs.DataMounts {
		mounts = append(mounts, spec.Mount{Destination: m.Path, Type: "bind", Source: m.Host, Options: podmanDataMountOptions()})
	}
	return mounts
}

// podmanDataMountOptions are the options of a data mount: read-only,
// nosuid, nodev, noexec, and not recursive ("bind", not "rbind"), so that
// what is mounted under the folder on the host stays out (a recursive bind
// would bring it in, and runc makes only the top mount read-only). The OCI
// runtime applies them in the container's mount namespace; gVisor reads
// them from the spec and holds ro and noexec itself.
func podmanDataMountOptions() []string { return []string{"bind", "ro", "nosuid", "nodev", "noexec"} }

func podmanPtr[T any](v T) *T { return &v }

// Start implements [sandbox.Runtime].
func (p *Client) Start(ctx context.Context, id string) error {
	if err := containers.Start(p.call(ctx), id, nil); err != nil {
		if podmanAPICode(err) == http.StatusNotFound {
			return fmt.Errorf("podman: starting container %s: %w", id, sandbox.ErrNotFound)
		}
		return p.wrap(ctx, "starting container "+id, err)
	}
	return nil
}

// Wait implements [sandbox.Runtime]. It returns as soon as ctx ends, even while the
// bindings are still retrying.
// podmanWaitInterval is how often the Podman service checks a waited-on
// container's state.
const podmanWaitInterval = "20ms"

func (p *Client) Wait(ctx context.Context, id string) (sandbox.ExitState, error) {
	type result struct {
		code int32
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// The service polls the container's state; its default 250 ms
		// interval would add up to that much to every run.
		code, err := containers.Wait(p.call(ctx), id, new(containers.WaitOptions).WithInterval(podmanWaitInterval))
		done <- result{code, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return sandbox.ExitState{}, fmt.Errorf("podman: waiting for container %s: %w", id, ctx.Err())
	}
	if r.err != nil {
		if podmanAPICode(r.err) == http.StatusNotFound {
			return sandbox.ExitState{}, fmt.Errorf("podman: waiting for container %s: %w", id, sandbox.ErrNotFound)
		}
		return sandbox.ExitState{}, p.wrap(ctx, "waiting for container "+id, r.err)
	}
	st := sandbox.ExitState{ExitCode: int(r.code)}
	data, err := containers.Inspect(p.call(ctx), id, nil)
	if err != nil {
		if podmanAPICode(err) == http.StatusNotFound {
			return st, fmt.Errorf("podman: inspecting exited container %s: %w", id, sandbox.ErrNotFound)
		}
		return st, p.wrap(ctx, "inspecting exited container "+id, err)
	}
	if data.State != nil {
		st.OOMKilled = data.State.OOMKilled
		if data.State.ExitCode != 0 {
			st.ExitCode = int(data.State.ExitCode)
		}
	}
	if !st.OOMKilled && p.oomUnreported {
		// The service cannot see OOM kills: a container with a memory
		// limit whose main process died of SIGKILL that we did not send
		// was, in all likelihood, killed by the kernel's OOM killer.
		_, weKilled := p.killed.Load(id)
		limited := data.HostConfig != nil && data.HostConfig.Memory > 0
		st.OOMKilled = st.ExitCode == 128+int(syscall.SIGKILL) && limited && !weKilled
		// A program that SIGKILLs itself looks the same: say it is a guess.
		st.OOMGuessed = st.OOMKilled
	}
	return st, nil
}

// Kill implements [sandbox.Runtime].
func (p *Client) Kill(ctx context.Context, id string) error {
	p.killed.Store(id, struct{}{})
	err := containers.Kill(p.call(ctx), id, &containers.KillOptions{Signal: podmanPtr("SIGKILL")})
	switch code := podmanAPICode(err); {
	case err == nil, code == http.StatusNotFound:
		return nil
	case code == http.StatusConflict, podmanAPICause(err) == "container state improper":
		return nil // not running (created, exited, being removed)
	}
	return p.wrap(ctx, "killing container "+id, err)
}

// Remove implements [sandbox.Runtime].
func (p *Client) Remove(ctx context.Context, id string) error {
	defer p.killed.Delete(id)
	// Podman 4.x refuses a forced remove while the container is between
	// running and stopped ("could not be stopped ... container state
	// improper"); that passes within milliseconds, so try again.
	delay := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := p.remove(ctx, id)
		if err == nil || attempt == 8 || !strings.Contains(err.Error(), "container state improper") {
			return err
		}
		select {
		case <-time.After(delay):
			delay *= 2
		case <-ctx.Done():
			return err
		}
	}
}

func (p *Client) remove(ctx context.Context, id string) error {
	reports, err := containers.Remove(p.call(ctx), id, &containers.RemoveOptions{
		Force:   podmanPtr(true),
		Volumes: podmanPtr(true),
		Timeout: podmanPtr(uint(0)),
	})
	if err != nil {
		if podmanAPICode(err) == http.StatusNotFound {
			return nil
		}
		return p.wrap(ctx, "removing container "+id, err)
	}
	for _, r := range reports {
		if r != nil && r.Err != nil {
			if podmanAPICode(r.Err) == http.StatusNotFound || strings.Contains(r.Err.Error(), "no such container") {
				continue
			}
			return fmt.Errorf("podman: removing container %s: %w", id, r.Err)
		}
	}
	return nil
}

// Logs implements [sandbox.Runtime].
func (p *Client) Logs(ctx context.Context, id string, limit int) (string, error) {
	if limit <= 0 {
		return "", nil
	}
	// Every line is at least one byte, so the last limit lines hold at
	// least limit bytes: ask for no more than that.
	opts := &containers.LogOptions{
		Stdout: podmanPtr(true),
		Stderr: podmanPtr(true),
		Tail:   podmanPtr(strconv.Itoa(limit)),
	}
	// One channel for both streams keeps their interleaving.
	frames := make(chan string, 64)
	errc := make(chan error, 1)
	go func() {
		errc <- containers.Logs(p.call(ctx), id, opts, frames, frames)
		close(frames)
	}()
	tail := engines.NewLogTail(limit)
	for f := range frames {
		_, _ = tail.WriteString(f)
	}
	if err := <-errc; err != nil {
		if podmanAPICode(err) == http.StatusNotFound {
			return "", fmt.Errorf("podman: reading logs of container %s: %w", id, sandbox.ErrNotFound)
		}
		return "", p.wrap(ctx, "reading logs of container "+id, err)
	}
	return tail.String(), nil
}

// List implements [sandbox.Runtime].
func (p *Client) List(ctx context.Context, labels map[string]string) ([]sandbox.ContainerInfo, error) {
	filters := map[string][]string{}
	for k, v := range labels {
		filters["label"] = append(filters["label"], k+"="+v)
	}
	sort.Strings(filters["label"])
	list, err := containers.List(p.call(ctx), &containers.ListOptions{All: podmanPtr(true), Filters: filters})
	if err != nil {
		return nil, p.wrap(ctx, "listing containers", err)
	}
	out := make([]sandbox.ContainerInfo, 0, len(list))
	for _, c := range list {
		out = append(out, sandbox.ContainerInfo{ID: c.ID, Labels: c.Labels})
	}
	// The filter is the service's; check again, so a service that ORs
	// label filters cannot hand back someone else's container.
	return engines.MatchLabels(out, labels), nil
}

// Close implements [sandbox.Runtime]. It drops idle connections to the service; the
// Podman must not be used afterwards.
func (p *Client) Close() error {
	if c, err := bindings.GetClient(p.conn); err == nil && c.Client != nil {
		c.Client.CloseIdleConnections()
	}
	return nil
}
