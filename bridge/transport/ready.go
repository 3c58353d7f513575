package transport

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Check is one thing /readyz looks at, as it reports it.
type Check struct {
	// Name is what was checked: "engine", "pool", "upstreams", ...
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// State is a word or two for a balancer's log and a human:
	// "reachable", "filling", "unreachable", "image missing", ...
	State string `json:"state"`
	// Detail says what is wrong, or more about the state. It may name
	// paths and images: /readyz shows it only to a request that carries
	// the bearer token, when the server has one.
	Detail string `json:"detail,omitempty"`
}

// ReadyTimeout bounds how long /readyz waits for HTTPOptions.Readiness:
// a check that takes longer is reported as not answering.
const ReadyTimeout = 2 * time.Second

// DrainRetryAfter is the Retry-After (seconds) of the 503 a draining
// server answers to a request for a new session.
const DrainRetryAfter = 5

// drainingMessage is the body of that 503.
const drainingMessage = "the bridge is draining (shutting down): it opens no new MCP session; connect to another instance, or retry after it restarted\n"

// Drain is whether an HTTP server drains, and how many requests it has in
// flight. Pass one in HTTPOptions.Drain; Start it when the server should
// stop taking new sessions (a SIGTERM). It is safe for concurrent use.
type Drain struct {
	once     sync.Once
	ch       chan struct{}
	inflight atomic.Int64
	last     atomic.Int64 // when the last request ended, in Unix ns
}

// NewDrain returns a Drain that has not started.
func NewDrain() *Drain { return &Drain{ch: make(chan struct{})} }

// Start begins draining; calling it again does nothing.
func (d *Drain) Start() { d.once.Do(func() { close(d.ch) }) }

// Started is closed once Start was called.
func (d *Drain) Started() <-chan struct{} { return d.ch }

// Draining reports whether Start was called.
func (d *Drain) Draining() bool {
	select {
	case <-d.ch:
		return true
	default:
		return false
	}
}

// InFlight is how many requests on /mcp and /sse are being answered now
// (the hanging GET streams not counted).
func (d *Drain) InFlight() int64 { return d.inflight.Load() }

// Quiet returns once no request has been in flight for quiet, or when
// ctx ends (with its error). It polls: it is for shutdown, not for a hot
// path.
func (d *Drain) Quiet(ctx context.Context, quiet time.Duration) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if d.inflight.Load() == 0 && time.Since(time.Unix(0, d.last.Load())) >= quiet {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// gate answers 503 to what opens says would open a new session while d
// drains, and counts the requests in flight.
func (d *Drain) gate(h http.Handler, opens func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opens(r) && d.Draining() {
			w.Header().Set("Retry-After", strconv.Itoa(DrainRetryAfter))
			w.Header().Set("Connection", "close")
			http.Error(w, drainingMessage, http.StatusServiceUnavailable)
			return
		}
		if r.Method != http.MethodGet {
			d.inflight.Add(1)
			defer func() {
				d.last.Store(time.Now().UnixNano())
				d.inflight.Add(-1)
			}()
		}
		h.ServeHTTP(w, r)
	})
}

// opensLegacy: a POST to /mcp without Mcp-Session-Id opens a session.
func opensLegacy(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == ""
}

// opensSSE: a GET of /sse opens a session.
func opensSSE(r *http.Request) bool { return r.Method == http.MethodGet }

// opensNothing: a stateless request opens no session.
func opensNothing(*http.Request) bool { return false }

// readyz answers /readyz: 200 {"status":"ready"} when every check of
// readiness is OK, else 503 {"status":"not ready"} or, while d drains,
// 503 {"status":"draining"} at once. token, when set, is what a request
// must carry to see the checks' details.
func readyz(d *Drain, readiness func(context.Context) []Check, version, token string) http.HandlerFunc {
	want := sha256.Sum256([]byte(token))
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body := struct {
			Status  string  `json:"status"`
			Version string  `json:"version"`
			Detail  string  `json:"detail,omitempty"`
			Checks  []Check `json:"checks,omitempty"`
		}{Status: "ready", Version: version}
		code := http.StatusOK
		switch {
		case d.Draining():
			body.Status, body.Detail = "draining", "shutting down: the runs in flight finish, no new session is opened"
			code = http.StatusServiceUnavailable
		case readiness != nil:
			ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
			body.Checks = readiness(ctx)
			cancel()
			shown := token == "" || authorized(r, want)
			for i, c := range body.Checks {
				if !c.OK {
					body.Status, code = "not ready", http.StatusServiceUnavailable
				}
				if !shown {
					body.Checks[i].Detail = ""
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(body)
	}
}

// authorized reports whether r carries the bearer token whose SHA-256 is
// want.
func authorized(r *http.Request, want [sha256.Size]byte) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

// CachedCheck returns check (of the thing called name), called at most once per ttl: callers within
// ttl of the last call get its answer, and concurrent callers share one
// call. ctx of the caller that makes the call bounds it; a check that ends
// by its ctx is not kept.
func CachedCheck(name string, ttl time.Duration, check func(ctx context.Context) Check) func(ctx context.Context) Check {
	var (
		mu   sync.Mutex
		last Check
		at   time.Time
		busy chan struct{} // closed when the call under way ends
	)
	return func(ctx context.Context) Check {
		for {
			mu.Lock()
			if !at.IsZero() && time.Since(at) < ttl {
				c := last
				mu.Unlock()
				return c
			}
			if busy == nil {
				break
			}
			wait := busy
			mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return Check{Name: name, State: "not answering", Detail: "no answer within " + ReadyTimeout.String()}
			}
		}
		done := make(chan struct{})
		busy = done
		mu.Unlock()
		c := check(ctx)
		c.Name = name
		mu.Lock()
		if ctx.Err() == nil {
			last, at = c, time.Now()
		}
		busy = nil
		close(done)
		mu.Unlock()
		return c
	}
}
