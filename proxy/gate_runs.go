package proxy

import (
	"context"
	"math"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bridge-mcp/bridge/internal/tracing"
	"github.com/bridge-mcp/bridge/policy"
)

// KindInvalid is the [Error] kind of a call the proxy refuses as malformed:
// a run id it does not accept. It matches the relay protocol's error type.
const KindInvalid = "invalid"

// callMeta is the _meta of a tools/call for run runID: the run, the tool,
// and, when ctx has a deadline (the sandbox gives each call its run's), the
// milliseconds the run has left, so that a remote proxy keeps the run's
// call budget for as long as the run may call.
func callMeta(ctx context.Context, call Call, server, tool string) mcp.Meta {
	m := mcp.Meta{MetaRunID: call.RunID, MetaServer: server, MetaTool: tool}
	if d, ok := ctx.Deadline(); ok && call.RunID != "" {
		m[MetaRunTimeLeft] = max(time.Until(d), 0).Milliseconds()
	}
	if call.Vault != "" && call.RunID != "" {
		m[MetaVault] = call.Vault
		if !call.VaultEnds.IsZero() {
			m[MetaVaultTimeLeft] = max(time.Until(call.VaultEnds), 0).Milliseconds()
		}
	}
	tracing.ToMeta(m, call.Trace)
	return m
}

// runDeadline is the deadline, by this process's clock, of the run whose
// call carries meta, from the time left it says (MetaRunTimeLeft); zero
// when it says none. A time left beyond [policy.MaxRunLife] is kept beyond
// it (the Store refuses such a run) but bounded, so it cannot overflow.
func runDeadline(meta mcp.Meta, now time.Time) time.Time {
	return metaTime(meta, MetaRunTimeLeft, now)
}

// metaTime is now plus the milliseconds meta's key says, bounded as
// runDeadline says; zero when it says none.
func metaTime(meta mcp.Meta, key string, now time.Time) time.Time {
	var ms float64
	switch v := meta[key].(type) {
	case float64: // decoded from JSON
		ms = v
	case int64: // from callMeta, in the same process
		ms = float64(v)
	default:
		return time.Time{}
	}
	if math.IsNaN(ms) {
		return time.Time{}
	}
	ms = min(max(ms, 0), float64(policy.MaxRunLife/time.Millisecond)+1000)
	return now.Add(time.Duration(ms) * time.Millisecond)
}
