package transport

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
)

// DefaultHTTPAddr is where ServeHTTP listens when HTTPOptions.Addr is empty:
// loopback only, so no token is needed.
const DefaultHTTPAddr = "127.0.0.1:8080"

// DefaultShutdownTimeout is HTTPOptions.ShutdownTimeout's default.
const DefaultShutdownTimeout = 5 * time.Second

// HTTPOptions configure ServeHTTP.
type HTTPOptions struct {
	// Addr is the TCP address to listen on, host:port (DefaultHTTPAddr if
	// empty). Port 0 picks a free port; Ready learns which.
	Addr string
	// Token is the bearer token clients must send (Authorization: Bearer
	// <token>) on /mcp and /sse. When empty, a loopback address needs none
	// and any other address gets a random token, logged once at warn level.
	Token string
	// TokenEnv names the environment variable the token comes from, for
	// the log; default BRIDGE_HTTP_TOKEN.
	TokenEnv string
	// Version is reported by /healthz.
	Version string
	// Sessions counts and bounds the MCP sessions (see [SessionLimits]);
	// the defaults if nil.
	Sessions *Sessions
	// ShutdownTimeout is how long the requests in flight get to finish when
	// ctx ends before their connections are closed (DefaultShutdownTimeout
	// if zero).
	ShutdownTimeout time.Duration
	// MaxRequest bounds a request's body on /mcp and /sse
	// (DefaultMaxRequestBytes when it gives none): a larger one is
	// answered 413, naming MaxRequest.Setting, before it is read.
	MaxRequest RequestLimit
	// Ready, if set, is called once the listener is bound, with its
	// address (the real port when Addr asked for port 0).
	Ready func(addr net.Addr)
	// Principals, if set, are more tokens for /mcp and /sse, each naming
	// who calls (see [Principals]); Token (or none on loopback) names
	// LocalPrincipal. ServeHTTP reloads the file when it changes.
	Principals *Principals
	// Metrics, if set, is served at /metrics (GET), behind the same bearer
	// token as /mcp.
	Metrics http.Handler
	// Drain, if set, says when the server drains (see [Drain]): from
	// then on /readyz answers 503, and a request that would open a new
	// session gets 503 with Retry-After; the sessions that exist go on
	// being served until ctx ends.
	Drain *Drain
	// Readiness, if set, is what /readyz checks (within ReadyTimeout);
	// without it /readyz is 200 until the server drains.
	Readiness func(ctx context.Context) []Check
}

// ServeHTTP serves srv over HTTP until ctx ends:
//
//   - /mcp: the Streamable HTTP transport, with stateful sessions (so that
//     notifications/cancelled reaches a call in flight and progress
//     notifications stream back on the call's response), bounded by
//     HTTPOptions.Sessions: a session past its limits is refused, and an
//     idle one closed (idle: no POST in progress, even while the client's
//     GET stream is open: an idle client must ping to keep its session);
//   - /sse: the legacy HTTP+SSE transport (protocol 2024-11-05), its
//     sessions counted by HTTPOptions.Sessions too;
//   - /healthz: {"status":"ok","version":...}, without auth: the process
//     answers;
//   - /readyz: 200 {"status":"ready",...} when HTTPOptions.Readiness finds
//     every check OK, else 503 with what is wrong; 503 {"status":"draining"}
//     once HTTPOptions.Drain started. Without auth; the checks' details
//     only with the token, when there is one;
//   - /metrics: HTTPOptions.Metrics, if set, with the auth of /mcp.
//
// /mcp and /sse need `Authorization: Bearer <token>` when a token is set or
// generated (see HTTPOptions.Token); whether the address is loopback is
// judged from the address actually bound. Every path is behind [Guard]: a
// request that reaches a loopback address with a non-loopback Host header
// (DNS rebinding) gets 403, and so do cross-origin browser requests that
// are not GET or HEAD.
//
// When ctx ends, ServeHTTP stops accepting connections, closes those that
// have not sent a request, ends the hanging GET streams, gives the requests in flight ShutdownTimeout to finish, then
// closes the sessions of srv that have a session id (srv should not be
// shared with other HTTP handlers). It returns nil after a clean shutdown,
// and an error if it had to cut requests short or could not listen. It does
// not cancel tool calls in flight: a long run_python call holds its request
// until the shutdown budget is spent, so callers should call
// (*Server).Shutdown as well when ctx ends.
func ServeHTTP(ctx context.Context, srv *mcp.Server, opts HTTPOptions, log zerolog.Logger) error {
	if srv == nil {
		return errors.New("bridge: ServeHTTP: nil server")
	}
	if err := checkToken(opts.Token); err != nil {
		return err
	}
	opts = opts.withDefaults()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", opts.Addr, err)
	}
	addr := ln.Addr()
	token, err := bearerToken(opts, addr, log)
	if err != nil {
		ln.Close()
		return err
	}

	if opts.Principals != nil {
		go reloadPrincipals(ctx, opts.Principals, log)
	}
	// streams ends the hanging GET requests (SSE streams) when shutdown
	// begins: they never finish on their own.
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()

	var fresh freshConns
	// No ReadTimeout or WriteTimeout: SSE streams and tool calls last.
	hs := NewServer(newHTTPHandler(srv, opts, token, streams), log)
	hs.ConnState = fresh.track
	opts.Sessions.bind(streams, srv, log)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	log.Info().Str("addr", addr.String()).Str("mcp", "http://"+addr.String()+"/mcp").
		Bool("auth", token != "").Msg("serving MCP over HTTP")
	if opts.Ready != nil {
		opts.Ready(addr)
	}

	select {
	case err := <-served:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}

	log.Info().Msg("shutting down the HTTP server")
	sctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownTimeout)
	defer cancel()
	fresh.closeAll()
	endStreams()
	err = hs.Shutdown(sctx)
	if err != nil {
		hs.Close()
		err = fmt.Errorf("HTTP requests still in flight after %s were cut short: %w", opts.ShutdownTimeout, err)
	}
	<-served // http.ErrServerClosed
	closeSessions(sctx, srv, log)
	return err
}

// withDefaults fills in what opts leaves unset.
func (opts HTTPOptions) withDefaults() HTTPOptions {
	if opts.Addr == "" {
		opts.Addr = DefaultHTTPAddr
	}
	if opts.Sessions == nil {
		opts.Sessions = NewSessions(nil)
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.TokenEnv == "" {
		opts.TokenEnv = "BRIDGE_HTTP_TOKEN"
	}
	if opts.Drain == nil {
		opts.Drain = NewDrain()
	}
	opts.MaxRequest = opts.MaxRequest.orDefault()
	return opts
}

// bearerToken is the token /mcp and /sse need on addr: opts.Token, or one
// generated (and logged, once) for an address beyond loopback without
// one; "" on loopback without one.
func bearerToken(opts HTTPOptions, addr net.Addr, log zerolog.Logger) (string, error) {
	token := opts.Token
	switch {
	case token == "" && !isLoopbackAddr(addr):
		token, err := newToken()
		if err != nil {
			return "", err
		}
		// The only place the token is ever logged, and at no level, so that
		// no BRIDGE_LOG_LEVEL can hide it: without it no client gets in.
		log.Log().Str("level", "warn").Str("token", token).Str("addr", addr.String()).
			Msg("listening beyond loopback without " + opts.TokenEnv + ": generated a bearer token for this run; " +
				"clients must send the header 'Authorization: Bearer <token>'")
		return token, nil
	case token == "":
		log.Info().Msg("loopback address and no token: /mcp and /sse need no auth")
	case len(token) < 16:
		log.Warn().Int("length", len(token)).Msg("the bearer token is short; use at least 32 random characters")
	}
	return token, nil
}

// freshConns tracks the connections that have not sent a request yet
// (http.StateNew), to close them when shutdown begins: http.Server.Shutdown
// waits for them as if they were busy, up to 5 s (an HTTP client may well
// open a spare connection and leave it unused).
type freshConns struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool
}

// track is an http.Server.ConnState hook.
func (f *freshConns) track(c net.Conn, state http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case state == http.StateNew && f.closing:
		c.Close()
	case state == http.StateNew:
		if f.conns == nil {
			f.conns = map[net.Conn]struct{}{}
		}
		f.conns[c] = struct{}{}
	default:
		delete(f.conns, c)
	}
}

// closeAll closes the fresh connections, and from now on every new one.
func (f *freshConns) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// closeSessions closes srv's sessions that have an id (the Streamable HTTP
// ones; a legacy SSE session ends with its GET), waiting until ctx ends at
// most: closing a session waits for its handlers in flight.
func closeSessions(ctx context.Context, srv *mcp.Server, log zerolog.Logger) {
	var wg sync.WaitGroup
	for ss := range srv.Sessions() {
		if ss.ID() == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss.Close()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		log.Warn().Msg("MCP sessions still busy at shutdown")
	}
}

// newHTTPHandler routes /mcp, /sse, /healthz and /readyz (NewServer puts
// Guard before them all). token may be empty (no auth); streams ends the
// GET requests of /mcp and /sse.
func newHTTPHandler(srv *mcp.Server, opts HTTPOptions, token string, streams context.Context) http.Handler {
	legacy, stateless := newStreamable(srv, opts.MaxRequest.Bytes)
	getServer := func(*http.Request) *mcp.Server { return srv }
	sse := mcp.NewSSEHandler(getServer, &mcp.SSEOptions{MaxRequestBodyBytes: opts.MaxRequest.Bytes})
	auth := principalAuth(token, opts.Principals)
	limit := limitBody(opts.MaxRequest)
	ss := opts.Sessions

	mux := http.NewServeMux()
	d := opts.Drain
	// A stateless request is one of its own: no MCP session to count or
	// to close, and no stream to end; while draining the bridge refuses
	// its new calls itself (continuations of detached runs go on).
	mux.Handle("/mcp", auth(limit(eras(
		d.gate(endWith(streams, ss.streamable(legacy)), opensLegacy),
		d.gate(stateless, opensNothing)))))
	mux.Handle("/sse", auth(limit(d.gate(endWith(streams, ss.sse(sse)), opensSSE))))
	mux.Handle("/readyz", readyz(d, opts.Readiness, opts.Version, token))
	if opts.Metrics != nil {
		mux.Handle("/metrics", auth(getOnly(opts.Metrics)))
	}
	version := opts.Version
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(map[string]string{"status": "ok", "version": version})
	})
	return mux
}

// getOnly answers 405 to what is not GET or HEAD.
func getOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// limitBody answers 413 to a request whose declared length is over limit,
// before its body is read; a body of unknown length (chunked) is cut at
// the limit by the SDK, which then answers 413 itself.
func limitBody(limit RequestLimit) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > limit.Bytes {
				http.Error(w, limit.over("request body", r.ContentLength), http.StatusRequestEntityTooLarge)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// endWith ends the context of GET requests (the hanging SSE streams) when
// streams ends; other requests are left to finish.
func endWith(streams context.Context, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			stop := context.AfterFunc(streams, cancel)
			defer stop()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// bearerAuth requires `Authorization: Bearer <token>`, unless token is
// empty. Tokens are compared in constant time (as SHA-256 digests, so that
// not even the length leaks).
func bearerAuth(token string) func(http.Handler) http.Handler {
	return principalAuth(token, nil)
}

// principalAuth is bearerAuth with principals: a request names who calls
// by its token, token itself naming LocalPrincipal; one without a token
// is let in, as LocalPrincipal, only when token is empty (loopback). The
// principal reaches the MCP handlers as the request's auth.TokenInfo
// UserID (mcp.RequestExtra), which go-sdk also holds a session's later
// requests to.
func principalAuth(token string, principals *Principals) func(http.Handler) http.Handler {
	if token == "" && principals == nil {
		return func(h http.Handler) http.Handler { return h }
	}
	want := sha256.Sum256([]byte(token))
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, got, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") {
				if token == "" { // loopback without a token: the local user
					h.ServeHTTP(w, r)
					return
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="bridge"`)
				http.Error(w, "unauthorized: send the header 'Authorization: Bearer <token>'", http.StatusUnauthorized)
				return
			}
			got = strings.TrimSpace(got)
			principal := ""
			if sum := sha256.Sum256([]byte(got)); token != "" && subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
				principal = LocalPrincipal
			} else if principals != nil {
				principal, _ = principals.Lookup(got)
			}
			if principal == "" {
				w.Header().Set("WWW-Authenticate", `Bearer realm="bridge", error="invalid_token"`)
				http.Error(w, "unauthorized: wrong token in 'Authorization: Bearer <token>'", http.StatusUnauthorized)
				return
			}
			if principals == nil {
				h.ServeHTTP(w, r)
				return
			}
			withPrincipal(h, principal).ServeHTTP(w, r)
		})
	}
}

// LocalPrincipal is who calls without a principal of its own: the local
// user (stdio, loopback without a token), or the holder of the server's
// own token.
const LocalPrincipal = "local"

// withPrincipal is h with principal as the request's auth.TokenInfo: the
// only way into it is go-sdk's RequireBearerToken, whose check has
// already been made.
func withPrincipal(h http.Handler, principal string) http.Handler {
	return auth.RequireBearerToken(func(context.Context, string, *http.Request) (*auth.TokenInfo, error) {
		return &auth.TokenInfo{UserID: principal}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// checkToken refuses a token that cannot travel in an Authorization
// header.
func checkToken(token string) error {
	for _, r := range token {
		if r <= ' ' || r == 0x7f {
			return errors.New("bridge: the HTTP bearer token must not contain spaces or control characters")
		}
	}
	return nil
}

// newToken returns 32 random bytes, base64url-encoded.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a bearer token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// isLoopbackAddr reports whether a bound listener address is a loopback
// one (127.0.0.0/8, ::1). The unspecified address (":8080", "0.0.0.0",
// "[::]") is not: it listens on every interface.
func isLoopbackAddr(addr net.Addr) bool {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpErrorLog sends net/http's own error log to zerolog.
type httpErrorLog struct{ log zerolog.Logger }

func (l httpErrorLog) Write(p []byte) (int, error) {
	l.log.Warn().Str("error", strings.TrimSpace(string(p))).Msg("http server")
	return len(p), nil
}

// principalsPoll is how often the principals file is looked at.
const principalsPoll = 2 * time.Second

// reloadPrincipals reloads p when its file changes, until ctx ends: a
// token removed from the file stops working within principalsPoll.
func reloadPrincipals(ctx context.Context, p *Principals, log zerolog.Logger) {
	t := time.NewTicker(principalsPoll)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := p.Reload()
		switch {
		case err != nil && !failing:
			log.Error().Err(err).Msg("principals: the file could not be reloaded; its last good tokens stay in force")
		case changed:
			log.Info().Int("tokens", p.Count()).Msg("principals: reloaded")
		}
		failing = err != nil
	}
}
