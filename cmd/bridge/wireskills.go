package main

import (
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// The code's skill operations, wired in by wireTools for serve and run.
// The `bridge skills` command is skills.go.

// withSkills answers the code's skill operations from the skills folder of
// the policy in force, and passes the rest to tools.
func withSkills(tools sandbox.ToolHandler, store *policy.Store, runs *toolhost.Runs, m *metrics.Metrics, log zerolog.Logger) sandbox.ToolHandler {
	var audit toolhost.SkillAuditor = store
	if m != nil {
		audit = countedSkills{store, m}
	}
	return toolhost.WithSkills(tools, toolhost.SkillsOptions{
		Runs: runs,
		// The policy in force now, not the one the run is pinned to: turning
		// saving off applies to runs already going.
		Config: func(string) policy.Skills { return store.Current().Policy.Skills },
		Audit:  audit,
		Logger: log,
	})
}

// countedSkills audits skill saves and counts them in the metrics.
type countedSkills struct {
	*policy.Store
	m *metrics.Metrics
}

func (c countedSkills) SkillSave(runID, client, name string, bytes int, outcome, kind, why string) {
	c.Store.SkillSave(runID, client, name, bytes, outcome, kind, why)
	c.m.SkillSave(outcome)
}
