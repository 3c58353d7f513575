package policy

import (
	"math"
	"strings"
	"time"
	"unicode"

	"github.com/bridge-mcp/bridge/internal/units"
	"go.yaml.in/yaml/v3"
)

// Sandbox are the limits of each run and of the bridge's runs together.
type Sandbox struct {
	Engine string // "auto", "podman", "docker", "kubernetes" or "runsc"; default "auto"
	// OCIRuntime is the runtime every container runs with: "default" (the
	// engine's), "runc", or "runsc" (gVisor). Default "default".
	OCIRuntime string
	Image      string // "" means the image this binary builds for Variant
	// Variant is the runner image this binary builds that runs code when
	// Image is "": "slim" (python3 and the runner) or "datascience" (and
	// Debian's numpy, pandas, matplotlib...). Default "slim".
	Variant string

	Timeout     time.Duration // a run's timeout when the call gives none; 60s
	MaxTimeout  time.Duration // the largest timeout a call may ask for; 5m
	Memory      int64         // bytes, no swap; 512Mi
	CPUs        float64       // cores; 1
	Pids        int64         // processes and threads; 128
	TmpfsSize   int64         // bytes of the writable /tmp; 64Mi
	OutputLimit int64         // bytes kept of each of stdout and stderr; 64Ki

	MaxConcurrent int // runs at once; 4
	Queue         int // calls that may wait for a run slot; 16

	// MaxCodeBytes bounds the code of one call (run_python's code, as
	// decoded); 1Mi. MaxRequestBytes bounds one message from an MCP client
	// before it is decoded (a stdio line, an HTTP body); 4Mi, read when
	// the bridge starts.
	MaxCodeBytes    int64
	MaxRequestBytes int64

	// RequireEnforcedLimits refuses to run code where the engine cannot
	// enforce memory, pids or CPU limits. Default true.
	RequireEnforcedLimits bool
}

var sandboxKeys = []string{"engine", "oci_runtime", "image", "variant", "timeout", "max_timeout", "memory", "cpus", "pids", "tmpfs_size", "output_limit", "max_concurrent", "queue", "max_code_bytes", "max_request_bytes", "require_enforced_limits"}

// Bounds of the sandbox section's values (docs/policy.md lists them).
const (
	minMemory      = 16 << 20
	minCPUs        = 0.01
	maxCPUs        = 1024
	minPids        = 8
	maxPids        = 1 << 22 // Linux's PID_MAX_LIMIT
	minTmpfsSize   = 1 << 20
	minOutputLimit = 1 << 10
	maxOutputLimit = 16 << 20
	maxConcurrent  = 1024
	maxQueue       = 65536
	minCodeBytes   = 1 << 10
	minRequest     = 64 << 10
	maxRequest     = 256 << 20
)

// sandbox reads the sandbox section into s, then checks its keys
// together: the variant against the image, the timeout against the most.
func (p *parser) sandbox(k, v *yaml.Node, s *Sandbox) {
	var timeoutNode, maxTimeoutNode, variantNode, codeNode, requestNode *yaml.Node
	timeoutOK, maxTimeoutOK := true, true
	if !p.keys(k, v, "sandbox", sandboxKeys, func(key, name string, k, v *yaml.Node) {
		before := len(p.probs)
		p.sandboxKey(key, name, k, v, s)
		switch key {
		case "timeout":
			timeoutNode, timeoutOK = v, len(p.probs) == before
		case "max_timeout":
			maxTimeoutNode, maxTimeoutOK = v, len(p.probs) == before
		case "variant":
			variantNode = v
		case "max_code_bytes":
			codeNode = v
		case "max_request_bytes":
			requestNode = v
		}
	}) {
		return
	}
	if variantNode != nil && s.Image != "" && s.Variant != "slim" {
		p.errorf(variantNode, "sandbox.variant: %s names an image this bridge builds, but sandbox.image names the image to run (%s): remove one of the two", s.Variant, s.Image)
	}
	if s.MaxCodeBytes > s.MaxRequestBytes {
		n := codeNode
		if n == nil {
			n = requestNode
		}
		p.errorf(n, "sandbox.max_code_bytes (%s) is more than sandbox.max_request_bytes (%s): code arrives inside a request, so raise max_request_bytes too",
			units.FormatSize(s.MaxCodeBytes), units.FormatSize(s.MaxRequestBytes))
	}
	if timeoutOK && maxTimeoutOK && s.MaxTimeout < s.Timeout {
		switch {
		case maxTimeoutNode != nil:
			p.errorf(maxTimeoutNode, "sandbox.max_timeout (%s) is less than sandbox.timeout (%s); it must be at least as long", units.FormatDuration(s.MaxTimeout), units.FormatDuration(s.Timeout))
		case timeoutNode != nil:
			p.errorf(timeoutNode, "sandbox.timeout (%s) is longer than sandbox.max_timeout (%s, the default); raise max_timeout too", units.FormatDuration(s.Timeout), units.FormatDuration(s.MaxTimeout))
		}
	}
}

// sandboxKey reads the value v of sandbox.key into s; name is what errors
// call it (the key, or the flag that gives it: see Setting).
func (p *parser) sandboxKey(key, name string, k, v *yaml.Node, s *Sandbox) {
	switch key {
	case "engine":
		if e, ok := p.enum(k, v, name, []string{"auto", "podman", "docker", "kubernetes", "runsc"}); ok {
			s.Engine = e
		}
	case "oci_runtime":
		if r, ok := p.enum(k, v, name, []string{"default", "runc", "runsc"}); ok {
			s.OCIRuntime = r
		}
	case "image":
		if str, ok := p.str(k, v, name); ok {
			if strings.IndexFunc(str, unicode.IsSpace) >= 0 {
				p.errorf(v, "%s: an image reference has no spaces: %q", name, str)
			} else {
				s.Image = str
			}
		}
	case "variant":
		if r, ok := p.enum(k, v, name, variants); ok {
			s.Variant = r
		}
	case "timeout":
		s.Timeout, _ = p.duration(k, v, name, s.Timeout)
	case "max_timeout":
		s.MaxTimeout, _ = p.duration(k, v, name, s.MaxTimeout)
	case "memory":
		s.Memory = p.size(k, v, name, s.Memory, minMemory, math.MaxInt64)
	case "cpus":
		s.CPUs = p.float(k, v, name, s.CPUs, minCPUs, maxCPUs)
	case "pids":
		s.Pids = p.integer(k, v, name, s.Pids, minPids, maxPids)
	case "tmpfs_size":
		s.TmpfsSize = p.size(k, v, name, s.TmpfsSize, minTmpfsSize, math.MaxInt64)
	case "output_limit":
		s.OutputLimit = p.size(k, v, name, s.OutputLimit, minOutputLimit, maxOutputLimit)
	case "max_concurrent":
		s.MaxConcurrent = int(p.integer(k, v, name, int64(s.MaxConcurrent), 1, maxConcurrent))
	case "queue":
		s.Queue = int(p.integer(k, v, name, int64(s.Queue), 0, maxQueue))
	case "max_code_bytes":
		s.MaxCodeBytes = p.size(k, v, name, s.MaxCodeBytes, minCodeBytes, maxRequest)
	case "max_request_bytes":
		s.MaxRequestBytes = p.size(k, v, name, s.MaxRequestBytes, minRequest, maxRequest)
	case "require_enforced_limits":
		s.RequireEnforcedLimits = p.boolean(k, v, name, s.RequireEnforcedLimits)
	}
}
