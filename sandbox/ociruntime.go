package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// OCI runtimes a run may ask for: the engine's default, runc, or gVisor's
// runsc (a user-space kernel between the code and the host's kernel).
const (
	OCIRuntimeDefault = "default"
	OCIRuntimeRunc    = "runc"
	OCIRuntimeRunsc   = "runsc"
)

// OCIRuntimes are the names CheckOCIRuntime accepts, in the order help
// texts list them.
func OCIRuntimes() []string {
	return []string{OCIRuntimeDefault, OCIRuntimeRunc, OCIRuntimeRunsc}
}

// CheckOCIRuntime rejects a runtime name the bridge does not know. "" is
// OCIRuntimeDefault.
func CheckOCIRuntime(name string) error {
	if name == "" || slices.Contains(OCIRuntimes(), name) {
		return nil
	}
	return fmt.Errorf("unknown OCI runtime %q: use %s", name, strings.Join(OCIRuntimes(), ", "))
}

// ErrOCIRuntime means the engine cannot run containers with the OCI runtime
// asked for, or ran one with another. The bridge never falls back to a
// different runtime.
var ErrOCIRuntime = errors.New("OCI runtime not available")

// OCIRuntimeInfo is one runtime an engine can run a container with, as
// registered with it.
type OCIRuntimeInfo struct {
	Path string   `json:"path,omitempty"`
	Args []string `json:"args,omitempty"`
}

// ResolveOCIRuntime says what to ask the engine described by info for so
// that a container runs under want (OCIRuntimeDefault or "", runc or
// runsc): request goes into [ContainerSpec.OCIRuntime] ("" for the engine's
// default), and effective is the runtime that will run the container. An
// engine that cannot run want yields an error wrapping ErrOCIRuntime that
// says what to set up.
func ResolveOCIRuntime(info EngineInfo, want string) (request, effective string, err error) {
	return resolveOCIRuntime(info, want, func() string { return localRunsc(info) })
}

// resolveOCIRuntime is ResolveOCIRuntime; runsc says where runsc is
// installed on the engine's machine ("" for nowhere, or not known), for
// the hint of an error.
func resolveOCIRuntime(info EngineInfo, want string, runsc func() string) (request, effective string, err error) {
	if err := CheckOCIRuntime(want); err != nil {
		return "", "", err
	}
	if want == "" || want == OCIRuntimeDefault {
		return "", OCIRuntimeName(info.OCIRuntime), nil
	}
	if info.OCIRuntimes != nil {
		// The engine picks a runtime per container, from those registered.
		if _, ok := info.OCIRuntimes[want]; ok {
			return want, want, nil
		}
		names := make([]string, 0, len(info.OCIRuntimes))
		for n := range info.OCIRuntimes {
			names = append(names, n)
		}
		sort.Strings(names)
		return "", "", fmt.Errorf("%w: %s at %s has no OCI runtime named %s (it has %s): %s",
			ErrOCIRuntime, info.Name, info.Socket, want, strings.Join(names, ", "), setupHint(info, want, runsc))
	}
	// Every container of this engine runs with its default runtime.
	if OCIRuntimeName(info.OCIRuntime) == want {
		return want, want, nil
	}
	return "", "", fmt.Errorf("%w: %s at %s runs every container with %s, and its API cannot choose another runtime per container: %s",
		ErrOCIRuntime, info.Name, info.Socket, orUnknown(info.OCIRuntime), setupHint(info, want, runsc))
}

// OCIRuntimeName is the name of a runtime given as a name or a path
// (/usr/bin/runsc).
func OCIRuntimeName(s string) string {
	if s == "" {
		return ""
	}
	return filepath.Base(s)
}

func orUnknown(s string) string {
	if s == "" {
		return "an unnamed runtime"
	}
	return s
}

// DockerRunscConfig is what /etc/docker/daemon.json needs for runsc:
// --network=none (the container has no network anyway, and runsc refuses
// the engines' "no network" without it) and --host-uds=open (gVisor lets the
// code open no host unix socket otherwise, and the relay's is one).
const DockerRunscConfig = `"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--host-uds=open"]}}`

// PodmanRunscService is a Podman API service whose containers all run with
// runsc, with the flags the bridge needs (see DockerRunscConfig); the
// socket is an example.
const PodmanRunscService = "podman --runtime runsc --runtime-flag network=none --runtime-flag host-uds=open " +
	"system service --time=0 unix:///run/podman/podman-runsc.sock"

// setupHint says how to make the engine of info run want; runsc says
// where runsc is installed on the engine's machine, if it is (asked only
// when want is runsc).
func setupHint(info EngineInfo, want string, runsc func() string) string {
	if want == OCIRuntimeRunsc {
		return runscHint(info, runsc())
	}
	if info.Name == EngineDocker {
		return "register " + want + " with dockerd (the \"runtimes\" of /etc/docker/daemon.json) and reload it"
	}
	return "start the Podman service with `podman --runtime " + want + " system service ...`, " +
		"or set runtime = \"" + want + "\" in the [engine] table of its containers.conf"
}

// runscHint says how to make the engine of info run runsc, which is
// installed at path ("" for not installed) on its machine. Once gVisor is
// installed (as `bridge doctor` says), what is missing is the engine's
// part, not an install.
func runscHint(info EngineInfo, path string) string {
	const check = "then check with `bridge doctor --oci-runtime runsc`"
	install := "install gVisor (Debian and Ubuntu: `apt-get install runsc`; else https://gvisor.dev/docs/user_guide/install/), "
	if info.Name == EngineDocker {
		register := "register it in /etc/docker/daemon.json as " + DockerRunscConfig + ", reload dockerd (`sudo kill -HUP $(pidof dockerd)`), " + check
		if path != "" {
			return "gVisor is installed on this machine (" + path + ") but not registered with docker: " + register
		}
		return install + register
	}
	service := "a Podman service that runs every container with runsc (`sudo " + PodmanRunscService + "`) and point the bridge at that socket " +
		"(CONTAINER_HOST=unix:///run/podman/podman-runsc.sock, --runtime podman), " + check
	if path != "" {
		return "gVisor is installed on this machine (" + path + "), so what is missing is a second Podman service for it: start " + service
	}
	return install + "start " + service
}

// localRunsc is where runsc is installed on this machine, when the engine
// of info is on it (a unix socket): on the PATH, or in the places it is
// installed in that an ordinary user's PATH may lack; "" if nowhere.
func localRunsc(info EngineInfo) string {
	if info.Socket != "" && !strings.HasPrefix(info.Socket, "unix://") {
		return ""
	}
	if p, err := exec.LookPath(OCIRuntimeRunsc); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, OCIRuntimeRunsc)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// GVisorFlagsMissing lists the runsc flags the bridge needs that args (a
// runtime's registered arguments) lack: --network=none and --host-uds=open
// (or =all, or the older --fsgofer-host-uds).
func GVisorFlagsMissing(args []string) []string {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			if name, ok = strings.CutPrefix(args[i], "-"); !ok {
				continue
			}
		}
		name, value, hasValue := strings.Cut(name, "=")
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && name != "fsgofer-host-uds" {
			value = args[i+1]
			i++
		}
		flags[name] = value
	}
	var missing []string
	if flags["network"] != "none" {
		missing = append(missing, "--network=none")
	}
	uds, legacy := flags["fsgofer-host-uds"]
	if v := flags["host-uds"]; v != "open" && v != "all" && !(legacy && uds != "false") {
		missing = append(missing, "--host-uds=open")
	}
	return missing
}

// gVisor's names in the messages of a run that failed because runsc lacks
// a flag the bridge needs.
const (
	gvisorNoNetworkFlag = "network enabled in root network namespace"
	gvisorNoUDSFlag     = "cannot connect to the relay socket"
)

// gvisorHint is what to do about a failed run under runsc whose message
// (an engine error, or the runner's last words) is msg, or "".
func gvisorHint(engine, msg string) string {
	where := "the runtime's \"runtimeArgs\" in /etc/docker/daemon.json (then `sudo kill -HUP $(pidof dockerd)`)"
	if engine == EnginePodman {
		where = "the Podman service's command line (`podman --runtime runsc --runtime-flag ... system service`)"
	}
	switch {
	case strings.Contains(msg, gvisorNoNetworkFlag):
		return "runsc must run with --network=none: add it to " + where
	case strings.Contains(msg, gvisorNoUDSFlag) && strings.Contains(msg, "Operation not permitted"):
		return "runsc must be allowed to open the relay's host unix socket: add --host-uds=open to " + where
	}
	return ""
}
