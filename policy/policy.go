// Package policy is the operator's policy.yaml: what the sandbox may use
// (limits), which host folders it reads (mounts) and how it hands files
// back (artifacts), which upstream tools the code may see and call
// (rules), how much (budgets and rates), and where decisions are audited.
// Parse reads and validates a file strictly (an unknown key or a wrong type
// is an error with file, line and column); Decide says whether a tool may
// be called and by which rule; Store holds the policy in force and reloads
// it.
//
// docs/policy.md is the reference; policy.example.yaml at the repository
// root spells out every default, and a test holds the two together.
package policy

import (
	"time"
)

// Version is the only policy file version this bridge reads.
const Version = 1

// Policy is a parsed, validated policy file with every default filled in.
// It is immutable once returned by Parse: share it freely.
type Policy struct {
	// Source is the file it was read from ("" for the built-in default).
	Source string

	Sandbox  Sandbox
	Pool     Pool
	Sessions Sessions
	Skills   Skills
	// Mounts are the host folders every run reads, under DataDir.
	Mounts    []Mount
	Artifacts Artifacts
	Tools     Tools
	Budgets   Budgets
	Tokenize  Tokenize
	Audit     Audit

	sum [32]byte // of the file's bytes, when Load read it
}

// Sandbox are the limits of each run and of the bridge's runs together.
type Sandbox struct {
	Engine string // "auto", "podman" or "docker"; default "auto"
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

	// RequireEnforcedLimits refuses to run code where the engine cannot
	// enforce memory, pids or CPU limits. Default true.
	RequireEnforcedLimits bool
}

// Tools says which upstream tools the code may see and call.
type Tools struct {
	// Servers are globs of the upstream server names the code may reach at
	// all; a server that matches none is not started and not listed.
	// Default ["*"].
	Servers []string
	// Rules are tried in order; the first that matches decides.
	Rules []Rule
	// Default is the action when no rule matches; default Allow.
	Default Action
	// AskFallback decides a call that a rule says to ask about when the
	// human cannot be asked: the client did not declare MCP elicitation,
	// or the run has no client (bridge run). Deny (the default) or Allow.
	AskFallback Action
	// AskTimeout is how long an ask waits for the human's answer; no
	// answer by then denies the call. Default 2m; the run's own timeout
	// keeps counting meanwhile.
	AskTimeout time.Duration
	// AskRemember is the longest the human may have an answer remembered:
	// RememberOff (every call asks), RememberRun (the default: the rest of
	// the run, or of its session) or RememberConnection (the rest of the
	// client's connection, across runs).
	AskRemember string
}

// Values of Tools.AskRemember.
const (
	RememberOff        = "off"
	RememberRun        = "run"
	RememberConnection = "connection"
)

// Action is what a rule does with a tool call.
type Action string

// Actions.
const (
	Allow Action = "allow"
	Deny  Action = "deny"
	// Ask asks the human, through the MCP client, before each call (see
	// Tools.AskFallback, AskTimeout and AskRemember).
	Ask Action = "ask"
)

// Rule matches tools by server and tool name globs and by annotations.
type Rule struct {
	Server string // glob (path.Match syntax, case-sensitive); default "*"
	Tool   string // glob; default "*"
	// Annotations must all hold for the rule to match. Keys are the MCP
	// tool annotation names; a tool that does not set one has the MCP
	// default (readOnlyHint false, destructiveHint true, idempotentHint
	// false, openWorldHint true).
	Annotations Annotations
	Action      Action
	// Reason, if set, is shown to the code when the rule denies a call,
	// and to the human when it asks.
	Reason string

	// Line and Column locate the rule in its file (1-based; 0 for rules
	// not read from a file).
	Line, Column int
}

// Annotations are conditions on MCP tool annotations; nil means "any".
type Annotations struct {
	ReadOnlyHint    *bool
	DestructiveHint *bool
	IdempotentHint  *bool
	OpenWorldHint   *bool
}

// Budgets bound the code's tool calls.
type Budgets struct {
	MaxCallsPerRun   int           // tool calls one run may make; 0 = no limit; default 1000
	MaxArgumentBytes int64         // one call's arguments as JSON; default 1Mi
	MaxResultBytes   int64         // one call's result as JSON; default 8Mi
	CallTimeout      time.Duration // one call; default 60s
	Rates            []Rate
}

// Rate is a token bucket for the calls that match Server and Tool, shared
// by every run. Every matching Rate applies: a call needs a token from each.
type Rate struct {
	Server string // glob; default "*"
	Tool   string // glob; default "*"
	// Per says what shares one bucket: "server" (one bucket per matching
	// server) or "tool" (one per matching server and tool). Default "tool".
	Per string
	// PerSecond is the refill rate, written "10/s", "600/m" or "3600/h".
	PerSecond float64
	// Burst is the bucket's size; default: one second's worth, at least 1.
	Burst int

	Line, Column int
}

// Audit says where decision and run records go.
type Audit struct {
	// File is a path to append JSON lines to; "" or "stderr" means the
	// bridge's stderr log.
	File string
}
