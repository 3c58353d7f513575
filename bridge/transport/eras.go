package transport

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StatelessVersion is the first MCP revision without sessions: no
// initialize, no Mcp-Session-Id; each request carries its version and
// the client's capabilities in its _meta and in headers.
const StatelessVersion = "2026-07-28"

// protocolHeader is the header every request of a client past initialize
// (and every request of a stateless client) names its revision in.
const protocolHeader = "Mcp-Protocol-Version"

// IsStateless reports whether a request's Mcp-Protocol-Version names a
// stateless revision (2026-07-28 or later; revisions are dates, so they
// compare as strings, as the SDK compares them).
func IsStateless(r *http.Request) bool {
	v := r.Header.Get(protocolHeader)
	return v != "" && v >= StatelessVersion
}

// eras serves both eras of MCP on one endpoint. The SDK's streamable
// handler is one or the other, fixed when made: a stateful one refuses
// 2026-07-28 calls, and offers only the older revisions to a client's
// server/discover, so the client falls back to initialize; a stateless
// one serves older clients without a session (no Mcp-Session-Id, no
// requests to the client, no cancellation of a call by a later POST).
// So each request goes to the handler of its era: one naming a stateless
// revision in Mcp-Protocol-Version (server/discover included) to
// stateless; every other, an initialize and what follows it by
// Mcp-Session-Id, GET streams and DELETE, to legacy, as before. A request
// with no header at all is legacy's: an initialize, or a 2026-07-28
// request that forgot its header, which the stateful handler refuses as
// the spec says (header required).
func eras(legacy, stateless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsStateless(r) {
			stateless.ServeHTTP(w, r)
			return
		}
		legacy.ServeHTTP(w, r)
	})
}

// newStreamable makes the SDK's streamable handlers of both eras over srv,
// with requests' bodies bounded to maxBody bytes.
func newStreamable(srv *mcp.Server, maxBody int64) (legacy, stateless http.Handler) {
	getServer := func(*http.Request) *mcp.Server { return srv }
	legacy = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		// Stateful: a session outlives one POST, so the cancellation of a
		// call (sent in a later POST) finds it, and progress notifications
		// made in a call's context stream back on that call's response.
		Stateless: false,
		// No SessionTimeout: the HTTP options' Sessions close idle sessions
		// themselves, sooner under pressure.
		MaxRequestBodyBytes: maxBody,
	})
	stateless = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		// One throwaway MCP session per POST; the bridge keeps what must
		// outlive it (sessions, tasks, files) by principal.
		Stateless: true,
		// A call's handler ends with its POST: closing the response stream
		// is how a 2026-07-28 client cancels (it sends no
		// notifications/cancelled that could find the call), and the run
		// and its container go with it.
		PropagateRequestCancellation: true,
		// JSONResponse stays off: a call's progress notifications stream
		// on its own response, as SSE, before its result.
		MaxRequestBodyBytes: maxBody,
	})
	return legacy, stateless
}
