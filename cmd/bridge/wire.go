package main

import (
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// What serve and run both wire, in one place: the code's tools (the
// upstream servers through the proxy, and the skills) and the engine runs
// go to.

// wireTools starts nothing: the upstream servers start on their first
// use. times records the bridge's part of each tool call. stop ends the
// upstreams that started.
func wireTools(e *env, uf *upstreamFlags, selfURL string, store *policy.Store, log zerolog.Logger) (tools sandbox.ToolHandler, times *bridge.CallTimes, stop func(), err error) {
	up, stop, err := uf.upstreams(e, selfURL, store, log)
	if err != nil {
		return nil, nil, nil, err
	}
	times = bridge.NewCallTimes()
	if up != nil {
		tools = bridge.ToolHandler(up, bridge.ToolOptions{Times: times, Logger: log})
	}
	// The skills are there with or without upstreams.
	return withSkills(tools, store, log), times, stop, nil
}

// wireEngine is the engine of pol's sandbox section running image, opened
// on first use; with pool, its warm pool follows the policy in force
// (sized when the engine opens, and at each reload).
func wireEngine(pol *policy.Policy, image string, tools sandbox.ToolHandler, store *policy.Store, pool bool, log zerolog.Logger) *sandbox.Engine {
	opts := sandbox.EngineOptions{
		Name: pol.Sandbox.Engine,
		Executor: sandbox.ExecutorOptions{Image: image, ImageHint: images.MissingHint,
			AllowUnenforcedLimits: !pol.Sandbox.RequireEnforcedLimits, OCIRuntime: pol.Sandbox.OCIRuntime, Tools: tools},
		Logger: log,
	}
	if !pool {
		return sandbox.NewEngine(opts)
	}
	opts.Pool = func() sandbox.PoolOptions { return poolOptions(store.Current()) }
	eng := sandbox.NewEngine(opts)
	// A reload resizes the warm pool, or replaces its containers when the
	// limits they were made with changed.
	store.OnChange(func(snap *policy.Snapshot) {
		o := poolOptions(snap)
		if err := eng.Configure(o.Size, o.MaxAge, o.Limits); err != nil {
			log.Warn().Err(err).Msg("pool: reconfiguring")
		}
	})
	return eng
}

// poolOptions are the warm pool's size, maximum age and container limits
// under snap.
func poolOptions(snap *policy.Snapshot) sandbox.PoolOptions {
	return sandbox.PoolOptions{Size: snap.Policy.Pool.Size, MaxAge: snap.Policy.Pool.MaxAge, Limits: bridge.LimitsFrom(snap.Policy)}
}
