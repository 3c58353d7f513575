// Package doctor checks each container engine the bridge could use and
// proves, from inside a real sandbox, that it holds: no network, read-only
// root, uid 65534, no capabilities, no-new-privileges, a noexec tmpfs, the
// limits applied, and a working relay socket. It also says which runner
// image each engine runs and the notable Python packages in it.
package doctor

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/detect"
)

//go:embed smoke.py
var smokeCode string

// Options configure a check.
type Options struct {
	// Engine is auto (check every Podman and Docker socket), podman,
	// docker, kubernetes or runsc.
	Engine string
	// Image is the runner image to look for and smoke-test.
	Image string
	// AllowUnenforcedLimits counts an engine that cannot enforce limits as
	// usable, as `bridge run --allow-unenforced-limits` would.
	AllowUnenforcedLimits bool
	// OCIRuntime is the runtime the smoke test must run under (default,
	// runc or runsc). With runsc an engine that cannot run gVisor is not
	// usable; otherwise whether it could is only reported.
	OCIRuntime string
	Getenv     func(string) string
	// LookPath finds a program on this machine (exec.LookPath when nil).
	LookPath func(string) (string, error)
	Logger   zerolog.Logger
	// euid is this process's effective user id (os.Geteuid when nil).
	euid func() int
}

// Check is one verdict, with a hint that fixes it when it failed.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Hint   string `json:"hint,omitempty"`
	// Optional marks a check of something the bridge was not asked to use
	// (gVisor without --oci-runtime runsc): its failure is only a note.
	Optional bool `json:"optional,omitempty"`
	// Warning marks a failed check that leaves the engine usable but says
	// something to fix (a permission the bridge holds beyond its needs).
	Warning bool `json:"warning,omitempty"`
}

// EngineReport is what doctor found for one engine socket.
type EngineReport struct {
	Engine    string              `json:"engine"`
	Socket    string              `json:"socket"`
	Source    string              `json:"source"`
	Reachable bool                `json:"reachable"`
	Info      *sandbox.EngineInfo `json:"info,omitempty"`
	Image     string              `json:"image"`
	// Variant is the image's variant label: slim, datascience or custom
	// ("" for an image the bridge did not build).
	Variant string `json:"variant,omitempty"`
	Python  string `json:"python,omitempty"`
	// Packages are the notable Python packages the smoke run found in the
	// image (NotablePackages, then any installed with --wheels).
	Packages []Package `json:"packages,omitempty"`
	SmokeMS  int64     `json:"smoke_ms,omitempty"`
	Checks   []Check   `json:"checks"`
	// Usable means the bridge can run code on this engine safely.
	Usable bool `json:"usable"`
}

// Package is a Python distribution in the runner image.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Wheel marks one installed from a wheel (`bridge image build
	// --wheels`), not from Debian.
	Wheel bool `json:"wheel,omitempty"`
}

// NotablePackages are the distributions doctor looks for in every image:
// the data-science variant's. smoke.py holds the same list.
func NotablePackages() []string {
	return []string{"numpy", "pandas", "matplotlib", "scipy", "scikit-learn", "Pillow", "openpyxl", "tabulate", "Jinja2"}
}

// Report is the whole diagnosis.
type Report struct {
	Engines []EngineReport `json:"engines"`
	// OK means at least one engine is usable.
	OK bool `json:"ok"`
}

// Smoke-test limits: small, so that they are quick to check from inside.
func smokeLimits() sandbox.Limits {
	l := sandbox.DefaultLimits()
	l.Timeout = 30 * time.Second
	l.Memory = 128 << 20
	l.Pids = 64
	l.CPUs = 0.5
	l.TmpfsSize = 8 << 20
	return l
}

// Run checks every candidate engine socket for opts.Engine.
func Run(ctx context.Context, opts Options) (Report, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.LookPath == nil {
		opts.LookPath = lookPath
	}
	if err := sandbox.CheckOCIRuntime(opts.OCIRuntime); err != nil {
		return Report{}, err
	}
	cands, err := detect.Candidates(opts.Engine, opts.Getenv)
	if err != nil {
		return Report{}, err
	}
	var rep Report
	for _, c := range cands {
		er := checkEngine(ctx, c, opts)
		rep.OK = rep.OK || er.Usable
		rep.Engines = append(rep.Engines, er)
	}
	return rep, nil
}

// checkEngine checks one candidate engine, from its socket to a smoke run
// in the runner image. It stops at the first failure that leaves nothing
// further to check.
func checkEngine(ctx context.Context, c detect.Candidate, opts Options) EngineReport {
	er := EngineReport{Engine: c.Engine, Socket: c.URI, Source: c.Why, Image: opts.Image}
	if c.Engine == sandbox.EngineRunsc && !er.runscChecks(ctx, c, opts) {
		return er
	}
	rt, err := detect.Connect(ctx, c)
	if err != nil {
		er.addCheck(unreachableCheck(c, err))
		return er
	}
	defer rt.Close()
	er.Reachable = true
	info, err := rt.Info(ctx)
	if err != nil {
		er.addCheck(unreachableCheck(c, err))
		return er
	}
	er.Info = &info
	limitsOK, ok := er.checkSetup(ctx, rt, info, opts)
	if !ok {
		return er
	}
	proto, ok := er.checkImage(ctx, rt, c.Engine, opts)
	if !ok {
		return er
	}
	limits := smokeLimits()
	res, ociRuntime, ok := er.runSmoke(ctx, rt, c.Engine, proto, limits, opts)
	if !ok {
		return er
	}
	safe, inside := er.smokeChecks(res.Stdout, ociRuntime, c.Engine, info.Enforce, limits, opts.Image)
	er.Usable = safe && ((limitsOK && inside) || opts.AllowUnenforcedLimits)
	return er
}

// add records a check and says whether it passed. A check that passed
// needs no hint, so its hint is dropped.
func (er *EngineReport) add(name string, ok bool, detail, hint string) bool {
	if ok {
		hint = ""
	}
	er.Checks = append(er.Checks, Check{Name: name, OK: ok, Detail: detail, Hint: hint})
	return ok
}

// addCheck records a check made elsewhere as it is.
func (er *EngineReport) addCheck(c Check) {
	er.Checks = append(er.Checks, c)
}

// checkSetup records what the engine says of itself: its version and mode,
// the bridges' containers on it, the kubernetes engine's own checks,
// whether it can enforce the limits (limitsOK) and whether it could run
// gVisor. ok is false when gVisor was asked for and cannot run: there is
// nothing further to check then.
func (er *EngineReport) checkSetup(ctx context.Context, rt sandbox.Runtime, info sandbox.EngineInfo, opts Options) (limitsOK, ok bool) {
	mode := "rootful"
	if info.Rootless {
		mode = "rootless"
	}
	er.add("reachable", true, fmt.Sprintf("%s %s (API %s), %s, cgroup v%s, OCI runtime %s",
		info.Name, info.Version, info.APIVersion, mode, info.CgroupVersion, info.OCIRuntime), "")
	er.countBridgeContainers(ctx, rt)
	engineChecks(ctx, rt, er.add, er.addCheck)
	limitsOK = er.add("limits_enforceable", info.Enforce.All(), enforcementDetail(info.Enforce),
		enforceHint(info.Enforce.Reason)+"; or accept that with --allow-unenforced-limits")
	gv := gvisorCheck(info, opts.LookPath)
	if opts.OCIRuntime == sandbox.OCIRuntimeRunsc {
		return limitsOK, er.add(gv.Name, gv.OK, gv.Detail, gv.Hint)
	}
	gv.Optional = !gv.OK
	er.addCheck(gv)
	return limitsOK, true
}

// countBridgeContainers records, for information, what bridges running now
// hold on this engine. Nothing is recorded when the engine cannot list them.
func (er *EngineReport) countBridgeContainers(ctx context.Context, rt sandbox.Runtime) {
	cs, err := rt.List(ctx, map[string]string{sandbox.LabelManaged: "true"})
	if err != nil {
		return
	}
	pooled := 0
	for _, c := range cs {
		if c.Labels[sandbox.LabelPooled] == "true" {
			pooled++
		}
	}
	er.add("bridge_containers", true, fmt.Sprintf("%d container(s) of bridges on this engine, %d of them started ahead of time by a warm pool (pool.size in the policy)", len(cs), pooled), "")
}

// checkImage records whether the runner image is there and whether its
// label says it holds a runner, and returns the relay protocol that label
// names. ok is false when there is no image, or no runner in it: a run
// there could only fail.
func (er *EngineReport) checkImage(ctx context.Context, rt sandbox.Runtime, engine string, opts Options) (proto string, ok bool) {
	img, err := rt.ImageInfo(ctx, opts.Image)
	if err != nil {
		hint := images.MissingHint(opts.Image, engine)
		if !errors.Is(err, sandbox.ErrImageNotFound) {
			hint = "the engine could not inspect images; check its log"
		}
		er.add("image", false, err.Error(), hint)
		return "", false
	}
	er.Variant = img.Labels[images.LabelVariant]
	variant := ""
	if er.Variant != "" {
		variant = er.Variant + ", "
	}
	built := ", built " + img.Created.Format(time.DateTime)
	if img.Created.IsZero() {
		built = "" // the Kubernetes API does not say
	}
	er.add("image", true, fmt.Sprintf("%s (%s%d MB%s)", opts.Image, variant, img.Size>>20, built), "")
	// The runner: its label says it is there and which protocol it speaks;
	// the smoke run proves it. An image without the label has no
	// runner, and a run in it could only fail.
	proto, labelled := img.Labels[images.LabelProtocol]
	if !labelled && engine == sandbox.EngineKubernetes {
		// The API shows no image's labels: the smoke run proves the runner.
		proto, labelled = strconv.Itoa(relay.Version), true
	}
	if !labelled {
		er.add("runner", false, fmt.Sprintf("%s has no bridge runner (label %s missing)", opts.Image, images.LabelProtocol), images.NoRunnerHint())
		return "", false
	}
	return proto, true
}

// runSmoke runs smoke.py in the runner image under limits and records the
// runner and relay checks that the run proves; proto is the protocol the
// image's label names. It returns the run's result and the OCI runtime the
// engine ran it with. ok is false when the code did not run, with the
// reason recorded.
func (er *EngineReport) runSmoke(ctx context.Context, rt sandbox.Runtime, engine, proto string, limits sandbox.Limits, opts Options) (res sandbox.Result, ociRuntime string, ok bool) {
	// The smoke run: allowed on an engine that cannot enforce limits, so
	// that doctor can still report what does hold there.
	ex, err := sandbox.NewExecutor(ctx, rt, sandbox.ExecutorOptions{
		Image: opts.Image, ImageHint: images.MissingHint, AllowUnenforcedLimits: true, OCIRuntime: opts.OCIRuntime, Logger: opts.Logger,
	})
	if err != nil {
		hint := "see the error above"
		if errors.Is(err, sandbox.ErrOCIRuntime) {
			hint = "the error says what to set up"
		}
		er.add("smoke_run", false, err.Error(), hint)
		return sandbox.Result{}, "", false
	}
	want := strconv.Itoa(relay.Version)
	res, err = ex.Run(ctx, sandbox.Request{Code: smokeCode, Limits: limits})
	if err == nil && res.Status != sandbox.StatusOK {
		err = fmt.Errorf("status %s: %s %s", res.Status, res.Message, res.Stderr)
	}
	if err != nil {
		hint := images.RebuildHint(opts.Image, engine)
		if proto != want {
			er.add("runner", false, fmt.Sprintf("%s's runner speaks relay protocol %s (its label %s), this bridge speaks %s", opts.Image, proto, images.LabelProtocol, want), hint)
		}
		er.add("smoke_run", false, err.Error(), "run `bridge run -` with a one-line script to see more; or "+hint)
		return res, "", false
	}
	er.SmokeMS = res.Duration.Milliseconds()
	er.Python = res.Python
	// The runner said hello in this bridge's protocol, or the run would
	// have failed: a label that says otherwise is only wrong.
	if proto == want {
		er.add("runner", true, fmt.Sprintf("relay protocol %s (label %s)", proto, images.LabelProtocol), "")
	} else {
		er.add("runner", true, fmt.Sprintf("relay protocol %s (the runner said so; its label %s says %s)", want, images.LabelProtocol, proto), "")
	}
	er.add("relay", true, fmt.Sprintf("runner connected and ran code (Python %s); whole run %d ms", res.Python, er.SmokeMS), "")
	return res, ex.OCIRuntime(), true
}

// smokeOutput is what smoke.py prints: its hardening checks, the limits it
// read, the kernel it met and the notable packages it found.
type smokeOutput struct {
	Checks map[string]struct {
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	} `json:"checks"`
	Limits cgroupLimits `json:"limits"`
	Kernel struct {
		GVisor bool   `json:"gvisor"`
		Detail string `json:"detail"`
	} `json:"kernel"`
	Packages []Package `json:"packages"`
}

// smokeChecks records what the smoke run found inside, from its stdout:
// the kernel it met under ociRuntime, the hardening and the limits it was
// given. safe says the kernel and the hardening hold, inside that the
// limits do; both are false when the output cannot be read.
func (er *EngineReport) smokeChecks(stdout, ociRuntime, engine string, enforce sandbox.Enforcement, limits sandbox.Limits, image string) (safe, inside bool) {
	var smoke smokeOutput
	if err := json.Unmarshal([]byte(stdout), &smoke); err != nil {
		er.add("smoke_run", false, "unreadable smoke output: "+err.Error(), images.RebuildHint(image, engine))
		return false, false
	}
	er.Packages = smoke.Packages
	// The runtime the engine names is the one the code met.
	wantGVisor := ociRuntime == sandbox.OCIRuntimeRunsc
	safe = er.add("kernel", smoke.Kernel.GVisor == wantGVisor,
		fmt.Sprintf("OCI runtime %s; the code sees %s", ociRuntime, smoke.Kernel.Detail),
		fmt.Sprintf("the engine says it runs containers with %s, but the code did not meet that kernel: "+
			"check the engine's runtime configuration, and report `bridge doctor --json`", ociRuntime))
	for _, name := range []string{"network", "read_only_root", "uid", "capabilities", "no_new_privs", "seccomp", "unix_sockets", "tmpfs"} {
		s, ok := smoke.Checks[name]
		safe = er.add(name, ok && s.OK, s.Detail, hardeningHint(name, engine)) && safe
	}
	inside = true
	for _, lc := range limitChecks(enforce, smoke.Limits, limits) {
		inside = er.add(lc.Name, lc.OK, lc.Detail, lc.Hint) && inside
	}
	return safe, inside
}

// cgroupLimits is what the smoke run read of its limits: under runc
// (Source "cgroup") the raw contents of its cgroup's limit files, nil where
// there was no such file. gVisor shows no cgroup files (Source "gvisor"):
// there Memory is its MemTotal in bytes (gVisor sizes its memory to the
// cgroup's limit), Pids its RLIMIT_NPROC (which it counts per sandbox), and
// CPU the share of time a busy loop got.
type cgroupLimits struct {
	Source string  `json:"source"`
	Memory *string `json:"memory"`
	Pids   *string `json:"pids"`
	CPU    *string `json:"cpu"`
}

// limitChecks compares the limits the smoke run asked for with what its
// cgroup shows. A failed check's hint is the engine's reason when it says it
// cannot enforce that limit, else what to do about an engine whose word the
// cgroup contradicts.
func limitChecks(enforce sandbox.Enforcement, got cgroupLimits, want sandbox.Limits) []Check {
	if got.Source == "gvisor" {
		return gvisorLimitChecks(enforce, got, want)
	}
	checks := []Check{
		{Name: "memory_limit", OK: limitHolds(got.Memory, want.Memory),
			Detail: fmt.Sprintf("asked %d, cgroup says %s", want.Memory, deref(got.Memory)),
			Hint:   limitHint(enforce.Memory, enforce.Reason)},
		{Name: "pids_limit", OK: limitHolds(got.Pids, want.Pids),
			Detail: fmt.Sprintf("asked %d, cgroup says %s", want.Pids, deref(got.Pids)),
			Hint:   limitHint(enforce.Pids, enforce.Reason)},
		{Name: "cpu_limit", OK: cpuHolds(got.CPU, want.CPUs),
			Detail: fmt.Sprintf("asked %g CPUs, cgroup says %s", want.CPUs, deref(got.CPU)),
			Hint:   limitHint(enforce.CPU, enforce.Reason)},
	}
	for i := range checks {
		if checks[i].OK {
			checks[i].Hint = ""
		}
	}
	return checks
}

// gvisorLimitChecks is limitChecks for a smoke run under gVisor.
func gvisorLimitChecks(enforce sandbox.Enforcement, got cgroupLimits, want sandbox.Limits) []Check {
	checks := []Check{
		{Name: "memory_limit", OK: limitHolds(got.Memory, want.Memory),
			Detail: fmt.Sprintf("asked %d, gVisor's MemTotal (sized to its cgroup's limit) says %s", want.Memory, deref(got.Memory)),
			Hint:   limitHint(enforce.Memory, enforce.Reason) + "; a runsc with --ignore-cgroups applies no limit"},
		{Name: "pids_limit", OK: limitHolds(got.Pids, want.Pids),
			Detail: fmt.Sprintf("asked %d, gVisor's RLIMIT_NPROC (counted per sandbox) says %s", want.Pids, deref(got.Pids)),
			Hint:   "the bridge sets RLIMIT_NPROC to the pids limit under gVisor: report `bridge doctor --json`"},
		{Name: "cpu_limit", OK: cpuShareHolds(got.CPU, want.CPUs),
			Detail: fmt.Sprintf("asked %g CPUs, a busy loop got %s of the time", want.CPUs, deref(got.CPU)),
			Hint:   limitHint(enforce.CPU, enforce.Reason) + "; a runsc with --ignore-cgroups applies no limit"},
	}
	for i := range checks {
		if checks[i].OK {
			checks[i].Hint = ""
		}
	}
	return checks
}

// cpuShareHolds reports whether a busy loop's share of the time (got, "0.50")
// shows a quota of cpus below one core: nearer to cpus than to a whole core.
func cpuShareHolds(got *string, cpus float64) bool {
	if got == nil || cpus >= 1 {
		return false
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(*got), 64)
	return err == nil && f > 0 && f < (cpus+1)/2
}

// lookPath is exec.LookPath, then the places runsc is installed in, which
// may not be on the PATH of an ordinary user.
func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/sbin"} {
		if fi, serr := os.Stat(filepath.Join(dir, name)); serr == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return filepath.Join(dir, name), nil
		}
	}
	return "", err
}

// gvisorCheck says whether the engine of info can run containers under
// gVisor for the bridge, and what to do when it cannot. lookPath finds runsc
// on this machine, for the hint.
func gvisorCheck(info sandbox.EngineInfo, lookPath func(string) (string, error)) Check {
	c := Check{Name: "gvisor"}
	installed, _ := lookPath("runsc")
	install := "install gVisor (Debian and Ubuntu: `apt-get install runsc`; else https://gvisor.dev/docs/user_guide/install/), then "
	if installed != "" {
		install = ""
	}
	if info.Name == sandbox.EngineRunsc {
		c.OK, c.Detail = true, "available: the runsc engine runs every sandbox under gVisor itself"
		return c
	}
	if info.Name == sandbox.EngineKubernetes { // a RuntimeClass per pod
		if r, ok := info.OCIRuntimes[sandbox.OCIRuntimeRunsc]; ok {
			c.OK, c.Detail = true, "available: the cluster has a RuntimeClass for runsc ("+strings.Join(r.Args, " ")+")"
		} else {
			c.Detail = "the cluster has no RuntimeClass whose handler is runsc"
			c.Hint = "where the nodes' containerd has a runsc handler, apply deploy/kubernetes/runtimeclass-gvisor.yaml"
		}
		return c
	}
	if info.OCIRuntimes != nil { // Docker: a runtime per container
		r, ok := info.OCIRuntimes[sandbox.OCIRuntimeRunsc]
		register := "in /etc/docker/daemon.json: " + sandbox.DockerRunscConfig + ", then reload dockerd (`sudo kill -HUP $(pidof dockerd)`)"
		switch {
		case ok && r.Path == "":
			c.OK, c.Detail = true, "available: registered with docker as runsc (a shim whose flags cannot be checked here; a run under it proves them)"
		case ok:
			cmd := strings.TrimSpace(r.Path + " " + strings.Join(r.Args, " "))
			if missing := sandbox.GVisorFlagsMissing(r.Args); len(missing) > 0 {
				c.Detail = fmt.Sprintf("registered with docker as runsc (%s) but without %s", cmd, strings.Join(missing, " "))
				c.Hint = "add " + strings.Join(missing, " ") + " to its \"runtimeArgs\" " + register
			} else {
				c.OK, c.Detail = true, "available: registered with docker as runsc ("+cmd+")"
			}
		case installed != "":
			c.Detail = "installed at " + installed + " but not registered with docker"
			c.Hint = "register it " + register
		default:
			c.Detail = "not installed on this machine, not registered with docker"
			c.Hint = install + "register it " + register
		}
		return c
	}
	// Podman: every container runs with the service's runtime.
	switch {
	case info.OCIRuntime == sandbox.OCIRuntimeRunsc:
		c.OK, c.Detail = true, "available: this service runs every container with runsc (its flags are not visible through the API; a run under it proves them)"
	case installed != "":
		c.Detail = fmt.Sprintf("installed at %s, but this service runs every container with %s, and Podman's API cannot choose a runtime per container", installed, info.OCIRuntime)
		c.Hint = "start a second service for it: `sudo " + sandbox.PodmanRunscService + "`, and point the bridge at it (CONTAINER_HOST=unix:///run/podman/podman-runsc.sock)"
	default:
		c.Detail = fmt.Sprintf("not installed on this machine; this service runs every container with %s", info.OCIRuntime)
		c.Hint = install + "start a service for it: `sudo " + sandbox.PodmanRunscService + "`, and point the bridge at it (CONTAINER_HOST=unix:///run/podman/podman-runsc.sock)"
	}
	return c
}

// readBackHint is the hint of a limit the engine says it enforces but that
// the container's cgroup does not show.
const readBackHint = "the engine accepted the limit but the container's cgroup does not show it: " +
	"check the engine's cgroup driver and OCI runtime, and report `bridge doctor --json`"

// limitHint is the hint of a failed read-back of one limit: the engine's
// reason when it says it cannot enforce that limit, else readBackHint (the
// engine claims the limit, or gave no reason).
func limitHint(enforced bool, reason string) string {
	if enforced || strings.TrimSpace(reason) == "" {
		return readBackHint
	}
	return reason
}

// enforceHint is the engine's reason for not enforcing some limit, or what
// to do when it gave none.
func enforceHint(reason string) string {
	if strings.TrimSpace(reason) == "" {
		return "the engine did not say why: run the engine rootful on cgroup v2 with the memory, pids and cpu " +
			"controllers enabled, and report `bridge doctor --json`"
	}
	return reason
}

// packagesText is the packages line of the text report: Python's version,
// then each package with its version, wheels last and marked.
func packagesText(python string, pkgs []Package) string {
	var debian, wheels []string
	for _, p := range pkgs {
		if p.Wheel {
			wheels = append(wheels, p.Name+" "+p.Version)
		} else {
			debian = append(debian, p.Name+" "+p.Version)
		}
	}
	out := "Python " + python
	if len(debian) == 0 {
		out += "; none of " + strings.Join(NotablePackages(), ", ")
	} else {
		out += ", " + strings.Join(debian, ", ")
	}
	if len(wheels) > 0 {
		out += "; from wheels: " + strings.Join(wheels, ", ")
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "nothing (no such cgroup file)"
	}
	return *s
}

// limitHolds reports whether a cgroup file's value equals the limit asked.
func limitHolds(got *string, want int64) bool {
	if got == nil {
		return false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(*got), 10, 64)
	return err == nil && v == want
}

// cpuHolds parses "quota period" (cgroup v2 cpu.max or v1's two files).
func cpuHolds(got *string, cpus float64) bool {
	if got == nil {
		return false
	}
	f := strings.Fields(*got)
	if len(f) != 2 {
		return false
	}
	q, err1 := strconv.ParseInt(f[0], 10, 64)
	p, err2 := strconv.ParseInt(f[1], 10, 64)
	return err1 == nil && err2 == nil && p > 0 && q == int64(cpus*float64(p))
}

func enforcementDetail(e sandbox.Enforcement) string {
	yes := func(b bool) string {
		if b {
			return "enforced"
		}
		return "NOT enforced"
	}
	return fmt.Sprintf("memory %s, pids %s, cpu %s", yes(e.Memory), yes(e.Pids), yes(e.CPU))
}

// unreachableCheck is the failed "reachable" check of an engine that could
// not be used: a socket that refused this user says what would let the
// user in, since starting the engine would not help; else how to start it.
func unreachableCheck(c detect.Candidate, err error) Check {
	var denied *sandbox.AccessError
	if errors.As(err, &denied) {
		return Check{Name: "reachable", Detail: denied.Problem(), Hint: denied.Hint}
	}
	return Check{Name: "reachable", Detail: err.Error(), Hint: startHint(c)}
}

func startHint(c detect.Candidate) string {
	path := strings.TrimPrefix(c.URI, "unix://")
	switch {
	case c.Engine == sandbox.EngineRunsc:
		return "the runsc engine also needs a static init on this host (tini-static: `apt-get install tini`) " +
			"and a folder of its own, private to root ($XDG_STATE_HOME/bridge/runsc, else /var/lib/bridge/runsc)"
	case c.Engine == sandbox.EngineDocker:
		return "start Docker (`sudo systemctl start docker`, or `dockerd &`), or point DOCKER_HOST at its socket"
	case strings.Contains(c.Why, "rootless"):
		return fmt.Sprintf("start the rootless Podman API: `systemctl --user start podman.socket`, or `podman system service --time=0 unix://%s &`", path)
	default:
		return fmt.Sprintf("start the Podman API: `sudo systemctl start podman.socket`, or `sudo podman system service --time=0 unix://%s &`", path)
	}
}

func hardeningHint(check, engine string) string {
	return fmt.Sprintf("the %s engine did not apply the %s hardening: upgrade it, check its OCI runtime, and report a bug with `bridge doctor --json`", engine, check)
}

// WriteText renders the report for people.
func WriteText(w io.Writer, rep Report) {
	for _, er := range rep.Engines {
		verdict := "usable"
		if !er.Usable {
			verdict = "NOT usable"
		}
		fmt.Fprintf(w, "%s at %s (%s): %s\n", er.Engine, er.Socket, er.Source, verdict)
		for _, c := range er.Checks {
			mark, fix := "ok  ", "fix"
			switch {
			case !c.OK && c.Optional:
				mark, fix = "note", "to use it"
			case !c.OK && c.Warning:
				mark = "WARN"
			case !c.OK:
				mark = "FAIL"
			}
			fmt.Fprintf(w, "  %s %-19s %s\n", mark, c.Name, c.Detail)
			if c.Hint != "" {
				fmt.Fprintf(w, "       %s: %s\n", fix, c.Hint)
			}
		}
		if er.Python != "" {
			fmt.Fprintf(w, "  packages: %s\n", packagesText(er.Python, er.Packages))
		}
		fmt.Fprintln(w)
	}
	if rep.OK {
		fmt.Fprintln(w, "bridge can run code safely.")
	} else {
		fmt.Fprintln(w, "No engine can run code safely: fix a FAIL above.")
	}
}
