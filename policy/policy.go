// Package policy is the operator's policy.yaml: what the sandbox may use
// (limits), which host folders it reads (mounts) and how it hands files
// back (artifacts), which upstream tools the code may see and call
// (rules), how much (budgets and rates), and where decisions are audited.
// Parse reads and validates a file strictly (an unknown key or a wrong type
// is an error with file, line and column); Decide says whether a tool may
// be called and by which rule; [Store] holds the policy in force and reloads
// it.
//
// docs/policy.md is the reference; policy.example.yaml at the repository
// root spells out every default, and a test holds the two together.
package policy

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
	// Inputs bound the files a call passes in.
	Inputs    Inputs
	Tools     Tools
	Resources Resources
	Budgets   Budgets
	Tokenize  Tokenize
	Audit     Audit
	// HTTP bounds the MCP sessions of serve --http and proxy --http.
	HTTP HTTP

	// Snapshots are sessions' states saved on disk (with sessions on).
	Snapshots Snapshots
	// Tasks are run_python calls that outlive their request (the MCP
	// Tasks extension).
	Tasks Tasks

	sum [32]byte // of the file's bytes, when Load read it
}
