package policy

import (
	"time"

	"go.yaml.in/yaml/v3"
)

var tasksKeys = []string{"enabled", "after", "max", "max_per_principal", "result_ttl", "max_result_bytes"}

// Tasks are run_python calls that outlive their request (the MCP Tasks
// extension, io.modelcontextprotocol/tasks): a 2026-07-28 client that
// declares the extension gets a task handle for a run still going after
// After, and polls tasks/get for its state and then its result. They are
// owned by the principal that made them.
type Tasks struct {
	// Enabled offers the extension to clients; true by default. false:
	// every call is answered when its run ends, as for any client.
	Enabled bool
	// After is how long a call waits for its run before it answers with a
	// task instead; 2s (1ms to 1m).
	After time.Duration
	// Max is how many tasks the bridge keeps at once, running or with a
	// result not yet expired; 64 (1 to 10000).
	Max int
	// MaxPerPrincipal is how many of them one principal keeps; 8 (1 to
	// 10000, at most Max).
	MaxPerPrincipal int
	// ResultTTL is how long a task is kept once it ended (its result
	// fetched or not); 10m (10s to 24h).
	ResultTTL time.Duration
	// MaxResultBytes bounds the results one principal's ended tasks keep,
	// together; 64Mi (1Mi to 1Gi). Past it, the principal's oldest ended
	// task is dropped.
	MaxResultBytes int64
}

// Bounds of the tasks keys.
const (
	minTaskAfter       = time.Millisecond
	maxTaskAfter       = time.Minute
	maxTasks           = 10000
	minTaskResultTTL   = 10 * time.Second
	maxTaskResultTTL   = 24 * time.Hour
	minTaskResultBytes = 1 << 20
	maxTaskResultBytes = 1 << 30
)

func defaultTasks() Tasks {
	return Tasks{Enabled: true, After: 2 * time.Second, Max: 64, MaxPerPrincipal: 8, ResultTTL: 10 * time.Minute, MaxResultBytes: 64 << 20}
}

// tasks reads the tasks section.
func (p *parser) tasks(k, v *yaml.Node, t *Tasks) {
	p.keys(k, v, "tasks", tasksKeys, func(key, name string, k, v *yaml.Node) {
		switch key {
		case "enabled":
			t.Enabled = p.boolean(k, v, name, t.Enabled)
		case "after":
			t.After = p.durationIn(k, v, name, t.After, minTaskAfter, maxTaskAfter)
		case "max":
			t.Max = int(p.integer(k, v, name, int64(t.Max), 1, maxTasks))
		case "max_per_principal":
			t.MaxPerPrincipal = int(p.integer(k, v, name, int64(t.MaxPerPrincipal), 1, maxTasks))
		case "result_ttl":
			t.ResultTTL = p.durationIn(k, v, name, t.ResultTTL, minTaskResultTTL, maxTaskResultTTL)
		case "max_result_bytes":
			t.MaxResultBytes = p.size(k, v, name, t.MaxResultBytes, minTaskResultBytes, maxTaskResultBytes)
		}
	})
}

// PerPrincipal is how many tasks one principal may keep.
func (t Tasks) PerPrincipal() int { return min(t.MaxPerPrincipal, t.Max) }
