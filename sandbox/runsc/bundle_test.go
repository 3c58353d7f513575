package runsc

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
	"github.com/bridge-mcp/bridge/sandbox/internal/enginetest"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func testSpec(t *testing.T) sandbox.ContainerSpec {
	t.Helper()
	l := sandbox.DefaultLimits()
	l.Memory = 256 << 20
	l.CPUs = 1.5
	l.Pids = 64
	l.TmpfsSize = 32 << 20
	l.NoFile = 512
	l.NProc = 2048
	spec := sandbox.NewSpec("run1", "bridge-runner:test", "/run/user/0/bridge/run1", "tok", l)
	spec.ForGVisor() // as the core does for a gVisor engine
	return spec
}

func testOptions() Options { return Options{Init: "/usr/bin/tini-static", CgroupParent: "/bridge"} }

func mountAt(cfg *specs.Spec, dst string) (specs.Mount, bool) {
	for _, m := range cfg.Mounts {
		if m.Destination == dst {
			return m, true
		}
	}
	return specs.Mount{}, false
}

func TestBundleHardening(t *testing.T) {
	spec := testSpec(t)
	imageEnv := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "MPLBACKEND=Agg"}
	cfg, err := bundleConfig(spec, "bridge-run-run1", "/cache/rootfs/abc/rootfs", imageEnv, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := enginetest.Want
	p, lin := cfg.Process, cfg.Linux
	res := lin.Resources
	has := func(opts []string, want ...string) bool {
		for _, w := range want {
			if !slices.Contains(opts, w) {
				return false
			}
		}
		return true
	}
	checks := []enginetest.Check{
		{Property: enginetest.Image, Name: "the cached root file system, the command behind the init", Holds: func(t *testing.T) error {
			return want(cfg.Root.Path == "/cache/rootfs/abc/rootfs" && slices.Equal(p.Args, []string{InitPath, "--", "python3", "-I", "-B", "/opt/bridge/runner.py"}),
				"root %q args %q", cfg.Root.Path, p.Args)
		}},
		{Property: enginetest.Nobody, Holds: func(t *testing.T) error {
			return want(p.User.UID == 65534 && p.User.GID == 65534 && len(p.User.AdditionalGids) == 0, "user %+v", p.User)
		}},
		{Property: enginetest.ReadOnlyRoot, Holds: func(t *testing.T) error { return want(cfg.Root.Readonly, "writable root") }},
		{Property: enginetest.NoNetwork, Name: "a network namespace, and runsc --network=none", Holds: func(t *testing.T) error {
			ns := slices.ContainsFunc(lin.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace && n.Path == "" })
			return want(ns && slices.Contains(runFlags(Options{}), "--network=none"), "namespaces %v flags %v", lin.Namespaces, runFlags(Options{}))
		}},
		{Property: enginetest.NoCapability, Holds: func(t *testing.T) error {
			c := p.Capabilities
			return want(c != nil && len(c.Bounding)+len(c.Effective)+len(c.Inheritable)+len(c.Permitted)+len(c.Ambient) == 0, "capabilities %+v", c)
		}},
		{Property: enginetest.NoEscalation, Holds: func(t *testing.T) error { return want(p.NoNewPrivileges, "no_new_privs off") }},
		{Property: enginetest.Seccomp, Name: "the bridge's profile, in the bundle as under Docker (applied inside gVisor with Options.OCISeccomp)", Holds: func(t *testing.T) error {
			s := lin.Seccomp
			return want(s != nil && s.DefaultAction == specs.ActErrno && len(s.Syscalls) > 10 && slices.Contains(runFlags(Options{OCISeccomp: true}), "--oci-seccomp"), "seccomp %+v", s)
		}},
		{Property: enginetest.Memory, Holds: func(t *testing.T) error {
			m := res.Memory
			return want(m != nil && *m.Limit == 256<<20 && *m.Swap == 256<<20, "memory %+v", m)
		}},
		{Property: enginetest.CPU, Holds: func(t *testing.T) error {
			c := res.CPU
			return want(c != nil && *c.Quota == 150_000 && *c.Period == 100_000, "cpu %+v", c)
		}},
		{Property: enginetest.Pids, Name: "pids with gVisor's host threads", Holds: func(t *testing.T) error {
			return want(res.Pids != nil && res.Pids.Limit == 64+sandbox.GVisorHostThreads, "pids %+v", res.Pids)
		}},
		{Property: enginetest.Rlimits, Holds: func(t *testing.T) error {
			want1 := []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 512, Soft: 512}, {Type: "RLIMIT_NPROC", Hard: 64, Soft: 64}}
			return want(slices.Equal(p.Rlimits, want1), "rlimits %+v", p.Rlimits)
		}},
		{Property: enginetest.TmpNoExec, Holds: func(t *testing.T) error {
			m, ok := mountAt(cfg, sandbox.TmpDir)
			return want(ok && m.Type == "tmpfs" && has(m.Options, "noexec", "nosuid", "nodev", "size=33554432"), "/tmp %+v", m)
		}},
		{Property: enginetest.RelayReadOnly, Holds: func(t *testing.T) error {
			m, ok := mountAt(cfg, sandbox.RelayDir)
			return want(ok && m.Type == "bind" && m.Source == "/run/user/0/bridge/run1" && has(m.Options, "ro", "nosuid", "nodev", "noexec"), "run folder %+v", m)
		}},
		{Property: enginetest.OnlyMounts, Name: "gVisor's own /proc, /dev and /sys, /dev/shm, /tmp, the run folder, the init", Holds: func(t *testing.T) error {
			var got []string
			for _, m := range cfg.Mounts {
				got = append(got, m.Destination)
			}
			return want(slices.Equal(got, []string{"/proc", "/dev", "/sys", "/dev/shm", "/tmp", sandbox.RelayDir, InitPath}), "mounts %v", got)
		}},
		{Property: enginetest.Init, Name: "the host's static init, read-only, first", Holds: func(t *testing.T) error {
			m, ok := mountAt(cfg, InitPath)
			return want(ok && m.Source == "/usr/bin/tini-static" && has(m.Options, "ro") && p.Args[0] == InitPath, "init %+v args %q", m, p.Args)
		}},
		{Property: enginetest.Env, Name: "the image's, under the spec's", Holds: func(t *testing.T) error {
			w := []string{"BRIDGE_RELAY_SOCKET=/run/bridge/relay.sock", "BRIDGE_RELAY_TOKEN=tok", "HOME=/tmp", "LANG=C.UTF-8", "MPLBACKEND=Agg", "PATH=/usr/local/bin:/usr/bin:/bin"}
			return want(slices.Equal(p.Env, w), "env %q", p.Env)
		}},
		{Property: enginetest.Labels, Name: "as annotations (and in the state file: TestClientCommands)", Holds: func(t *testing.T) error {
			return want(maps.Equal(cfg.Annotations, spec.Labels) && cfg.Annotations[sandbox.LabelRunID] == "run1", "annotations %v", cfg.Annotations)
		}},
		{Property: enginetest.OCIRuntime, Name: "runsc, and no other", Holds: func(t *testing.T) error {
			other := spec
			other.OCIRuntime = "runc"
			_, err := bundleConfig(other, "x", "/r", nil, testOptions())
			return want(errors.Is(err, sandbox.ErrOCIRuntime), "runc spec: %v", err)
		}},
		{Name: "a cgroup of its own", Holds: func(t *testing.T) error {
			return want(lin.CgroupsPath == "/bridge/bridge-run-run1", "cgroupsPath %q", lin.CgroupsPath)
		}},
	}
	enginetest.Hardening(t, "runsc", checks, nil)
}

func TestBundleRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*sandbox.ContainerSpec, *Options)
		want string
	}{
		"data mounts": {func(s *sandbox.ContainerSpec, _ *Options) {
			s.DataMounts = []sandbox.DataMount{{Host: "/srv", Path: "/data/srv"}}
		}, "policy's mounts"},
		"a network":            {func(s *sandbox.ContainerSpec, _ *Options) { s.NetworkNone = false }, "without a network"},
		"an init without one":  {func(_ *sandbox.ContainerSpec, o *Options) { o.Init = "" }, "set the runsc engine's Options.Init"},
		"capabilities":         {func(s *sandbox.ContainerSpec, _ *Options) { s.CapDropAll = false }, "drops every capability"},
		"a user by name":       {func(s *sandbox.ContainerSpec, _ *Options) { s.User = "nobody" }, "uid:gid in numbers"},
		"another OCI runtime":  {func(s *sandbox.ContainerSpec, _ *Options) { s.OCIRuntime = "runc" }, "not runc"},
		"a gid out of range":   {func(s *sandbox.ContainerSpec, _ *Options) { s.User = "65534:4294967296" }, "uid:gid in numbers"},
		"no gid":               {func(s *sandbox.ContainerSpec, _ *Options) { s.User = "65534" }, "uid:gid in numbers"},
		"runsc by its path ok": {func(s *sandbox.ContainerSpec, _ *Options) { s.OCIRuntime = "/usr/bin/runsc" }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			spec, o := testSpec(t), testOptions()
			tc.edit(&spec, &o)
			_, err := bundleConfig(spec, "x", "/r", nil, o)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestOCISeccomp(t *testing.T) {
	s, err := ociSeccomp(engines.SeccompProfile(), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.Architectures, "SCMP_ARCH_X86_64") || !slices.Contains(s.Architectures, "SCMP_ARCH_X32") || slices.Contains(s.Architectures, "SCMP_ARCH_AARCH64") {
		t.Errorf("architectures %v", s.Architectures)
	}
	if s.DefaultErrnoRet == nil || *s.DefaultErrnoRet != 38 { // ENOSYS
		t.Errorf("default errno %v", s.DefaultErrnoRet)
	}
	action := func(name string) (specs.LinuxSyscall, bool) {
		for _, r := range s.Syscalls {
			if slices.Contains(r.Names, name) {
				return r, true
			}
		}
		return specs.LinuxSyscall{}, false
	}
	if r, ok := action("read"); !ok || r.Action != specs.ActAllow {
		t.Errorf("read: %+v", r)
	}
	if r, ok := action("unshare"); !ok || r.Action != specs.ActErrno || r.ErrnoRet == nil || *r.ErrnoRet != 1 {
		t.Errorf("unshare not refused with EPERM: %+v", r)
	}
	if r, ok := action("clone"); !ok || len(r.Args) != 1 || r.Args[0].Op != specs.OpMaskedEqual {
		t.Errorf("clone without its namespace mask: %+v", r)
	}
	if _, ok := action("arch_prctl"); !ok {
		t.Error("amd64's arch_prctl left out")
	}
	if _, ok := action("set_tls"); ok {
		t.Error("arm's set_tls kept on amd64")
	}
	arm, err := ociSeccomp(engines.SeccompProfile(), "arm64")
	if err != nil || !slices.Contains(arm.Architectures, "SCMP_ARCH_AARCH64") {
		t.Errorf("arm64: %v %v", arm, err)
	}
	if _, err := ociSeccomp(engines.SeccompProfile(), "riscv64"); err == nil {
		t.Error("riscv64 accepted")
	}
}
