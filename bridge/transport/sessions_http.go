package transport

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

// CodeTooManySessions is the JSON-RPC error code of a request that would
// open a session past SessionLimits.
const CodeTooManySessions = -32001

// streamable counts the sessions of h, the Streamable HTTP handler: a POST
// without Mcp-Session-Id opens one (refused past the limits), a POST with
// one is a request of that session, a DELETE ends it.
func (s *Sessions) streamable(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		switch {
		case r.Method == http.MethodPost && id == "":
			client := ClientOf(r)
			if no := s.admit(client); no != nil {
				refuse(w, r, no)
				return
			}
			s.open(h, w, r, client)
		case r.Method == http.MethodPost:
			end := s.begin(mcpKey(id))
			if end == nil {
				// What the SDK answers once the session is closed.
				http.Error(w, "session not found", http.StatusNotFound)
				return
			}
			defer end()
			h.ServeHTTP(w, r)
		case r.Method == http.MethodDelete && id != "":
			sw := &statusWriter{ResponseWriter: w}
			h.ServeHTTP(sw, r)
			s.deleted(mcpKey(id), sw.code())
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// open serves r, a request for a new session of client that admit let
// in. The SDK names the session in its answer's header: it is counted
// from the moment that header goes out, since the client may use it
// before the SDK's handler returns (an answer streamed as SSE).
func (s *Sessions) open(h http.Handler, w http.ResponseWriter, r *http.Request, client string) {
	var end func()
	sw := &statusWriter{ResponseWriter: w, before: func() {
		if id := w.Header().Get("Mcp-Session-Id"); id != "" {
			end = s.opened(client, id)
		}
	}}
	h.ServeHTTP(sw, r)
	if end != nil {
		end()
		return
	}
	s.settle(client, w.Header().Get("Mcp-Session-Id"))
}

// statusWriter remembers the status of the answer written through it, and
// calls before (when set) once, just before the header goes out. It
// unwraps (for http.NewResponseController) to the writer it wraps, and
// flushes as that one does (the SDK streams answers as SSE).
type statusWriter struct {
	http.ResponseWriter
	status int
	before func()
}

// final is called before the header goes out with status code.
func (w *statusWriter) final(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if w.before != nil {
		w.before()
	}
}

func (w *statusWriter) WriteHeader(code int) {
	if code >= 200 { // a 1xx is not the answer
		w.final(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.final(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush sends the header (200 if none was written) and what was written.
func (w *statusWriter) Flush() {
	w.final(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush() // best effort, as the SDK does
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// code is the status answered: 200 when the handler wrote none (net/http
// sends that).
func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// sse counts the legacy SSE sessions of h, the SSE handler: a GET opens
// one (refused past the limits), which lasts as long as the GET.
func (s *Sessions) sse(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			h.ServeHTTP(w, r)
			return
		}
		client := ClientOf(r)
		if no := s.admit(client); no != nil {
			refuse(w, r, no)
			return
		}
		defer s.forget(s.addSSE(client))
		h.ServeHTTP(w, r)
	})
}

// refuse answers a request for a session past the limits: 429 past the
// client's, 503 past the bridge's, with Retry-After (unless waiting makes
// no room) and a JSON-RPC error that says what to do (the answer to the
// request's id, when its body has one).
func refuse(w http.ResponseWriter, r *http.Request, no *refusal) {
	status, msg := http.StatusServiceUnavailable,
		fmt.Sprintf("the bridge has %d MCP sessions open, its limit (http.max_sessions): no new session until one closes. "+
			"Close the sessions you no longer use (DELETE /mcp with their Mcp-Session-Id) and reuse one, or retry later: "+
			"under pressure idle sessions are closed, the longest idle first", no.limit)
	if no.reason == RefusedClientCap {
		status, msg = http.StatusTooManyRequests,
			fmt.Sprintf("this client has %d MCP sessions open, the limit of one client (http.max_sessions_per_client; every "+
				"loopback client is one client): close the sessions you no longer use (DELETE /mcp with their Mcp-Session-Id) "+
				"and reuse one, or retry after a session was idle long enough to be closed", no.limit)
	}
	data := map[string]any{"reason": no.reason, "limit": no.limit}
	if no.noRetry {
		msg += ". The sessions open are all legacy SSE streams, which are never closed for being idle: " +
			"end one (its GET /sse) to make room"
	} else {
		data["retry_after_seconds"] = retrySeconds(no.retryAfter)
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(no.retryAfter)))
	}
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      requestID(r),
		"error":   map[string]any{"code": CodeTooManySessions, "message": msg, "data": data},
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// requestID is the id of r's JSON-RPC request, to answer it with: only a
// string or a number under the exact key "id" (what JSON-RPC allows and a
// client can match), else null (a batch, or no such id).
func requestID(r *http.Request) json.RawMessage {
	null := json.RawMessage("null")
	if r.Method != http.MethodPost || r.Body == nil {
		return null
	}
	// A map matches keys exactly (a struct field would match "ID" too).
	var req map[string]json.RawMessage
	// Small bodies only: an initialize is a few hundred bytes.
	if json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req) != nil {
		return null
	}
	id := req["id"]
	if len(id) == 0 || id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9') {
		return null
	}
	return id
}

// retrySeconds is d in whole seconds, rounded up, at least 1.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
