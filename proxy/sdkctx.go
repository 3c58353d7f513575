package proxy

import (
	"context"
	"reflect"
)

// The go-sdk's server keeps per-request facts in its handlers' context
// under keys of its mcp package: the request's id, its log level, and
// over streamable HTTP the request's Mcp-Protocol-Version. Its streamable
// client reads the same keys: with no version of its own at hand (the
// proxy's connection wrapper, rawConn, hides the one it negotiated), it
// sends the context's version as Mcp-Protocol-Version. A call that came
// in from a 2026-07-28 agent (bridge serve --http, or bridge proxy --http)
// reaches the upstream with its context, so the upstream got the agent's
// version in its header, not its own, and servers that do not know it
// (the TypeScript SDK's) answered every call 400 Bad Request.
//
// So every message an upstream connection sends goes with a context that
// hides the mcp package's keys (upstreamCtx, in rawConn.Write): the one
// place all of a session's requests (calls, lists, reads, cancellations)
// pass, in process or behind a remote proxy, whoever the caller. Only the
// values go; the deadline and cancellation stay, and so do every other
// package's values (the trace's span, for traceparent). The bridge's run
// keeps the request's values above the proxy: progress and the questions
// asked of the human need them to go on the call's own stream.

// sdkPackage is the import path of the go-sdk package whose context keys
// are hidden.
const sdkPackage = "github.com/modelcontextprotocol/go-sdk/mcp"

// sdkClientKey is the type of the one key of sdkPackage the client sets
// itself, in ClientSession.CallTool, above the caller's context: the
// upstream's tool, from whose schema the client makes the call's
// Mcp-Param-* headers. It is the client's own, so it passes.
const sdkClientKey = "toolContextKeyType"

// upstreamCtx is ctx without the go-sdk server's per-request values.
type upstreamCtx struct{ context.Context }

func (c upstreamCtx) Value(key any) any {
	if t := reflect.TypeOf(key); t != nil && t.PkgPath() == sdkPackage && t.Name() != sdkClientKey {
		return nil
	}
	return c.Context.Value(key)
}
