package podman

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/enginetest"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
)

func testPodmanSpec(t *testing.T) (sandbox.ContainerSpec, *specgen.SpecGenerator) {
	t.Helper()
	l := sandbox.DefaultLimits()
	l.CPUs = 1.5
	cs := sandbox.NewSpec("run42", "localhost/bridge-runner:test", "/var/run/bridge/run42", "tok-xyz", l)
	return cs, podmanSpec(cs)
}

func podmanFindMount(t *testing.T, s *specgen.SpecGenerator, dest string) spec.Mount {
	t.Helper()
	for _, m := range s.Mounts {
		if m.Destination == dest {
			return m
		}
	}
	t.Fatalf("no mount at %s in %+v", dest, s.Mounts)
	return spec.Mount{}
}

func podmanIsTrue(p *bool) bool  { return p != nil && *p }
func podmanIsFalse(p *bool) bool { return p != nil && !*p }

func TestPodmanSpecHardening(t *testing.T) {
	cs, s := testPodmanSpec(t)
	l := sandbox.DefaultLimits()

	checks := []enginetest.Check{
		{Property: enginetest.Image, Name: "image", Holds: func(t *testing.T) error {
			if s.Image != cs.Image || s.RawImageName != cs.Image {
				return fmt.Errorf("image %q raw %q, want %q", s.Image, s.RawImageName, cs.Image)
			}
			return nil
		}},
		{Property: "", Name: "name", Holds: func(t *testing.T) error {
			if s.Name != "bridge-run-run42" {
				return fmt.Errorf("name %q", s.Name)
			}
			return nil
		}},
		{Property: enginetest.OCIRuntime, Name: "runtime asked for", Holds: func(t *testing.T) error {
			c := cs
			c.OCIRuntime = "runsc"
			if s.OCIRuntime != "" || podmanSpec(c).OCIRuntime != "runsc" {
				return fmt.Errorf("OCIRuntime %q (default), %q (runsc)", s.OCIRuntime, podmanSpec(c).OCIRuntime)
			}
			return nil
		}},
		{Property: enginetest.Image, Name: "command is exact, no image entrypoint", Holds: func(t *testing.T) error {
			got := append(slices.Clone(s.Entrypoint), s.Command...)
			if !slices.Equal(got, cs.Command) || len(s.Entrypoint) == 0 {
				return fmt.Errorf("entrypoint %q command %q, want %q", s.Entrypoint, s.Command, cs.Command)
			}
			return nil
		}},
		{Property: enginetest.Env, Name: "env", Holds: func(t *testing.T) error {
			want := map[string]string{sandbox.EnvRelaySocket: sandbox.RelaySocket, sandbox.EnvRelayToken: "tok-xyz", "HOME": sandbox.TmpDir, "LANG": "C.UTF-8"}
			for k, v := range want {
				if s.Env[k] != v {
					return fmt.Errorf("env %s=%q, want %q", k, s.Env[k], v)
				}
			}
			if len(s.Env) != len(want) {
				return fmt.Errorf("env has %d entries, want %d: %v", len(s.Env), len(want), s.Env)
			}
			return nil
		}},
		{Property: enginetest.Env, Name: "no host env or proxy leaks", Holds: func(t *testing.T) error {
			if !podmanIsFalse(s.EnvHost) || !podmanIsFalse(s.HTTPProxy) {
				return fmt.Errorf("EnvHost %v HTTPProxy %v, want explicit false", s.EnvHost, s.HTTPProxy)
			}
			return nil
		}},
		{Property: enginetest.Nobody, Name: "user 65534", Holds: func(t *testing.T) error {
			if s.User != "65534:65534" {
				return fmt.Errorf("user %q", s.User)
			}
			return nil
		}},
		{Property: enginetest.Labels, Name: "labels", Holds: func(t *testing.T) error {
			if s.Labels[sandbox.LabelManaged] != "true" || s.Labels[sandbox.LabelRunID] != "run42" {
				return fmt.Errorf("labels %v", s.Labels)
			}
			return nil
		}},
		{Property: "", Name: "workdir", Holds: func(t *testing.T) error {
			if s.WorkDir != sandbox.TmpDir {
				return fmt.Errorf("workdir %q", s.WorkDir)
			}
			return nil
		}},
		{Property: enginetest.NoNetwork, Name: "network none", Holds: func(t *testing.T) error {
			if s.NetNS.NSMode != specgen.NoNetwork {
				return fmt.Errorf("netns %q", s.NetNS.NSMode)
			}
			return nil
		}},
		{Property: "", Name: "private uts with own hostname", Holds: func(t *testing.T) error {
			if s.UtsNS.NSMode != specgen.Private || s.Hostname == "" {
				return fmt.Errorf("utsns %q hostname %q", s.UtsNS.NSMode, s.Hostname)
			}
			return nil
		}},
		{Property: "", Name: "private pid, ipc and cgroup namespaces", Holds: func(t *testing.T) error {
			for name, ns := range map[string]specgen.Namespace{"pid": s.PidNS, "ipc": s.IpcNS, "cgroup": s.CgroupNS} {
				if ns.NSMode != specgen.Private {
					return fmt.Errorf("%s namespace %q", name, ns.NSMode)
				}
			}
			return nil
		}},
		{Property: "", Name: "resolv.conf from the image", Holds: func(t *testing.T) error {
			if !podmanIsTrue(s.UseImageResolvConf) {
				return fmt.Errorf("UseImageResolvConf %v", s.UseImageResolvConf)
			}
			return nil
		}},
		{Property: enginetest.ReadOnlyRoot, Name: "read-only root without podman's writable tmpfs", Holds: func(t *testing.T) error {
			if !podmanIsTrue(s.ReadOnlyFilesystem) || !podmanIsFalse(s.ReadWriteTmpfs) {
				return fmt.Errorf("ReadOnlyFilesystem %v ReadWriteTmpfs %v", s.ReadOnlyFilesystem, s.ReadWriteTmpfs)
			}
			if s.ImageVolumeMode != "ignore" {
				return fmt.Errorf("image volumes %q would add writable volumes", s.ImageVolumeMode)
			}
			return nil
		}},
		{Property: enginetest.NoCapability, Name: "cap drop all", Holds: func(t *testing.T) error {
			if !slices.Equal(s.CapDrop, []string{"ALL"}) || len(s.CapAdd) != 0 {
				return fmt.Errorf("capdrop %v capadd %v", s.CapDrop, s.CapAdd)
			}
			return nil
		}},
		{Property: enginetest.NoEscalation, Name: "not privileged", Holds: func(t *testing.T) error {
			if !podmanIsFalse(s.Privileged) {
				return fmt.Errorf("privileged %v", s.Privileged)
			}
			return nil
		}},
		{Property: enginetest.NoEscalation, Name: "no new privileges", Holds: func(t *testing.T) error {
			if !podmanIsTrue(s.NoNewPrivileges) {
				return fmt.Errorf("no_new_privileges %v", s.NoNewPrivileges)
			}
			return nil
		}},
		{Property: enginetest.Init, Name: "init", Holds: func(t *testing.T) error {
			if !podmanIsTrue(s.Init) {
				return fmt.Errorf("init %v", s.Init)
			}
			return nil
		}},
		{Property: enginetest.Memory, Name: "memory limit with equal swap", Holds: func(t *testing.T) error {
			m := s.ResourceLimits.Memory
			if m == nil || m.Limit == nil || m.Swap == nil || *m.Limit != l.Memory || *m.Swap != l.Memory {
				return fmt.Errorf("memory %+v, want limit = swap = %d", m, l.Memory)
			}
			return nil
		}},
		{Property: enginetest.Pids, Name: "pids limit", Holds: func(t *testing.T) error {
			p := s.ResourceLimits.Pids
			if p == nil || p.Limit != l.Pids {
				return fmt.Errorf("pids %+v, want %d", p, l.Pids)
			}
			return nil
		}},
		{Property: enginetest.CPU, Name: "cpu quota and period", Holds: func(t *testing.T) error {
			c := s.ResourceLimits.CPU
			if c == nil || c.Quota == nil || c.Period == nil || *c.Quota != 150_000 || *c.Period != sandbox.CPUPeriod {
				return fmt.Errorf("cpu %+v, want quota 150000 period %d", c, sandbox.CPUPeriod)
			}
			return nil
		}},
		{Property: enginetest.Rlimits, Name: "rlimits by short name", Holds: func(t *testing.T) error {
			want := []spec.POSIXRlimit{
				{Type: "nofile", Soft: l.NoFile, Hard: l.NoFile},
				{Type: "nproc", Soft: l.NProc, Hard: l.NProc},
			}
			if !slices.Equal(s.Rlimits, want) {
				return fmt.Errorf("rlimits %+v, want %+v", s.Rlimits, want)
			}
			return nil
		}},
		{Property: enginetest.TmpNoExec, Name: "tmpfs at /tmp with the spec's options", Holds: func(t *testing.T) error {
			m := podmanFindMount(t, s, sandbox.TmpDir)
			want := strings.Split(cs.Tmpfs[sandbox.TmpDir], ",")
			if m.Type != "tmpfs" || !slices.Equal(m.Options, want) {
				return fmt.Errorf("tmpfs mount %+v, want options %v", m, want)
			}
			for _, o := range []string{"noexec", "nosuid", "nodev", "size=67108864"} {
				if !slices.Contains(m.Options, o) {
					return fmt.Errorf("tmpfs lacks %s: %v", o, m.Options)
				}
			}
			return nil
		}},
		{Property: enginetest.RelayReadOnly, Name: "relay dir bind-mounted read-only", Holds: func(t *testing.T) error {
			m := podmanFindMount(t, s, sandbox.RelayDir)
			if m.Type != "bind" || m.Source != "/var/run/bridge/run42" {
				return fmt.Errorf("relay mount %+v", m)
			}
			for _, o := range []string{"rbind", "ro", "nosuid", "nodev", "noexec"} {
				if !slices.Contains(m.Options, o) {
					return fmt.Errorf("relay mount lacks %s: %v", o, m.Options)
				}
			}
			if slices.Contains(m.Options, "rw") {
				return fmt.Errorf("relay mount is rw: %v", m.Options)
			}
			return nil
		}},
		{Property: enginetest.OnlyMounts, Name: "only the expected mounts", Holds: func(t *testing.T) error {
			if len(s.Mounts) != 2 {
				return fmt.Errorf("mounts %+v, want /tmp and %s only", s.Mounts, sandbox.RelayDir)
			}
			return nil
		}},
		{Property: "", Name: "stop is an immediate kill", Holds: func(t *testing.T) error {
			if s.StopTimeout == nil || *s.StopTimeout != 0 {
				return fmt.Errorf("stop timeout %v", s.StopTimeout)
			}
			return nil
		}},
		{Property: "", Name: "log size capped", Holds: func(t *testing.T) error {
			if s.LogConfiguration == nil || s.LogConfiguration.Size <= 0 {
				return fmt.Errorf("log configuration %+v", s.LogConfiguration)
			}
			return nil
		}},
		{Property: "", Name: "validates", Holds: func(t *testing.T) error {
			return s.Validate()
		}},
	}
	enginetest.Hardening(t, "podman", checks, map[enginetest.Property]string{
		enginetest.Seccomp: "Create names the profile's file (engines.SeccompFile) in the spec it sends: integration TestSeccompEveryBackend",
	})
}

func TestPodmanSpecOmitsUnsetFields(t *testing.T) {
	s := podmanSpec(sandbox.ContainerSpec{Image: "img"})
	switch {
	case s.ResourceLimits != nil:
		t.Errorf("resource limits %+v for a spec without limits", s.ResourceLimits)
	case s.ReadOnlyFilesystem != nil, s.NoNewPrivileges != nil, s.Init != nil, len(s.CapDrop) != 0:
		t.Errorf("hardening flags set for a spec that asked for none: %+v", s.ContainerSecurityConfig)
	case s.NetNS.NSMode != "":
		t.Errorf("netns %q", s.NetNS.NSMode)
	case len(s.Mounts) != 0:
		t.Errorf("mounts %+v", s.Mounts)
	case s.Entrypoint != nil || s.Command != nil:
		t.Errorf("entrypoint %q command %q, want the image's", s.Entrypoint, s.Command)
	}
}

func TestPodmanSpecReadWriteBind(t *testing.T) {
	s := podmanSpec(sandbox.ContainerSpec{Image: "img", Mounts: []sandbox.Mount{{Source: "/a", Target: "/b"}}})
	m := podmanFindMount(t, s, "/b")
	if slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "rw") {
		t.Errorf("rw bind options %v", m.Options)
	}
}

func TestPodmanSpecDoesNotAlias(t *testing.T) {
	cs, s := testPodmanSpec(t)
	s.Env["X"] = "1"
	s.Labels["X"] = "1"
	s.Entrypoint[0] = "sh"
	if _, ok := cs.Env["X"]; ok {
		t.Error("spec env aliased")
	}
	if _, ok := cs.Labels["X"]; ok {
		t.Error("spec labels aliased")
	}
	if cs.Command[0] != "python3" {
		t.Error("spec command aliased")
	}
}

func TestPodmanEnforcement(t *testing.T) {
	all := []string{"cpuset", "cpu", "cpuacct", "memory", "pids"}
	tests := []struct {
		name        string
		rootless    bool
		cgroup      string
		controllers []string
		want        sandbox.Enforcement
		reason      []string // substrings of Reason
	}{
		{name: "rootful v1", cgroup: "1", controllers: all, want: sandbox.Enforcement{Memory: true, Pids: true, CPU: true}},
		{name: "rootful v2", cgroup: "2", controllers: []string{"cpu", "memory", "pids"}, want: sandbox.Enforcement{Memory: true, Pids: true, CPU: true}},
		{name: "rootless v1", rootless: true, cgroup: "1", controllers: all,
			reason: []string{"rootless Podman on cgroup v1", "rootful", "systemd.unified_cgroup_hierarchy=1"}},
		{name: "rootless v2 delegated", rootless: true, cgroup: "2", controllers: []string{"memory", "pids", "cpu"},
			want: sandbox.Enforcement{Memory: true, Pids: true, CPU: true}},
		{name: "rootless v2 default delegation", rootless: true, cgroup: "2", controllers: []string{"memory", "pids"},
			want: sandbox.Enforcement{Memory: true, Pids: true}, reason: []string{"cpu", "Delegate="}},
		{name: "rootful v1 without pids", cgroup: "1", controllers: []string{"cpu", "memory"},
			want: sandbox.Enforcement{Memory: true, CPU: true}, reason: []string{"pids"}},
		{name: "unknown cgroup version", cgroup: "", controllers: all, reason: []string{"unknown cgroup version"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := podmanEnforcement(tt.rootless, tt.cgroup, tt.controllers)
			reason := got.Reason
			got.Reason = ""
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if tt.want.All() != (reason == "") {
				t.Errorf("reason %q for enforcement %+v", reason, tt.want)
			}
			for _, r := range tt.reason {
				if !strings.Contains(reason, r) {
					t.Errorf("reason %q lacks %q", reason, r)
				}
			}
		})
	}
}

func TestPodmanUnreachableError(t *testing.T) {
	err := podmanUnreachable("unix:///run/podman/podman.sock", "/run/podman/podman.sock", errors.New("dial unix: no such file"))
	if !errors.Is(err, sandbox.ErrEngineUnreachable) {
		t.Fatal("does not wrap ErrEngineUnreachable")
	}
	for _, s := range []string{"/run/podman/podman.sock", "podman system service --time=0 unix:///run/podman/podman.sock", "bridge doctor"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
}

func TestPodmanSocketPath(t *testing.T) {
	for uri, want := range map[string]string{
		"unix:///run/podman/podman.sock": "/run/podman/podman.sock",
		"unix://run/podman.sock":         "/run/podman.sock",
		"tcp://127.0.0.1:8080":           "tcp://127.0.0.1:8080",
	} {
		if got := podmanSocketPath(uri); got != want {
			t.Errorf("podmanSocketPath(%q) = %q, want %q", uri, got, want)
		}
	}
}

// Podman: a bind mount, not recursive, with every option.
func TestPodmanSpecDataMounts(t *testing.T) {
	cs, _ := testPodmanSpec(t)
	cs.DataMounts = []sandbox.DataMount{{Host: "/srv/sales", Path: "/data/sales"}}
	s := podmanSpec(cs)
	m := podmanFindMount(t, s, "/data/sales")
	if m.Type != "bind" || m.Source != "/srv/sales" {
		t.Errorf("mount %+v", m)
	}
	for _, o := range []string{"bind", "ro", "nosuid", "nodev", "noexec"} {
		if !slices.Contains(m.Options, o) {
			t.Errorf("options %v lack %s", m.Options, o)
		}
	}
	for _, o := range []string{"rbind", "rw", "exec", "suid", "dev"} {
		if slices.Contains(m.Options, o) {
			t.Errorf("options %v hold %s", m.Options, o)
		}
	}
	if err := s.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
