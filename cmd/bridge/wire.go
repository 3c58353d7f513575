package main

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/internal/tracing"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
	"github.com/bridge-mcp/bridge/sandbox/detect"
)

// What serve and run both wire, in one place: the code's tools (the
// upstream servers through the proxy, and the skills) and the engine runs
// go to.

// hostTools answer the code's tool calls and skill operations.
type hostTools struct {
	handler sandbox.ToolHandler
	// runs are the runs being served, which the MCP server registers (for
	// their asks and traces); times the bridge's part of each call.
	runs  *toolhost.Runs
	times *toolhost.CallTimes
	// upstreams are the states of the upstream servers of a proxy in this
	// process, for /metrics; nil with a remote one (or none).
	upstreams func() []metrics.UpstreamState
	// resources read the upstreams' resources a call passes in by URI;
	// nil without upstreams.
	resources *toolhost.Resources
	// stop ends the upstream servers that started.
	stop func()
}

// wireTools starts nothing: the upstream servers start on their first use.
// m, if not nil, counts the tool calls and skill saves; tp, if set, traces
// the tool calls (and a proxy in this process's).
func wireTools(e *env, uf *upstreamFlags, selfURL string, store *policy.Store, m *metrics.Metrics, tp *tracing.Provider, log zerolog.Logger) (hostTools, error) {
	up, p, stop, err := uf.upstreams(e, selfURL, store, m, tp, log)
	if err != nil {
		return hostTools{}, err
	}
	t := hostTools{runs: toolhost.NewRuns(), times: toolhost.NewCallTimes(), stop: stop}
	if p != nil {
		t.upstreams = p.UpstreamStates
	}
	if up != nil {
		t.handler = toolhost.New(up, toolhost.Options{Runs: t.runs, Times: t.times, Tracer: tp.Tracer(scopeToolhost), Logger: log})
		t.resources = toolhost.NewResources(up, t.runs)
	}
	// The skills are there with or without upstreams.
	t.handler = withSkills(t.handler, store, t.runs, m, log)
	return t, nil
}

// wireEngine is the engine of pol's sandbox section running image, opened
// on first use; with pool, its warm pool follows the policy in force
// (sized when the engine opens, and at each reload).
func wireEngine(pol *policy.Policy, image string, tools sandbox.ToolHandler, store *policy.Store, pool bool, log zerolog.Logger) *sandbox.Engine {
	opts := sandbox.EngineOptions{
		Name: pol.Sandbox.Engine,
		Open: detect.OpenFor,
		Executor: sandbox.ExecutorOptions{Image: image, ImageHint: missingImageHint(hasImage),
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
		if err := eng.Configure(o); err != nil {
			log.Warn().Err(err).Msg("pool: reconfiguring")
		}
	})
	return eng
}

// poolOptions are the warm pool's size, max, shrink period, maximum age
// and container limits under snap.
func poolOptions(snap *policy.Snapshot) sandbox.PoolOptions {
	pl := snap.Policy.Pool
	return sandbox.PoolOptions{Size: pl.Size, Max: pl.Max, ShrinkAfter: pl.ShrinkAfter, MaxAge: pl.MaxAge, Limits: bridge.LimitsFrom(snap.Policy)}
}

// missingImageHint says what to do about an image missing from engine
// (sandbox.ExecutorOptions.ImageHint): images.MissingHint, after --runtime
// for the other engine when has says it holds the image (asked only on
// this failure path).
func missingImageHint(has func(engine, image string) bool) func(image, engine string) string {
	return func(image, engine string) string {
		hint := images.MissingHint(image, engine)
		if other := sandbox.OtherEngine(engine); other != "" && has(other, image) {
			return fmt.Sprintf("%s holds %s: run with --runtime %s (sandbox.engine: %s in a policy); or %s", other, image, other, other, hint)
		}
		return hint
	}
}

// hasImage reports whether engine holds image (detect.HasImage).
func hasImage(engine, image string) bool {
	return detect.HasImage(context.Background(), engine, image)
}
