package main

import (
	"errors"
	"flag"
	"strconv"
	"strings"

	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
)

// settingFlags are the flags that stand for policy keys: their values are
// read with the policy file's grammar and bounds, and with a policy file in
// force they may only tighten it (policy.Tighten; docs/policy.md#flags).
type settingFlags struct {
	set []policy.Setting // in the order given; a repeated flag replaces its value
}

// settingFlag is one such flag.
type settingFlag struct {
	sf        *settingFlags
	key, name string
	def       string
	boolean   bool // --allow-unenforced-limits: true sets the key to false
}

func (f *settingFlag) String() string {
	if f == nil {
		return ""
	}
	return f.def
}

func (f *settingFlag) IsBoolFlag() bool { return f.boolean }

func (f *settingFlag) Set(v string) error {
	s := policy.Setting{Key: f.key, Value: v, Flag: "--" + f.name}
	if f.boolean {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("want true or false")
		}
		s.Value = strconv.FormatBool(!on)
	}
	if err := policy.CheckSetting(s); err != nil {
		// The flag package says "invalid value V for flag -NAME: " first.
		return errors.New(strings.TrimPrefix(err.Error(), s.Flag+": "))
	}
	for i, old := range f.sf.set {
		if old.Key == s.Key {
			f.sf.set = append(f.sf.set[:i], f.sf.set[i+1:]...)
			break
		}
	}
	f.sf.set = append(f.sf.set, s)
	return nil
}

// add registers --name for the policy key, with the built-in default in
// its usage.
func (sf *settingFlags) add(fs *flag.FlagSet, name, key, usage string) {
	def := policy.Default().Value(key)
	if key == "sandbox.image" {
		def = images.Name()
	}
	fs.Var(&settingFlag{sf: sf, key: key, name: name, def: def}, name, usage)
}

// addBool registers --name as a boolean that, when true, sets key to false.
func (sf *settingFlags) addBool(fs *flag.FlagSet, name, key, usage string) {
	fs.Var(&settingFlag{sf: sf, key: key, name: name, def: "false", boolean: true}, name, usage)
}

// engine registers --runtime and --oci-runtime.
func (sf *settingFlags) engine(fs *flag.FlagSet) {
	sf.add(fs, "runtime", "sandbox.engine", "container `engine`: auto (rootless Podman, rootful Podman, then Docker), podman, docker, kubernetes (pods on this node; KUBECONFIG),\n"+
		"or runsc (gVisor driven by the bridge, as root, images from Docker or Podman)")
	sf.add(fs, "oci-runtime", "sandbox.oci_runtime", "OCI `runtime` of every container: default (the engine's), runc, or runsc\n"+
		"(gVisor: a second wall against kernel exploits; the engine must be set up for it, see docs/policy.md)")
}

// limits registers the flags of a run's limits and the runner image.
func (sf *settingFlags) limits(fs *flag.FlagSet) {
	sf.add(fs, "image", "sandbox.image", "runner `image`")
	sf.variant(fs)
	sf.add(fs, "timeout", "sandbox.timeout", "kill the code after this `duration` (e.g. 30s, 2m)")
	sf.add(fs, "memory", "sandbox.memory", "memory limit, no swap: a `size` such as 256Mi or 1Gi")
	sf.add(fs, "cpus", "sandbox.cpus", "CPU quota in `cores` (0.01 to 1024)")
	sf.add(fs, "pids", "sandbox.pids", "maximum `number` of processes and threads")
	sf.add(fs, "tmpfs-size", "sandbox.tmpfs_size", "`size` of the writable /tmp (e.g. 64Mi)")
	sf.add(fs, "output-limit", "sandbox.output_limit", "bytes kept of each of stdout and stderr: a `size` such as 64Ki")
	sf.addBool(fs, "allow-unenforced-limits", "sandbox.require_enforced_limits",
		"run even where the engine cannot enforce memory/pids/cpu limits (e.g. rootless Podman on cgroup v1)")
}

// variant registers --variant.
func (sf *settingFlags) variant(fs *flag.FlagSet) {
	sf.add(fs, "variant", "sandbox.variant", "the runner image `variant` to run when no --image is given: "+strings.Join(images.Variants(), " or ")+
		"\n(`bridge image build --variant V` builds it; docs/images.md)")
}

// callTimeout registers --call-timeout.
func (sf *settingFlags) callTimeout(fs *flag.FlagSet) {
	sf.add(fs, "call-timeout", "budgets.call_timeout", "how long one upstream tool call may take (a `duration`)")
}
