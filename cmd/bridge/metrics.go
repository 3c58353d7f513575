package main

import (
	"context"
	"flag"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/bridge/transport"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// metricsFlag registers --metrics-addr.
func metricsFlag(fs *flag.FlagSet) *string {
	return fs.String("metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics (docs/operations.md); beyond loopback a\n"+
		"bearer token is required: $BRIDGE_METRICS_TOKEN, or one is generated and logged once")
}

// serveMetricsAt serves m at addr/metrics until ctx ends; nothing when
// addr is "".
func serveMetricsAt(ctx context.Context, addr string, m *metrics.Metrics, log zerolog.Logger) error {
	if addr == "" {
		return nil
	}
	err := transport.ServeMetrics(ctx, m.Handler(), transport.MetricsOptions{
		Addr: addr, Token: strings.TrimSpace(os.Getenv("BRIDGE_METRICS_TOKEN")), TokenEnv: "BRIDGE_METRICS_TOKEN"}, log)
	if err != nil {
		return usagef("%v", err)
	}
	return nil
}

// policyState reads the store for /metrics.
func policyState(store *policy.Store) func() metrics.PolicyState {
	return func() metrics.PolicyState {
		return metrics.PolicyState{Generation: store.Current().Gen, ReloadFailures: store.ReloadFailures()}
	}
}

// serveState is what a scrape of `bridge serve` reads: the server's load,
// the engine's pool and host budgets, the policy, the proxy's upstreams
// (when it runs in this process) and the artifacts folder (when there is
// one).
func serveState(srv *bridge.Server, eng *sandbox.Engine, store *policy.Store, upstreams func() []metrics.UpstreamState, files *artifacts.Store) metrics.State {
	st := metrics.State{
		Load: srv.Load,
		Pool: func() (metrics.PoolState, bool) {
			p := eng.PoolStats()
			if p == nil {
				return metrics.PoolState{}, false
			}
			return metrics.PoolState{Size: p.Size, Max: p.Max, Target: p.Target, Ready: p.Ready, Starting: p.Starting,
				Hits: p.Hits, Misses: p.Misses, Started: p.Started, Failed: p.Failures, Discarded: p.Discarded,
				Grown: p.Grown, Shrunk: p.Shrunk}, true
		},
		Host: func() (metrics.HostState, bool) {
			h, ok := eng.HostStats()
			return metrics.HostState{ContainersAlive: h.ContainersAlive, AnswerBytesPending: h.AnswerBytesPending,
				ResultBytesReserved: h.ResultBytesReserved, RequestsInFlight: h.RequestsInFlight,
				ProtocolErrors: h.ProtocolErrors, Cutoffs: h.Cutoffs}, ok
		},
		Policy:    policyState(store),
		Upstreams: upstreams,
	}
	if files != nil {
		st.Artifacts = func() metrics.ArtifactState {
			s := files.Stats()
			return metrics.ArtifactState{Bytes: s.Bytes, StoredFiles: s.StoredFiles, StoredBytes: s.StoredBytes}
		}
	}
	return st
}
