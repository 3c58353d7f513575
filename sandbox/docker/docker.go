// Package docker is the Docker engine: a [sandbox.Runtime] over the Docker
// Engine API (github.com/docker/docker/client), the hardened container
// spec as Docker's config and host config, and image builds from a tar of
// the build context. It also drives Podman's Docker-compatible socket,
// where that API differs (podmanCompat*).
package docker

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
)

// Client is the [sandbox.Runtime] backed by the Docker Engine API. It also
// speaks to Podman's Docker-compatible socket. It never runs the docker CLI.
type Client struct {
	cli    *client.Client
	host   string
	podman bool // the socket is Podman's Docker-compatible API
	// seccomp is the bridge's seccomp profile as a file, for Podman's
	// Docker-compatible API, which reads the option as a path.
	seccomp engines.SeccompFile
}

var _ sandbox.Runtime = (*Client)(nil)

// DefaultHost is the socket tried when neither a host nor
// $DOCKER_HOST is given.
const DefaultHost = "unix:///var/run/docker.sock"

// dockerPingTimeout bounds the reachability check in New.
const dockerPingTimeout = 10 * time.Second

// New connects to the Docker API at host ("unix:///var/run/docker.sock",
// "tcp://host:2376", or Podman's "unix:///run/podman/podman.sock"). An empty
// host means $DOCKER_HOST, else DefaultHost. The API version is
// negotiated with the engine. An engine that does not answer a ping yields
// an error wrapping ErrEngineUnreachable; a socket that refuses this user,
// an *AccessError.
func New(ctx context.Context, host string) (*Client, error) {
	opts := []client.Opt{client.WithAPIVersionNegotiation()}
	if host == "" {
		host = os.Getenv(client.EnvOverrideHost)
		if host != "" {
			// A DOCKER_HOST from the environment may come with its TLS
			// settings; they must be applied before the host.
			opts = append(opts, client.WithTLSClientConfigFromEnv())
		}
	}
	if host == "" {
		host = DefaultHost
	}
	opts = append(opts, client.WithHost(host))

	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: invalid Docker host %q: %w; %s",
			sandbox.ErrEngineUnreachable, host, err, dockerUnreachableHint(host))
	}

	pctx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	defer cancel()
	ping, err := cli.Ping(pctx)
	if err != nil {
		_ = cli.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to the Docker API at %s: %w", host, ctx.Err())
		}
		if ae := dockerDenied(host, err); ae != nil {
			return nil, ae
		}
		return nil, fmt.Errorf("%w: no Docker API answered at %s: %w; %s",
			sandbox.ErrEngineUnreachable, host, err, dockerUnreachableHint(host))
	}
	cli.NegotiateAPIVersionPing(ping)
	d := &Client{cli: cli, host: host}
	if ver, err := cli.ServerVersion(pctx); err == nil {
		for _, c := range ver.Components {
			if strings.Contains(strings.ToLower(c.Name), "podman") {
				d.podman = true
			}
		}
	}
	return d, nil
}

// seccompOpt is the security option that puts a container under the
// bridge's own seccomp profile (sandbox/internal/engines/seccomp.go). Docker takes the profile
// itself; Podman's Docker-compatible API takes a path on its host, so
// there the bridge writes the file, which the service can read only when
// it runs on this machine.
func (d *Client) seccompOpt() (string, error) {
	if !d.podman {
		return "seccomp=" + string(engines.SeccompProfile()), nil
	}
	if !strings.HasPrefix(d.host, "unix://") {
		return "", fmt.Errorf("the Podman service at %s answers the Docker API, and reads a seccomp profile only "+
			"as a file on its own machine: the bridge runs no container without its own profile; "+
			"use the podman backend, or a Podman socket on this machine", d.host)
	}
	path, err := d.seccomp.Get()
	if err != nil {
		return "", err
	}
	return "seccomp=" + path, nil
}

// IsPodman reports whether the socket is Podman's Docker-compatible API
// rather than Docker Engine's.
func (d *Client) IsPodman() bool { return d.podman }

// dockerUnreachableHint says what to do when the engine at host does not answer.
func dockerUnreachableHint(host string) string {
	if strings.Contains(host, "podman") {
		return "start the Podman API service (`podman system service --time=0 " + host +
			"`, or `systemctl start podman.socket`), set DOCKER_HOST, or run `bridge doctor`"
	}
	hint := "start dockerd (`sudo systemctl start docker`), set DOCKER_HOST, or run `bridge doctor`"
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			hint = "the socket " + path + " does not exist; " + hint
		}
	}
	return hint
}

// dockerDenied is the AccessError of a connection to host that the socket
// refused this user, or nil. The client keeps the dial's errno in its
// error chain (errConnectionFailed, *url.Error, *net.OpError).
func dockerDenied(host string, err error) *sandbox.AccessError {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok || !errors.Is(err, fs.ErrPermission) {
		return nil
	}
	return sandbox.NewAccessError(sandbox.EngineDocker, path, err)
}

// Name implements [sandbox.Runtime].
func (d *Client) Name() string { return "docker" }

// Close implements [sandbox.Runtime].
func (d *Client) Close() error { return d.cli.Close() }

// Info implements [sandbox.Runtime].
func (d *Client) Info(ctx context.Context) (sandbox.EngineInfo, error) {
	info, err := d.cli.Info(ctx)
	if err != nil {
		return sandbox.EngineInfo{}, d.wrap(err, "read engine info")
	}
	ver, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return sandbox.EngineInfo{}, d.wrap(err, "read engine version")
	}
	rootless := false
	for _, opt := range info.SecurityOptions {
		if strings.Contains(opt, "name=rootless") {
			rootless = true
		}
	}
	cgroup := info.CgroupVersion
	if cgroup == "" {
		cgroup = "1" // engines before API 1.40 only ran on cgroup v1
	}
	version := ver.Version
	if version == "" {
		version = info.ServerVersion
	}
	// Podman's Docker-compatible API lists every runtime of its
	// containers.conf, installed or not, and ignores the one a container
	// asks for: there, only the default counts.
	var runtimes map[string]sandbox.OCIRuntimeInfo
	if !d.podman {
		runtimes = make(map[string]sandbox.OCIRuntimeInfo, len(info.Runtimes))
		for name, r := range info.Runtimes {
			runtimes[name] = sandbox.OCIRuntimeInfo{Path: r.Path, Args: r.Args}
		}
	}
	return sandbox.EngineInfo{
		Name:          d.Name(),
		Socket:        d.host,
		Version:       version,
		APIVersion:    d.cli.ClientVersion(),
		Rootless:      rootless,
		CgroupVersion: cgroup,
		OCIRuntime:    info.DefaultRuntime,
		OCIRuntimes:   runtimes,
		Enforce: dockerEnforcement(rootless, cgroup, info.MemoryLimit, info.SwapLimit,
			info.PidsLimit, info.CPUCfsQuota && info.CPUCfsPeriod),
	}, nil
}

// dockerEnforcement derives which limits hold from the engine's report.
func dockerEnforcement(rootless bool, cgroup string, memory, swap, pids, cpu bool) sandbox.Enforcement {
	if rootless && cgroup == "1" {
		return sandbox.Enforcement{Reason: "a rootless engine on cgroup v1 cannot apply memory, pids or CPU limits: " +
			"run the engine rootful, or boot the host with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"}
	}
	e := sandbox.Enforcement{Memory: memory && swap, Pids: pids, CPU: cpu}
	var why []string
	if !memory {
		why = append(why, "the memory cgroup controller is unavailable (enable it with cgroup_enable=memory on the kernel command line"+
			dockerRootlessHint(rootless)+")")
	} else if !swap {
		why = append(why, "swap accounting is off, so the memory limit would not cover swap (boot with swapaccount=1, or use cgroup v2)")
	}
	if !pids {
		why = append(why, "the pids cgroup controller is unavailable (needs a kernel with CONFIG_CGROUP_PIDS"+dockerRootlessHint(rootless)+")")
	}
	if !cpu {
		why = append(why, "CFS CPU quotas are unavailable (needs a kernel with CONFIG_CFS_BANDWIDTH"+dockerRootlessHint(rootless)+")")
	}
	e.Reason = strings.Join(why, "; ")
	return e
}

func dockerRootlessHint(rootless bool) string {
	if !rootless {
		return ""
	}
	return "; for a rootless engine, delegate the controllers to the user: " +
		"systemd's user@.service needs Delegate=memory pids cpu"
}

// ImageInfo implements [sandbox.Runtime].
func (d *Client) ImageInfo(ctx context.Context, ref string) (sandbox.ImageInfo, error) {
	img, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return sandbox.ImageInfo{}, fmt.Errorf("%w: %s is not in the local image store of %s", sandbox.ErrImageNotFound, ref, d.host)
		}
		return sandbox.ImageInfo{}, d.wrap(err, "inspect image "+ref)
	}
	out := sandbox.ImageInfo{ID: img.ID, Size: img.Size}
	if img.Created != "" {
		if t, err := time.Parse(time.RFC3339Nano, img.Created); err == nil {
			out.Created = t
		}
	}
	if img.Config != nil && len(img.Config.Labels) > 0 {
		out.Labels = make(map[string]string, len(img.Config.Labels))
		for k, v := range img.Config.Labels {
			out.Labels[k] = v
		}
	}
	return out, nil
}

// BuildImage implements [sandbox.Runtime]. It sends the build context as a tar
// stream to Docker's classic builder (the one every Docker Engine has) and
// writes the build's output as plain text. A failed step becomes the
// returned error.
func (d *Client) BuildImage(ctx context.Context, opts sandbox.BuildOptions) error {
	contextDir, dockerfile, tag, out := opts.ContextDir, opts.Dockerfile, opts.Tag, opts.Out
	if out == nil {
		out = io.Discard
	}
	st, err := os.Stat(contextDir)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("build context %s is not a directory", contextDir)
	}
	if filepath.IsAbs(dockerfile) || !filepath.IsLocal(dockerfile) {
		return fmt.Errorf("dockerfile %q must be a relative path inside the build context %s", dockerfile, contextDir)
	}
	if _, err := os.Stat(filepath.Join(contextDir, dockerfile)); err != nil {
		return fmt.Errorf("dockerfile: %w", err)
	}

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(dockerTarDir(contextDir, pw)) }()
	defer pr.Close()

	var args map[string]*string
	for k, v := range opts.Args {
		if args == nil {
			args = make(map[string]*string, len(opts.Args))
		}
		args[k] = &v
	}
	resp, err := d.cli.ImageBuild(ctx, pr, build.ImageBuildOptions{
		Tags:        []string{tag},
		Dockerfile:  filepath.ToSlash(dockerfile),
		Target:      opts.Target,
		BuildArgs:   args,
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return d.wrap(err, "build image "+tag)
	}
	defer resp.Body.Close()
	if err := dockerBuildStream(resp.Body, out); err != nil {
		return fmt.Errorf("build image %s from %s: %w", tag, filepath.Join(contextDir, dockerfile), err)
	}
	return nil
}

// dockerBuildMessage is one JSON message of a build's output stream.
type dockerBuildMessage struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	ID          string `json:"id"`
	Progress    string `json:"progress"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// dockerBuildStream writes a build's JSON message stream as plain text and
// returns the first error the stream reports.
func dockerBuildStream(in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	for {
		var m dockerBuildMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read build output: %w", err)
		}
		switch {
		case m.ErrorDetail != nil && m.ErrorDetail.Message != "":
			return errors.New(strings.TrimSpace(m.ErrorDetail.Message))
		case m.Error != "":
			return errors.New(strings.TrimSpace(m.Error))
		case m.Stream != "":
			_, _ = io.WriteString(out, m.Stream)
		case m.Status != "":
			if m.Progress != "" {
				continue // progress bars are noise in a plain log
			}
			if m.ID != "" {
				_, _ = fmt.Fprintf(out, "%s: %s\n", m.ID, m.Status)
			} else {
				_, _ = fmt.Fprintln(out, m.Status)
			}
		}
	}
}

// dockerTarDir writes dir as an uncompressed tar stream with paths relative to
// dir. Owners are reset to root; sockets, devices and fifos are skipped.
func dockerTarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		info, err := de.Info()
		if err != nil {
			return err
		}
		var link string
		switch mode := info.Mode(); {
		case mode.IsRegular(), mode.IsDir():
		case mode&fs.ModeSymlink != 0:
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("archive build context %s: %w", dir, err)
	}
	return tw.Close()
}

// dockerConfig translates every field of spec into the Docker API's
// container and host configuration.
func dockerConfig(spec sandbox.ContainerSpec) (*container.Config, *container.HostConfig) {
	env := make([]string, 0, len(spec.Env))
	for k, v := range spec.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)

	var labels map[string]string
	if len(spec.Labels) > 0 {
		labels = make(map[string]string, len(spec.Labels))
		for k, v := range spec.Labels {
			labels[k] = v
		}
	}

	cfg := &container.Config{
		Image:           spec.Image,
		Env:             env,
		User:            spec.User,
		Labels:          labels,
		WorkingDir:      spec.WorkDir,
		NetworkDisabled: spec.NetworkNone,
	}

	// The spec's Command is the whole command line, so an image's
	// ENTRYPOINT must not be prepended to it. Its first word becomes the
	// entrypoint: an empty entrypoint would do the same on Docker, but
	// Podman 4.3's compat API ignores it.
	if len(spec.Command) > 0 {
		cfg.Entrypoint = []string{spec.Command[0]}
		if len(spec.Command) > 1 {
			cfg.Cmd = append([]string(nil), spec.Command[1:]...)
		}
	}

	initOn := spec.Init
	pids := spec.Pids
	hc := &container.HostConfig{
		Runtime:        spec.OCIRuntime,
		ReadonlyRootfs: spec.ReadOnlyRoot,
		Init:           &initOn,
		Resources: container.Resources{
			Memory:     spec.Memory,
			MemorySwap: spec.MemorySwap,
			CPUQuota:   spec.CPUQuota,
			CPUPeriod:  spec.CPUPeriod,
		},
		// Untrusted code can write to its own stdout; cap what the engine
		// keeps of it on the host's disk.
		LogConfig: container.LogConfig{
			Type:   "json-file",
			Config: map[string]string{"max-size": "1m", "max-file": "1"},
		},
	}
	if pids > 0 {
		hc.PidsLimit = &pids
	}
	if spec.NetworkNone {
		hc.NetworkMode = container.NetworkMode("none")
	}
	if spec.CapDropAll {
		hc.CapDrop = []string{"ALL"}
	}
	if spec.NoNewPrivileges {
		// The bare form is what both Docker 20.10 and Podman's compat API accept.
		hc.SecurityOpt = []string{"no-new-privileges"}
	}
	for _, rl := range spec.Rlimits {
		hc.Ulimits = append(hc.Ulimits, &container.Ulimit{
			Name: rl.Name,
			Soft: dockerClamp(rl.Soft),
			Hard: dockerClamp(rl.Hard),
		})
	}
	if len(spec.Tmpfs) > 0 {
		hc.Tmpfs = make(map[string]string, len(spec.Tmpfs))
		for path, opts := range spec.Tmpfs {
			hc.Tmpfs[path] = opts
		}
	}
	for _, m := range spec.Mounts {
		hc.Mounts = append(hc.Mounts, mount.Mount{
			Type:     mount.TypeBind,
			Source:   m.Source,
			Target:   m.Target,
			ReadOnly: m.ReadOnly,
		})
	}
	for _, m := range spec.DataMounts {
		hc.Mounts = append(hc.Mounts, dockerDataMount(m, labels))
	}
	return cfg, hc
}

// dockerDataMountOptions are the mount options of a data mount on Docker.
const dockerDataMountOptions = "bind,ro,nosuid,nodev,noexec"

// dockerDataMount is m as Docker can make it read-only, nosuid, nodev and
// noexec: the API's bind mounts take no such options, so m is an anonymous
// volume of the local driver that bind-mounts the host folder with them.
// The engine mounts it under its volumes folder, then binds that into the
// container, and a bind mount keeps the flags of the mount it copies: the
// container's mount is read-only, nosuid, nodev and noexec too (Docker
// 20.10 refuses ReadOnly on an anonymous volume, so that is how it gets
// there). The volume goes with the container (Remove asks for
// RemoveVolumes), and carries the container's labels. NoCopy: nothing of
// the image is copied into it.
func dockerDataMount(m sandbox.DataMount, labels map[string]string) mount.Mount {
	return mount.Mount{
		Type:   mount.TypeVolume,
		Target: m.Path,
		VolumeOptions: &mount.VolumeOptions{
			NoCopy: true,
			Labels: maps.Clone(labels),
			DriverConfig: &mount.Driver{
				Name:    "local",
				Options: map[string]string{"type": "none", "device": m.Host, "o": dockerDataMountOptions},
			},
		},
	}
}

// podmanCompatTmpfs are the options of the empty, read-only tmpfs mounts
// that replace the writable, exec-able /run and /var/tmp which Podman's
// compat API adds to every read-only container (its --read-only-tmpfs
// cannot be turned off through that API). A mode option would not help:
// runc gives a tmpfs the mode of the directory it covers (/var/tmp is 1777).
// Nested mounts such as RelayDir still work under a read-only /run.
const podmanCompatTmpfs = "ro,noexec,nosuid,nodev,size=65536,notmpcopyup"

// podmanCompatDataMountOptions are the options of a data mount on
// Podman's Docker-compatible API (see podmanDataMountOptions).
const podmanCompatDataMountOptions = "bind,ro,nosuid,nodev,noexec"

// podmanCompatConfig closes what Podman's Docker-compatible API opens on
// top of hc: a read-only root there still gets a writable /run and /var/tmp,
// and the local driver's options of a data mount's volume are dropped
// without a word (Podman 4.3: the container gets an empty, writable
// volume), so data mounts are binds with Podman's own options instead.
func podmanCompatConfig(spec sandbox.ContainerSpec, hc *container.HostConfig) {
	if len(spec.DataMounts) > 0 {
		mounts := hc.Mounts[:0:0]
		for _, m := range hc.Mounts {
			if m.Type != mount.TypeVolume {
				mounts = append(mounts, m)
			}
		}
		hc.Mounts = mounts
		for _, m := range spec.DataMounts {
			// Podman reads "bind" as not recursive; validateDataMounts
			// keeps colons and commas out of both paths.
			hc.Binds = append(hc.Binds, m.Host+":"+m.Path+":"+podmanCompatDataMountOptions)
		}
	}
	if !spec.ReadOnlyRoot {
		return
	}
	if hc.Tmpfs == nil {
		hc.Tmpfs = map[string]string{}
	}
	for _, dir := range []string{"/run", "/var/tmp"} {
		if _, ok := hc.Tmpfs[dir]; !ok {
			hc.Tmpfs[dir] = podmanCompatTmpfs
		}
	}
}

func dockerClamp(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// Create implements [sandbox.Runtime]. Data mounts are refused under gVisor (see
// engines.RefuseGVisorDataMounts): asked for by name, or found after the create to
// be the runtime the engine chose.
func (d *Client) Create(ctx context.Context, spec sandbox.ContainerSpec) (string, error) {
	if len(spec.DataMounts) > 0 {
		if sandbox.OCIRuntimeName(spec.OCIRuntime) == sandbox.OCIRuntimeRunsc {
			return "", engines.RefuseGVisorDataMounts(ctx, d.Remove, "create container "+spec.Name, "")
		}
		if err := sandbox.CheckDataMountHosts(spec.DataMounts); err != nil {
			return "", fmt.Errorf("create container %s: %w", spec.Name, err)
		}
	}
	cfg, hc := dockerConfig(spec)
	if d.podman {
		podmanCompatConfig(spec, hc)
	}
	prof, err := d.seccompOpt()
	if err != nil {
		return "", fmt.Errorf("create container %s: %w", spec.Name, err)
	}
	hc.SecurityOpt = append(hc.SecurityOpt, prof)
	resp, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, spec.Name)
	if err != nil {
		if cerrdefs.IsNotFound(err) && strings.Contains(strings.ToLower(err.Error()), "image") {
			return "", fmt.Errorf("create container %s: %w: %s is not in the local image store of %s (%w)",
				spec.Name, sandbox.ErrImageNotFound, spec.Image, d.host, err)
		}
		return "", d.wrap(err, "create container "+spec.Name+" from "+spec.Image)
	}
	// The engine drops a limit it cannot apply with only a warning (e.g.
	// no swap accounting, or Podman's compat API rootless on cgroup v1):
	// never run a container without its limits.
	if err := engines.RefuseDroppedLimits(ctx, d.Remove, "create container "+spec.Name, resp.ID, resp.Warnings); err != nil {
		return "", err
	}
	if spec.OCIRuntime != "" || len(spec.DataMounts) > 0 {
		// Never run the code under another runtime than asked for.
		got, err := d.runtimeOf(ctx, resp.ID)
		if err != nil {
			got = "unknown (" + err.Error() + ")"
		}
		if err := engines.CheckRuntimeOf(ctx, d.Remove, "create container "+spec.Name, resp.ID, spec.OCIRuntime, got); err != nil {
			return "", err
		}
		if name := sandbox.OCIRuntimeName(got); len(spec.DataMounts) > 0 && name != sandbox.OCIRuntimeRunc && name != "crun" {
			// Only a runtime that mounts the host's folder itself keeps its
			// noexec; gVisor (or a runtime not known) does not.
			if name == sandbox.OCIRuntimeRunsc {
				return "", engines.RefuseGVisorDataMounts(ctx, d.Remove, "create container "+spec.Name, resp.ID)
			}
			err := fmt.Errorf("create container %s: the engine made the container with the OCI runtime %s, and the policy's mounts are held noexec only under runc or crun; no code was run", spec.Name, got)
			return "", engines.RemoveRefused(ctx, d.Remove, resp.ID, err)
		}
	}
	return resp.ID, nil
}

// runtimeOf is the OCI runtime the engine made container id with.
func (d *Client) runtimeOf(ctx context.Context, id string) (string, error) {
	if d.podman {
		// Podman's compat API says "oci" for every container, and runs
		// each with the service's default runtime, which its version names.
		ver, err := d.cli.ServerVersion(ctx)
		if err != nil {
			return "", d.wrap(err, "read engine version")
		}
		for _, c := range ver.Components {
			if name, ok := strings.CutPrefix(c.Name, "OCI Runtime ("); ok {
				return strings.TrimSuffix(name, ")"), nil
			}
		}
		return "", errors.New("the Podman service does not name its OCI runtime")
	}
	insp, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return "", d.wrapContainer(err, "inspect", id)
	}
	if insp.HostConfig == nil {
		return "", errors.New("the engine reported no host config")
	}
	return insp.HostConfig.Runtime, nil
}

// Start implements [sandbox.Runtime].
func (d *Client) Start(ctx context.Context, id string) error {
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return d.wrapContainer(err, "start", id)
	}
	return nil
}

// Wait implements [sandbox.Runtime]. A container that was never started counts as
// exited.
func (d *Client) Wait(ctx context.Context, id string) (sandbox.ExitState, error) {
	resC, errC := d.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case res := <-resC:
		if res.Error != nil && res.Error.Message != "" {
			return sandbox.ExitState{}, fmt.Errorf("wait for container %s: %s", id, res.Error.Message)
		}
	case err := <-errC:
		if ctx.Err() != nil {
			return sandbox.ExitState{}, fmt.Errorf("wait for container %s: %w", id, ctx.Err())
		}
		return sandbox.ExitState{}, d.wrapContainer(err, "wait for", id)
	case <-ctx.Done():
		return sandbox.ExitState{}, fmt.Errorf("wait for container %s: %w", id, ctx.Err())
	}
	// The wait response lacks the OOM flag; the container's state has both.
	insp, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return sandbox.ExitState{}, d.wrapContainer(err, "inspect", id)
	}
	if insp.State == nil {
		return sandbox.ExitState{}, fmt.Errorf("inspect container %s: the engine reported no state", id)
	}
	return sandbox.ExitState{ExitCode: insp.State.ExitCode, OOMKilled: insp.State.OOMKilled}, nil
}

// Kill implements [sandbox.Runtime].
func (d *Client) Kill(ctx context.Context, id string) error {
	err := d.cli.ContainerKill(ctx, id, "KILL")
	if err == nil || cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) || dockerNotRunning(err) {
		return nil
	}
	return d.wrapContainer(err, "kill", id)
}

// dockerNotRunning recognises "not running" answers that an engine sends with
// an unexpected status code.
func dockerNotRunning(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "is not running") || strings.Contains(msg, "state improper") ||
		strings.Contains(msg, "no such container")
}

// Remove implements [sandbox.Runtime].
func (d *Client) Remove(ctx context.Context, id string) error {
	err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	for i := 0; err != nil && exitingRace(err) && i < 10; i++ {
		// A forced remove of a container that is exiting just then fails:
		// Docker 20.10 says "Could not kill running container ..., cannot
		// remove - Container ... is not running", Podman's compatible API
		// (rootless, 4.x) "could not be stopped: container state
		// improper". A moment later it is stopped, and goes.
		select {
		case <-ctx.Done():
			return d.wrapContainer(err, "remove", id)
		case <-time.After(50 * time.Millisecond):
		}
		err = d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}
	if err == nil || cerrdefs.IsNotFound(err) ||
		strings.Contains(err.Error(), "no such container") ||
		strings.Contains(err.Error(), "already in progress") {
		return nil
	}
	return d.wrapContainer(err, "remove", id)
}

// exitingRace reports an engine's error for a forced remove that met the
// container exiting.
func exitingRace(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "container state improper") ||
		(strings.Contains(msg, "Could not kill running container") && strings.Contains(msg, "is not running"))
}

// Logs implements [sandbox.Runtime].
func (d *Client) Logs(ctx context.Context, id string, limit int) (string, error) {
	if limit <= 0 {
		return "", nil
	}
	rc, err := d.cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", d.wrapContainer(err, "read logs of", id)
	}
	defer rc.Close()
	t := engines.NewLogTail(limit)
	if _, err := stdcopy.StdCopy(t, t, rc); err != nil {
		return "", fmt.Errorf("read logs of container %s: %w", id, err)
	}
	return t.String(), nil
}

// List implements [sandbox.Runtime].
func (d *Client) List(ctx context.Context, labels map[string]string) ([]sandbox.ContainerInfo, error) {
	f := filters.NewArgs()
	for k, v := range labels {
		f.Add("label", k+"="+v)
	}
	cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, d.wrap(err, "list containers")
	}
	out := make([]sandbox.ContainerInfo, 0, len(cs))
	for _, c := range cs {
		out = append(out, sandbox.ContainerInfo{ID: c.ID, Labels: c.Labels})
	}
	return engines.MatchLabels(out, labels), nil
}

// wrap adds what was being done and, when the engine stopped answering,
// ErrEngineUnreachable with what to do about it.
func (d *Client) wrap(err error, doing string) error {
	if client.IsErrConnectionFailed(err) {
		if ae := dockerDenied(d.host, err); ae != nil {
			return fmt.Errorf("%s: %w", doing, ae)
		}
		return fmt.Errorf("%s: %w at %s: %w; %s", doing, sandbox.ErrEngineUnreachable, d.host, err, dockerUnreachableHint(d.host))
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// wrapContainer is wrap for an operation on one container; a container the
// engine does not know yields ErrNotFound.
func (d *Client) wrapContainer(err error, doing, id string) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%s container %s: %w: %w", doing, id, sandbox.ErrNotFound, err)
	}
	return d.wrap(err, doing+" container "+id)
}
