package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckOCIRuntime(t *testing.T) {
	for name, ok := range map[string]bool{
		"": true, "default": true, "runc": true, "runsc": true,
		"crun": false, "gvisor": false, "/usr/bin/runsc": false, "RUNSC": false, "runsc ": false,
	} {
		err := CheckOCIRuntime(name)
		if (err == nil) != ok {
			t.Errorf("CheckOCIRuntime(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "default, runc, runsc") {
			t.Errorf("CheckOCIRuntime(%q) = %v: should list the names", name, err)
		}
	}
}

func TestResolveOCIRuntime(t *testing.T) {
	docker := EngineInfo{Name: "docker", Socket: "unix:///var/run/docker.sock", OCIRuntime: "runc",
		OCIRuntimes: map[string]OCIRuntimeInfo{"runc": {Path: "runc"}}}
	dockerGV := docker
	dockerGV.OCIRuntimes = map[string]OCIRuntimeInfo{"runc": {Path: "runc"}, "runsc": {Path: "/usr/bin/runsc"}}
	podman := EngineInfo{Name: "podman", Socket: "unix:///run/podman/podman.sock", OCIRuntime: "runc"}
	podmanGV := EngineInfo{Name: "podman", Socket: "unix:///run/podman/podman-runsc.sock", OCIRuntime: "runsc"}
	crun := EngineInfo{Name: "podman", OCIRuntime: "crun"}
	tests := []struct {
		name               string
		info               EngineInfo
		want               string
		request, effective string
		errHas             []string // "" for none
	}{
		{"docker default", docker, "", "", "runc", nil},
		{"docker default by name", dockerGV, "default", "", "runc", nil},
		{"docker runc", docker, "runc", "runc", "runc", nil},
		{"docker runsc", dockerGV, "runsc", "runsc", "runsc", nil},
		{"docker runsc unregistered", docker, "runsc", "", "", []string{"has no OCI runtime named runsc (it has runc)",
			"apt-get install runsc", "/etc/docker/daemon.json", `"--network=none", "--host-uds=open"`, "kill -HUP", "bridge doctor --oci-runtime runsc"}},
		{"docker runsc installed, unregistered", docker, "runsc+installed", "", "", []string{"has no OCI runtime named runsc (it has runc)",
			"gVisor is installed on this machine (/usr/bin/runsc) but not registered with docker", "/etc/docker/daemon.json", "-!apt-get install"}},
		{"podman default", crun, "", "", "crun", nil},
		{"podman runc", podman, "runc", "runc", "runc", nil},
		{"podman runsc on a runc service", podman, "runsc", "", "", []string{"runs every container with runc",
			"cannot choose another runtime per container", "--runtime runsc --runtime-flag network=none --runtime-flag host-uds=open",
			"CONTAINER_HOST=unix:///run/podman/podman-runsc.sock", "install gVisor"}},
		{"podman runsc on a runc service, installed", podman, "runsc+installed", "", "", []string{"runs every container with runc",
			"gVisor is installed on this machine (/usr/bin/runsc), so what is missing is a second Podman service for it",
			"--runtime runsc --runtime-flag network=none --runtime-flag host-uds=open", "CONTAINER_HOST=unix:///run/podman/podman-runsc.sock", "-!install gVisor"}},
		{"podman runsc service", podmanGV, "runsc", "runsc", "runsc", nil},
		{"podman runsc service, default", podmanGV, "default", "", "runsc", nil},
		{"podman runc on a runsc service", podmanGV, "runc", "", "", []string{"runs every container with runsc", "--runtime runc"}},
		{"podman runc on a crun service", crun, "runc", "", "", []string{"crun", `runtime = "runc"`}},
		{"podman runtime by path", EngineInfo{Name: "podman", OCIRuntime: "/usr/bin/runsc"}, "runsc", "runsc", "runsc", nil},
		{"podman unnamed runtime", EngineInfo{Name: "podman"}, "runsc", "", "", []string{"an unnamed runtime"}},
		{"unknown name", docker, "kata", "", "", []string{`unknown OCI runtime "kata"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// runsc is installed on this machine only where the case says
			// so: the test must not depend on the machine it runs on.
			want, installed := strings.CutSuffix(tt.want, "+installed")
			req, eff, err := resolveOCIRuntime(tt.info, want, func() string {
				if installed {
					return "/usr/bin/runsc"
				}
				return ""
			})
			if tt.errHas == nil {
				if err != nil || req != tt.request || eff != tt.effective {
					t.Fatalf("= %q, %q, %v; want %q, %q", req, eff, err, tt.request, tt.effective)
				}
				return
			}
			if err == nil {
				t.Fatalf("= %q, %q; want an error", req, eff)
			}
			if tt.want != "kata" && !errors.Is(err, ErrOCIRuntime) {
				t.Errorf("%v does not wrap ErrOCIRuntime", err)
			}
			for _, s := range tt.errHas {
				if not, ok := strings.CutPrefix(s, "-!"); ok {
					if strings.Contains(err.Error(), not) {
						t.Errorf("error says %q:\n%v", not, err)
					}
				} else if !strings.Contains(err.Error(), s) {
					t.Errorf("error lacks %q:\n%v", s, err)
				}
			}
		})
	}
}

func TestGVisorFlagsMissing(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--network=none", "--host-uds=open"}, ""},
		{[]string{"--host-uds=all", "-network=none", "--debug"}, ""},
		{[]string{"--network", "none", "--host-uds", "open"}, ""},
		{[]string{"--network=none", "--fsgofer-host-uds"}, ""},
		{[]string{"--network=none", "--fsgofer-host-uds=false"}, "--host-uds=open"},
		{[]string{"--network=none"}, "--host-uds=open"},
		{[]string{"--host-uds=open"}, "--network=none"},
		{[]string{"--network=sandbox", "--host-uds=create"}, "--network=none --host-uds=open"},
		{nil, "--network=none --host-uds=open"},
		{[]string{"network=none", "host-uds=open"}, "--network=none --host-uds=open"},
	}
	for _, tt := range tests {
		if got := strings.Join(GVisorFlagsMissing(tt.args), " "); got != tt.want {
			t.Errorf("GVisorFlagsMissing(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestGVisorHint(t *testing.T) {
	tests := []struct {
		engine, msg string
		want        []string // nil: no hint
	}{
		{"docker", `OCI runtime start failed: starting container: setting up network: creating interfaces from net namespace "/proc/1/ns/net": cannot run with network enabled in root network namespace: unknown`,
			[]string{"--network=none", "daemon.json", "kill -HUP"}},
		{"podman", "cannot run with network enabled in root network namespace", []string{"--network=none", "--runtime-flag"}},
		{"podman", "the runner exited with code 1 before connecting to the relay: bridge-runner: cannot connect to the relay socket /run/bridge/relay.sock: [Errno 1] Operation not permitted",
			[]string{"--host-uds=open", "--runtime-flag"}},
		{"docker", "cannot connect to the relay socket /run/bridge/relay.sock: [Errno 2] No such file or directory", nil},
		{"docker", "image not found", nil},
	}
	for _, tt := range tests {
		got := gvisorHint(tt.engine, tt.msg)
		if tt.want == nil {
			if got != "" {
				t.Errorf("gvisorHint(%q) = %q, want none", tt.msg, got)
			}
			continue
		}
		for _, s := range tt.want {
			if !strings.Contains(got, s) {
				t.Errorf("gvisorHint(%s, %q) = %q, lacks %q", tt.engine, tt.msg, got, s)
			}
		}
	}
}

func TestForGVisor(t *testing.T) {
	l := DefaultLimits()
	s := NewSpec("r1", "img", "/tmp/x", "tok", l)
	s.ForGVisor()
	if s.Pids != l.Pids+GVisorHostThreads {
		t.Errorf("host pids = %d, want %d", s.Pids, l.Pids+GVisorHostThreads)
	}
	var nproc *Rlimit
	for i := range s.Rlimits {
		if s.Rlimits[i].Name == "nproc" {
			nproc = &s.Rlimits[i]
		}
	}
	if nproc == nil || nproc.Soft != uint64(l.Pids) || nproc.Hard != uint64(l.Pids) {
		t.Errorf("nproc = %+v, want %d (the per-run cap inside gVisor)", nproc, l.Pids)
	}
	// The spec of the next run is its own.
	if s2 := NewSpec("r2", "img", "/tmp/x", "tok", l); s2.Pids != l.Pids || s2.Rlimits[1].Soft != l.NProc {
		t.Errorf("NewSpec after ForGVisor: %+v", s2)
	}
	// Without a pids limit (an engine that cannot enforce it) nothing changes.
	s.Pids = 0
	s.Rlimits[1].Soft = 7
	s.ForGVisor()
	if s.Pids != 0 || s.Rlimits[1].Soft != 7 {
		t.Errorf("ForGVisor without pids: %+v", s)
	}
}

// The Executor asks for the runtime in every spec, adapts the spec to
// gVisor, and refuses an engine that cannot run the runtime before any
// container exists.
func TestExecutorOCIRuntime(t *testing.T) {
	gvisor := map[string]OCIRuntimeInfo{"runc": {}, "runsc": {Path: "/usr/bin/runsc"}}
	tests := []struct {
		name        string
		def         string
		runtimes    map[string]OCIRuntimeInfo
		want        string
		specRuntime string
		gvisor      bool
	}{
		{"default", "runc", gvisor, "", "", false},
		{"runc", "runc", gvisor, "runc", "runc", false},
		{"runsc", "runc", gvisor, "runsc", "runsc", true},
		{"service default runsc", "runsc", nil, "default", "", true},
		{"service runsc", "runsc", nil, "runsc", "runsc", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newFake(pythonRunner(t))
			rt.ociRuntime, rt.ociRuntimes = tt.def, tt.runtimes
			ex := newTestExecutor(t, rt, ExecutorOptions{OCIRuntime: tt.want})
			if got := ex.OCIRuntime(); got != map[bool]string{true: "runsc", false: "runc"}[tt.gvisor] {
				t.Errorf("OCIRuntime() = %q", got)
			}
			l := testLimits()
			res, err := ex.Run(context.Background(), Request{Code: "print(1)", Limits: l})
			if err != nil || res.Stdout != "1\n" {
				t.Fatalf("Run: %+v, %v", res, err)
			}
			s := rt.lastSpec
			if s.OCIRuntime != tt.specRuntime {
				t.Errorf("spec OCIRuntime = %q, want %q", s.OCIRuntime, tt.specRuntime)
			}
			wantPids, wantNProc := l.Pids, l.NProc
			if tt.gvisor {
				wantPids, wantNProc = l.Pids+GVisorHostThreads, uint64(l.Pids)
			}
			if s.Pids != wantPids || s.Rlimits[1].Name != "nproc" || s.Rlimits[1].Soft != wantNProc {
				t.Errorf("pids %d, rlimits %+v; want pids %d, nproc %d", s.Pids, s.Rlimits, wantPids, wantNProc)
			}
		})
	}
	for _, tt := range []struct {
		name, def string
		runtimes  map[string]OCIRuntimeInfo
		want      string
	}{
		{"docker without runsc", "runc", map[string]OCIRuntimeInfo{"runc": {}}, "runsc"},
		{"podman without runsc", "runc", nil, "runsc"},
		{"podman without runc", "runsc", nil, "runc"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rt := newFake(nil)
			rt.ociRuntime, rt.ociRuntimes = tt.def, tt.runtimes
			tmp, err := os.MkdirTemp("", "bt-")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(tmp)
			_, err = NewExecutor(context.Background(), rt, ExecutorOptions{Image: "i", RunRoot: filepath.Join(tmp, "runs"), OCIRuntime: tt.want})
			if !errors.Is(err, ErrOCIRuntime) {
				t.Fatalf("NewExecutor: %v, want ErrOCIRuntime", err)
			}
			if rt.created != 0 {
				t.Fatal("a container was created")
			}
		})
	}
}

// A run under gVisor that fails for a missing runsc flag says which.
func TestExecutorGVisorHints(t *testing.T) {
	rt := newFake(nil)
	rt.ociRuntime = "runsc"
	rt.createErr = fmt.Errorf("OCI runtime create failed: cannot run with network enabled in root network namespace")
	ex := newTestExecutor(t, rt, ExecutorOptions{})
	_, err := ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
	if err == nil || !strings.Contains(err.Error(), "runsc must run with --network=none") {
		t.Fatalf("err = %v", err)
	}
	// Under runc the same message gets no gVisor hint.
	rt.ociRuntime = "runc"
	ex = newTestExecutor(t, rt, ExecutorOptions{})
	_, err = ex.Run(context.Background(), Request{Code: "pass", Limits: testLimits()})
	if err == nil || strings.Contains(err.Error(), "runsc must") {
		t.Fatalf("err = %v", err)
	}
}
