package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/bridge/transport"
	"github.com/bridge-mcp/bridge/sandbox"
)

// Stats is what /debug/stats reports of the bridge process: what the
// hostile-code and soak tests watch, and what an operator graphs.
type Stats struct {
	Goroutines int    `json:"goroutines"`
	HeapAlloc  uint64 `json:"heap_alloc_bytes"`
	HeapSys    uint64 `json:"heap_sys_bytes"`
	RSS        int64  `json:"rss_bytes"`    // resident set, from /proc/self/status
	OpenFiles  int    `json:"open_fds"`     // entries of /proc/self/fd
	NumGC      uint32 `json:"gc_cycles"`    // garbage collections so far
	Uptime     string `json:"uptime"`       // since the debug endpoint started
	Version    string `json:"version"`      // the bridge's
	PID        int    `json:"pid"`          // the bridge's
	GoMaxProcs int    `json:"go_max_procs"` // runtime.GOMAXPROCS
	GoVersion  string `json:"go_version"`   // the toolchain it was built with
	TimeUnixMS int64  `json:"time_unix_ms"` // when these were read
	HeapInuse  uint64 `json:"heap_inuse_bytes"`
	// Pool is the warm pool's state, once the engine is open.
	Pool *sandbox.PoolStats `json:"pool,omitempty"`
	// ToolCalls is how long the latest tool calls took, the bridge's own
	// part apart from the upstream server's.
	ToolCalls *toolhost.CallTimesSummary `json:"tool_calls,omitempty"`
}

// debugSources are where /debug/stats reads what is not the process's
// own; each may be nil.
type debugSources struct {
	pool  func() *sandbox.PoolStats
	calls *toolhost.CallTimes
}

// serveDebug serves /debug/stats (JSON Stats) and /debug/pprof/NAME
// (runtime/pprof profiles: goroutine, heap, allocs, ...; ?debug=1 for text)
// on addr, which must be a loopback address: profiles show internals that
// are nobody else's business. It returns when ctx ends.
func serveDebug(ctx context.Context, addr string, src debugSources, log zerolog.Logger) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--debug-addr %q: %v (use 127.0.0.1:PORT)", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("--debug-addr %q: only a loopback address is allowed (127.0.0.1:PORT)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--debug-addr: %w", err)
	}
	started := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		st := readStats(started)
		if src.pool != nil {
			st.Pool = src.pool()
		}
		if src.calls != nil {
			sum := src.calls.Summary()
			st.ToolCalls = &sum
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /debug/pprof/{name}", func(w http.ResponseWriter, r *http.Request) {
		p := pprof.Lookup(r.PathValue("name"))
		if p == nil {
			http.Error(w, "no such profile", http.StatusNotFound)
			return
		}
		debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
		if debug == 0 {
			w.Header().Set("Content-Type", "application/octet-stream")
		} else {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		}
		_ = p.WriteTo(w, debug)
	})
	// Behind transport.Guard: loopback only, so a DNS rebinding page would
	// be its one way in from a browser.
	srv := transport.NewServer(mux, log)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn().Err(err).Msg("debug endpoint")
		}
	}()
	context.AfterFunc(ctx, func() { srv.Close() })
	log.Info().Str("addr", ln.Addr().String()).Msg("debug endpoint: /debug/stats, /debug/pprof/NAME")
	return ln.Addr().String(), nil
}

func readStats(started time.Time) Stats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s := Stats{
		Goroutines: runtime.NumGoroutine(), HeapAlloc: m.HeapAlloc, HeapSys: m.HeapSys, HeapInuse: m.HeapInuse,
		NumGC: m.NumGC, Uptime: time.Since(started).Round(time.Millisecond).String(), Version: versionString(),
		PID: os.Getpid(), GoMaxProcs: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), TimeUnixMS: time.Now().UnixMilli(),
		RSS: -1, OpenFiles: -1,
	}
	if f, err := os.Open("/proc/self/status"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
					s.RSS = kb << 10
				}
			}
		}
		f.Close()
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.OpenFiles = len(fds)
	}
	return s
}
