package policy_test

import (
	"fmt"

	"github.com/bridge-mcp/bridge/policy"
)

// A policy is parsed strictly, and says of each tool whether the code may
// call it, and which part of the policy decided.
func ExamplePolicy_Explain() {
	p, err := policy.Parse([]byte(`version: 1
tools:
  default: allow
  rules:
    - server: github
      tool: "delete_*"
      action: deny
      reason: deleting is for humans
`), "policy.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p.Explain(policy.Tool{Server: "github", Name: "delete_repo"}))
	fmt.Println(p.Decide(policy.Tool{Server: "github", Name: "list_issues"}).Verdict())
	// Output:
	// deny: server "github", tool "delete_repo"
	// decided by: tools.rules[0] (line 5)
	// reason: deleting is for humans
	// annotations: readOnlyHint=false (MCP default), destructiveHint=true (MCP default), idempotentHint=false (MCP default), openWorldHint=true (MCP default)
	// tools.servers ["*"]: "github" matches "*": allowed
	// tools.rules[0] (line 5) {server: "github", tool: "delete_*", action: deny}: match: deny
	// allow
}

// An unknown key is an error that says where it is, and what was meant.
func ExampleParse_error() {
	_, err := policy.Parse([]byte("version: 1\nsandbox:\n  memroy: 1Gi\n"), "policy.yaml")
	fmt.Println(err)
	// Output:
	// policy.yaml:3:3: unknown key "memroy" in sandbox; known keys: engine, oci_runtime, image, variant, timeout, max_timeout, memory, cpus, pids, tmpfs_size, output_limit, max_concurrent, queue, max_code_bytes, max_request_bytes, require_enforced_limits; did you mean "memory"?
}
