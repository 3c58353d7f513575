package docker

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/internal/engines"
	"github.com/bridge-mcp/bridge/sandbox/internal/enginetest"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
)

func testDockerSpec(t *testing.T) (sandbox.ContainerSpec, sandbox.Limits) {
	t.Helper()
	l := sandbox.DefaultLimits()
	l.Memory = 256 << 20
	l.CPUs = 1.5
	l.Pids = 64
	l.TmpfsSize = 32 << 20
	l.NoFile = 512
	l.NProc = 2048
	return sandbox.NewSpec("run1", "bridge-runner:test", "/tmp/bridge-run1", "tok", l), l
}

func TestDockerConfigHardening(t *testing.T) {
	spec, l := testDockerSpec(t)
	cfg, hc := dockerConfig(spec)
	want := enginetest.Want
	opts := strings.Split(hc.Tmpfs[sandbox.TmpDir], ",")
	runsc := spec
	runsc.OCIRuntime = "runsc"
	_, hcRunsc := dockerConfig(runsc)
	seccomp, seccompErr := (&Client{}).seccompOpt()
	checks := []enginetest.Check{
		{Property: enginetest.Image, Name: "", Holds: func(t *testing.T) error {
			cmd := append([]string(cfg.Entrypoint), cfg.Cmd...)
			return want(cfg.Image == "bridge-runner:test" && slices.Equal(cmd, []string{"python3", "-I", "-B", "/opt/bridge/runner.py"}) &&
				slices.Equal([]string(cfg.Entrypoint), []string{"python3"}), "image %q entrypoint %q cmd %q", cfg.Image, cfg.Entrypoint, cfg.Cmd)
		}},
		{Property: enginetest.Nobody, Name: "", Holds: func(t *testing.T) error { return want(cfg.User == "65534:65534", "user %q", cfg.User) }},
		{Property: enginetest.ReadOnlyRoot, Name: "", Holds: func(t *testing.T) error { return want(hc.ReadonlyRootfs, "writable root") }},
		{Property: enginetest.NoNetwork, Name: "", Holds: func(t *testing.T) error {
			return want(cfg.NetworkDisabled && hc.NetworkMode == "none" && hc.NetworkMode.IsNone(), "network %q disabled %v", hc.NetworkMode, cfg.NetworkDisabled)
		}},
		{Property: enginetest.NoCapability, Name: "", Holds: func(t *testing.T) error {
			return want(slices.Equal([]string(hc.CapDrop), []string{"ALL"}) && len(hc.CapAdd) == 0, "drop %v add %v", hc.CapDrop, hc.CapAdd)
		}},
		{Property: enginetest.NoEscalation, Name: "", Holds: func(t *testing.T) error {
			return want(slices.Contains(hc.SecurityOpt, "no-new-privileges") && !hc.Privileged, "security options %v, privileged %v", hc.SecurityOpt, hc.Privileged)
		}},
		{Property: enginetest.Seccomp, Name: "the profile Create adds", Holds: func(t *testing.T) error {
			return want(seccompErr == nil && seccomp == "seccomp="+string(engines.SeccompProfile()), "seccomp option %.40q: %v", seccomp, seccompErr)
		}},
		{Property: enginetest.Memory, Name: "", Holds: func(t *testing.T) error {
			return want(hc.Memory == l.Memory && hc.MemorySwap == hc.Memory, "memory %d swap %d", hc.Memory, hc.MemorySwap)
		}},
		{Property: enginetest.CPU, Name: "quota, no nano CPUs (they conflict)", Holds: func(t *testing.T) error {
			return want(hc.CPUQuota == 150_000 && hc.CPUPeriod == sandbox.CPUPeriod && hc.NanoCPUs == 0, "quota %d period %d nano %d", hc.CPUQuota, hc.CPUPeriod, hc.NanoCPUs)
		}},
		{Property: enginetest.Pids, Name: "", Holds: func(t *testing.T) error {
			return want(hc.PidsLimit != nil && *hc.PidsLimit == 64, "pids %v", hc.PidsLimit)
		}},
		{Property: enginetest.Rlimits, Name: "", Holds: func(t *testing.T) error {
			return want(hasUlimit(hc, "nofile", 512) && hasUlimit(hc, "nproc", 2048), "ulimits %+v", hc.Ulimits)
		}},
		{Property: enginetest.TmpNoExec, Name: "", Holds: func(t *testing.T) error {
			for _, o := range []string{"rw", "noexec", "nosuid", "nodev", "size=33554432", "mode=1777"} {
				if !slices.Contains(opts, o) {
					return fmt.Errorf("/tmp options %v lack %s", opts, o)
				}
			}
			return nil
		}},
		{Property: enginetest.RelayReadOnly, Name: "", Holds: func(t *testing.T) error {
			return want(len(hc.Mounts) > 0 && hc.Mounts[0] == mount.Mount{
				Type: mount.TypeBind, Source: "/tmp/bridge-run1", Target: sandbox.RelayDir, ReadOnly: true,
			}, "mounts %+v", hc.Mounts)
		}},
		{Property: enginetest.OnlyMounts, Name: "", Holds: func(t *testing.T) error {
			return want(len(hc.Mounts) == 1 && len(hc.Binds) == 0 && len(hc.Tmpfs) == 1, "mounts %+v binds %v tmpfs %v", hc.Mounts, hc.Binds, hc.Tmpfs)
		}},
		{Property: enginetest.Init, Name: "", Holds: func(t *testing.T) error { return want(hc.Init != nil && *hc.Init, "init %v", hc.Init) }},
		{Property: enginetest.Env, Name: "", Holds: func(t *testing.T) error {
			return want(slices.Contains(cfg.Env, sandbox.EnvRelaySocket+"="+sandbox.RelaySocket) && slices.Contains(cfg.Env, sandbox.EnvRelayToken+"=tok") &&
				slices.Contains(cfg.Env, "HOME=/tmp") && len(cfg.Env) == len(spec.Env), "env %v", cfg.Env)
		}},
		{Property: enginetest.Labels, Name: "", Holds: func(t *testing.T) error {
			return want(cfg.Labels[sandbox.LabelManaged] == "true" && cfg.Labels[sandbox.LabelRunID] == "run1", "labels %v", cfg.Labels)
		}},
		{Property: enginetest.OCIRuntime, Name: "the engine's default, or the one asked for", Holds: func(t *testing.T) error {
			return want(hc.Runtime == "" && hcRunsc.Runtime == "runsc", "runtime %q, asked runsc: %q", hc.Runtime, hcRunsc.Runtime)
		}},
		{Property: "", Name: "workdir", Holds: func(t *testing.T) error { return want(cfg.WorkingDir == sandbox.TmpDir, "workdir %q", cfg.WorkingDir) }},
		{Property: "", Name: "log size capped", Holds: func(t *testing.T) error {
			return want(hc.LogConfig.Config["max-size"] != "", "log config %v", hc.LogConfig)
		}},
		{Property: "", Name: "not auto-removed (Wait inspects)", Holds: func(t *testing.T) error { return want(!hc.AutoRemove, "auto-remove") }},
	}
	enginetest.Hardening(t, "docker", checks, nil)
	if t.Failed() {
		t.Logf("config: %s\nhost config: %s", toJSON(t, cfg), toJSON(t, hc))
	}
}

func hasUlimit(hc *container.HostConfig, name string, v int64) bool {
	for _, u := range hc.Ulimits {
		if u.Name == name && u.Soft == v && u.Hard == v {
			return true
		}
	}
	return false
}

func toJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

// TestDockerConfigWireFormat checks the JSON the engine receives for the
// fields whose encoding matters.
func TestDockerConfigWireFormat(t *testing.T) {
	spec, _ := testDockerSpec(t)
	cfg, hc := dockerConfig(spec)
	tests := []struct{ name, doc, want string }{
		{"entrypoint", toJSON(t, cfg), `"Entrypoint":["python3"]`},
		{"cmd", toJSON(t, cfg), `"Cmd":["-I","-B","/opt/bridge/runner.py"]`},
		{"network mode", toJSON(t, hc), `"NetworkMode":"none"`},
		{"init", toJSON(t, hc), `"Init":true`},
		{"pids", toJSON(t, hc), `"PidsLimit":64`},
		{"ulimit", toJSON(t, hc), `{"Name":"nofile","Hard":512,"Soft":512}`},
		{"cpu quota", toJSON(t, hc), `"CpuQuota":150000`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.doc, tc.want) {
				t.Errorf("want %s in %s", tc.want, tc.doc)
			}
		})
	}
}

// TestDockerConfigCopies checks that the translation does not alias the
// spec's maps and slices.
func TestDockerConfigCopies(t *testing.T) {
	spec, _ := testDockerSpec(t)
	cfg, hc := dockerConfig(spec)
	cfg.Labels["x"] = "y"
	cfg.Cmd[0] = "-x"
	cfg.Entrypoint[0] = "sh"
	hc.Tmpfs["/x"] = ""
	if _, ok := spec.Labels["x"]; ok || spec.Command[0] != "python3" || spec.Command[1] != "-I" {
		t.Error("dockerConfig aliases the spec's labels or command")
	}
	if _, ok := spec.Tmpfs["/x"]; ok {
		t.Error("dockerConfig aliases the spec's tmpfs map")
	}
}

func TestDockerConfigEmptySpec(t *testing.T) {
	// A spec with the hardening flags off must not grow any on its own, and
	// must not panic on nil maps.
	cfg, hc := dockerConfig(sandbox.ContainerSpec{Image: "x"})
	if hc.NetworkMode != "" || hc.ReadonlyRootfs || len(hc.CapDrop) > 0 || len(hc.SecurityOpt) > 0 ||
		hc.PidsLimit != nil || cfg.NetworkDisabled || len(hc.Mounts) > 0 {
		t.Errorf("unexpected options for an empty spec: %s %s", toJSON(t, cfg), toJSON(t, hc))
	}
}

func TestDockerClamp(t *testing.T) {
	tests := []struct {
		in   uint64
		want int64
	}{{0, 0}, {1024, 1024}, {1<<63 - 1, 1<<63 - 1}, {1 << 63, 1<<63 - 1}, {^uint64(0), 1<<63 - 1}}
	for _, tc := range tests {
		if got := dockerClamp(tc.in); got != tc.want {
			t.Errorf("dockerClamp(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestDockerEnforcement(t *testing.T) {
	tests := []struct {
		name                       string
		rootless                   bool
		cgroup                     string
		memory, swap, pids, cpu    bool
		wantMem, wantPids, wantCPU bool
		reason                     string
	}{
		{"all", false, "1", true, true, true, true, true, true, true, ""},
		{"rootless v1", true, "1", true, true, true, true, false, false, false, "rootless"},
		{"rootless v2", true, "2", true, true, true, true, true, true, true, ""},
		{"no swap accounting", false, "1", true, false, true, true, false, true, true, "swapaccount=1"},
		{"no memory", false, "1", false, false, true, true, false, true, true, "cgroup_enable=memory"},
		{"no pids", false, "2", true, true, false, true, true, false, true, "pids"},
		{"no cfs", false, "2", true, true, true, false, true, true, false, "CFS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := dockerEnforcement(tc.rootless, tc.cgroup, tc.memory, tc.swap, tc.pids, tc.cpu)
			if e.Memory != tc.wantMem || e.Pids != tc.wantPids || e.CPU != tc.wantCPU {
				t.Errorf("got %+v", e)
			}
			if tc.reason == "" && e.Reason != "" {
				t.Errorf("unexpected reason %q", e.Reason)
			}
			if !strings.Contains(e.Reason, tc.reason) {
				t.Errorf("reason %q does not mention %q", e.Reason, tc.reason)
			}
		})
	}
}

func TestDockerBuildStream(t *testing.T) {
	tests := []struct {
		name, in, out, err string
	}{
		{"ok", `{"stream":"Step 1/2 : FROM x\n"}{"stream":" ---\u003e abc\n"}{"aux":{"ID":"sha256:1"}}{"stream":"Successfully built abc\n"}`,
			"Step 1/2 : FROM x\n ---> abc\nSuccessfully built abc\n", ""},
		{"error", `{"stream":"Step 2/2 : RUN false\n"}{"errorDetail":{"code":1,"message":"The command '/bin/sh -c false' returned a non-zero code: 1"},"error":"The command '/bin/sh -c false' returned a non-zero code: 1"}`,
			"Step 2/2 : RUN false\n", "returned a non-zero code: 1"},
		{"error without detail", `{"error":"boom"}`, "", "boom"},
		{"status", `{"status":"Pulling","id":"l1"}{"status":"Downloading","id":"l1","progress":"[==>  ]"}`, "l1: Pulling\n", ""},
		{"garbage", `{"stream":"a"}not json`, "a", "read build output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := dockerBuildStream(strings.NewReader(tc.in), &out)
			if out.String() != tc.out {
				t.Errorf("out = %q, want %q", out.String(), tc.out)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error = %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestDockerTarDir(t *testing.T) {
	dir := t.TempDir()
	mustWrite := func(name, data string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite("Dockerfile", "FROM scratch\n")
	mustWrite("sub/runner.py", "print(1)\n")
	if err := os.Symlink("runner.py", filepath.Join(dir, "sub", "link.py")); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err := dockerTarDir(dir, &buf); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
		}
		data, _ := io.ReadAll(tr)
		switch h.Typeflag {
		case tar.TypeSymlink:
			got[h.Name] = "-> " + h.Linkname
		case tar.TypeDir:
			got[h.Name] = "dir"
		default:
			got[h.Name] = string(data)
		}
	}
	want := map[string]string{
		"Dockerfile":    "FROM scratch\n",
		"sub/":          "dir",
		"sub/runner.py": "print(1)\n",
		"sub/link.py":   "-> runner.py",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tar entries = %v, want %v", got, want)
	}
}

func TestPodmanCompatConfig(t *testing.T) {
	spec, _ := testDockerSpec(t)
	_, hc := dockerConfig(spec)
	podmanCompatConfig(spec, hc)
	tests := []struct{ dir, want string }{
		{"/run", podmanCompatTmpfs},
		{"/var/tmp", podmanCompatTmpfs},
		{sandbox.TmpDir, spec.Tmpfs[sandbox.TmpDir]},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			if got := hc.Tmpfs[tc.dir]; got != tc.want {
				t.Errorf("tmpfs %s = %q, want %q", tc.dir, got, tc.want)
			}
		})
	}
	if !slices.Contains(strings.Split(podmanCompatTmpfs, ","), "ro") ||
		!slices.Contains(strings.Split(podmanCompatTmpfs, ","), "noexec") {
		t.Errorf("podman compat tmpfs %q must be read-only and noexec", podmanCompatTmpfs)
	}
	if _, ok := spec.Tmpfs["/run"]; ok {
		t.Error("podmanCompatConfig changed the spec")
	}

	// A writable root gets nothing extra.
	spec.ReadOnlyRoot = false
	_, hc = dockerConfig(spec)
	podmanCompatConfig(spec, hc)
	if len(hc.Tmpfs) != 1 {
		t.Errorf("tmpfs for a writable root: %v", hc.Tmpfs)
	}
}

func TestExitingRace(t *testing.T) {
	for msg, want := range map[string]bool{
		"Error response from daemon: Could not kill running container f3ed, cannot remove - Container f3ed is not running":              true,
		"cannot remove container 1c3b as it could not be stopped: sending SIGKILL to container 1c3b: container state improper: stopped": true,
		"Error response from daemon: No such container: f3ed":                                                                           false,
		"Error response from daemon: Could not kill running container f3ed, cannot remove - permission denied":                          false,
	} {
		if got := exitingRace(errors.New(msg)); got != want {
			t.Errorf("exitingRace(%q) = %v, want %v", msg, got, want)
		}
	}
}

// Docker: an anonymous local volume that binds the folder with every
// option, nothing copied into it.
func TestDockerConfigDataMounts(t *testing.T) {
	spec, _ := testDockerSpec(t)
	spec.DataMounts = []sandbox.DataMount{{Host: "/srv/sales", Path: "/data/sales"}, {Host: "/srv/x y", Path: "/data/in/x"}}
	_, hc := dockerConfig(spec)
	var got []mount.Mount
	for _, m := range hc.Mounts {
		if m.Type == mount.TypeVolume {
			got = append(got, m)
		}
	}
	if len(got) != 2 {
		t.Fatalf("volume mounts %+v", hc.Mounts)
	}
	for i, m := range got {
		dm := spec.DataMounts[i]
		vo := m.VolumeOptions
		switch {
		case m.Target != dm.Path || m.Source != "" || m.ReadOnly:
			// Docker 20.10 refuses ReadOnly on an anonymous volume; the
			// volume's own mount is read-only, and the container's copies it.
			t.Errorf("mount %+v for %+v: want an anonymous volume at %s", m, dm, dm.Path)
		case vo == nil || !vo.NoCopy || vo.DriverConfig == nil || vo.DriverConfig.Name != "local":
			t.Errorf("volume options %+v: want the local driver, nocopy", vo)
		case !reflect.DeepEqual(vo.DriverConfig.Options, map[string]string{"type": "none", "device": dm.Host, "o": "bind,ro,nosuid,nodev,noexec"}):
			t.Errorf("driver options %v", vo.DriverConfig.Options)
		case vo.Labels[sandbox.LabelManaged] != "true" || vo.Labels[sandbox.LabelRunID] != "run1":
			t.Errorf("volume labels %v", vo.Labels)
		}
	}
	// The relay's mount stays a bind mount.
	if hc.Mounts[0].Type != mount.TypeBind || hc.Mounts[0].Target != sandbox.RelayDir {
		t.Errorf("first mount %+v", hc.Mounts[0])
	}
}

// Podman's Docker-compatible API drops a volume's driver options without a
// word: there, data mounts are binds with Podman's own options.
func TestPodmanCompatDataMounts(t *testing.T) {
	spec, _ := testDockerSpec(t)
	spec.DataMounts = []sandbox.DataMount{{Host: "/srv/sales", Path: "/data/sales"}}
	_, hc := dockerConfig(spec)
	podmanCompatConfig(spec, hc)
	for _, m := range hc.Mounts {
		if m.Type == mount.TypeVolume {
			t.Errorf("a volume mount left: %+v", m)
		}
	}
	if len(hc.Mounts) != 1 || hc.Mounts[0].Target != sandbox.RelayDir {
		t.Errorf("mounts %+v: want the relay's alone", hc.Mounts)
	}
	if !slices.Equal(hc.Binds, []string{"/srv/sales:/data/sales:bind,ro,nosuid,nodev,noexec"}) {
		t.Errorf("binds %q", hc.Binds)
	}
}
