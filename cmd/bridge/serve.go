package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/bridge/artifacts"
	"github.com/bridge-mcp/bridge/bridge/transport"
	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// shutdownBudget is how long serve waits, after stdin ends or a signal, for
// runs in flight to be cancelled and their containers removed.
const shutdownBudget = 5 * time.Second

func cmdServe(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "serve", "[flags]", "Serves MCP with one tool, run_python, over stdio (default) or streamable\n"+
		"HTTP (--http). Register it in your agent: see docs/clients.md. Stdout carries\n"+
		"only the protocol; logs go to stderr.")
	httpAddr := fs.String("http", "", "serve streamable HTTP at ADDR/mcp (e.g. 127.0.0.1:8808) instead of stdio;\nbeyond loopback a bearer token is required: $BRIDGE_HTTP_TOKEN, or one is generated and logged once")
	var sf settingFlags
	sf.engine(fs)
	sf.limits(fs)
	fs.Lookup("timeout").Usage = "timeout of a call that gives no timeout_seconds (a `duration`)"
	sf.add(fs, "max-timeout", "sandbox.max_timeout", "largest timeout_seconds a call may ask for (a `duration`)")
	sf.add(fs, "max-concurrent", "sandbox.max_concurrent", "`number` of runs at once")
	sf.add(fs, "queue", "sandbox.queue", "`number` of calls that may wait for a free slot; more get a busy error")
	var uf upstreamFlags
	uf.register(fs, true)
	sf.callTimeout(fs)
	policyPath := fs.String("policy", "", "the policy `FILE` (docs/policy.md); default "+defaultPolicyPath()+" if it exists;\n"+
		"it is reloaded when it changes and on SIGHUP; with a policy file, the sandbox flags may only tighten it")
	metricsAddr := metricsFlag(fs)
	drainFlagValue := drainFlag(fs, "the runs in flight (with --http; under stdio 0 unless given)")
	debugAddr := fs.String("debug-addr", "", "serve /debug/stats (goroutines, heap, RSS, fds, pool, tool-call times) and /debug/pprof/NAME at `ADDR`, loopback only")
	var tf tracingFlags
	tf.register(fs)
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if err := uf.check(); err != nil {
		return exitUsage, err
	}
	if len(args) != 0 {
		return exitUsage, usagef("takes no arguments, got %s", quoteArgs(args))
	}
	drainTimeout, err := drainTimeoutOf(fs, *drainFlagValue, *httpAddr == "")
	if err != nil {
		return exitUsage, err
	}
	log := e.log
	if os.Getenv("BRIDGE_LOG_LEVEL") == "" {
		log = log.Level(zerolog.InfoLevel)
	}

	// The policy: the file's, tightened by the flags above, or the
	// defaults they replace.
	check := func(p *policy.Policy) error { return remoteProxyPolicy(uf.proxyURL, p) }
	pol, polPath, limits, runnerImage, err := runPolicy(e, *policyPath, uf.proxyURL, sf.set)
	if err != nil {
		return exitUsage, err
	}
	// A reload must not bring in what this bridge could not apply, and the
	// flags go on tightening it.
	store, err := openStore(ctx, pol, polPath, adjuster(sf.set, check), log)
	if err != nil {
		return exitUsage, err
	}
	defer store.Close()

	// Spans go out in batches; what is queued at exit is flushed, within
	// a bound of its own, after the shutdown.
	tp, err := tf.open(ctx, "bridge", log)
	if err != nil {
		return exitUsage, err
	}
	defer func() {
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("tracing")
		}
	}()

	// Upstream servers start on first use, not now.
	selfURL := ""
	if *httpAddr != "" {
		selfURL = "http://" + *httpAddr
	}
	// Metrics are counted when something serves them: /metrics of --http,
	// or --metrics-addr.
	var m *metrics.Metrics
	if *httpAddr != "" || *metricsAddr != "" {
		m = metrics.New(versionString())
	}
	tools, err := wireTools(e, &uf, selfURL, store, m, tp, log)
	if err != nil {
		return exitUsage, err
	}
	defer tools.stop()

	// The engine is opened on the first call, not now: serve answers
	// initialize at once even where no engine runs, and a call then says
	// what is wrong.
	// Files returned by reference are kept in the policy's artifacts
	// folder while the bridge runs (and until they expire).
	var files *artifacts.Store
	if a := pol.Artifacts; a.Dir != "" {
		files, err = artifacts.OpenStore(artifacts.StoreOptions{Dir: a.Dir, Expiry: a.Expiry, MaxBytesKept: a.MaxBytesKept, Logger: log})
		if err != nil {
			return exitUsage, fmt.Errorf("artifacts.dir: %w", err)
		}
		defer files.Close()
	}
	eng := wireEngine(pol, runnerImage, tools.handler, store, true, log)
	defer eng.Close(shutdownBudget)
	if *debugAddr != "" {
		if _, err := serveDebug(ctx, *debugAddr, debugSources{pool: eng.PoolStats, calls: tools.times}, log); err != nil {
			return exitUsage, usagef("%v", err)
		}
	}
	srv, err := bridge.New(bridge.Options{
		Instances:     eng,
		Runs:          tools.runs,
		Limits:        limits,
		MaxTimeout:    pol.Sandbox.MaxTimeout,
		MaxConcurrent: pol.Sandbox.MaxConcurrent,
		QueueLength:   pol.Sandbox.Queue,
		Policy:        store,
		Store:         files,
		DataScience:   pol.Sandbox.Image == "" && pol.Sandbox.Variant == images.DataScience,
		Metrics:       m,
		Tracer:        tp.Tracer(scopeBridge),
		Version:       versionString(),
		Logger:        log,
	})
	if err != nil {
		return exitUsage, usagef("%v", err)
	}
	if m != nil {
		m.Watch(serveState(srv, eng, store, tools.upstreams, files))
		if err := serveMetricsAt(ctx, *metricsAddr, m, log); err != nil {
			return exitUsage, err
		}
	}

	return serveUntilDone(ctx, e, srv, eng, serving{
		warm: pol.Pool.Size > 0, httpAddr: *httpAddr, drainTimeout: drainTimeout, metrics: m, sessions: httpSessions(*httpAddr, store, m),
		pooled:     func() bool { return store.Current().Policy.Pool.Size > 0 },
		maxRequest: transport.RequestLimit{Bytes: pol.Sandbox.MaxRequestBytes, Setting: "sandbox.max_request_bytes"},
	}, log)
}

// DefaultDrainTimeout is how long `bridge serve --http` and `bridge proxy`
// let the work in flight finish after SIGTERM (--drain-timeout).
const DefaultDrainTimeout = 30 * time.Second

// drainFlag registers --drain-timeout; its value is set by
// drainTimeoutOf once the flags are parsed.
func drainFlag(fs *flag.FlagSet, what string) *time.Duration {
	return fs.Duration("drain-timeout", DefaultDrainTimeout, "after SIGTERM or SIGINT, how long "+what+" get to finish (a `duration`; 0: cancel them at once);\n"+
		"meanwhile /readyz answers 503 and no new session or call is taken; a second signal ends the wait")
}

// drainTimeoutOf is the drain timeout the flag d says: under stdio,
// unless --drain-timeout was given, 0: a stdio client that signals the
// bridge wants it gone (it closes stdin first, then signals if the bridge
// does not exit, then kills it).
func drainTimeoutOf(fs *flag.FlagSet, d time.Duration, stdio bool) (time.Duration, error) {
	if d < 0 {
		return 0, usagef("--drain-timeout must not be negative, got %s", d)
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "drain-timeout" })
	if stdio && !set {
		return 0, nil
	}
	return d, nil
}

// serving is how serveUntilDone serves: warm, the engine is opened at
// once, so that its pool starts filling; pooled says whether the policy in
// force keeps a warm pool (for /readyz); over streamable HTTP at httpAddr,
// else over stdio; each client message bounded by maxRequest; after a
// signal, the runs in flight get drainTimeout to finish.
type serving struct {
	warm         bool
	pooled       func() bool
	httpAddr     string
	maxRequest   transport.RequestLimit
	drainTimeout time.Duration
	metrics      *metrics.Metrics    // served at /metrics of httpAddr, if set
	sessions     *transport.Sessions // bounds httpAddr's MCP sessions
}

// serveUntilDone serves srv as how says until a signal, the end of stdin
// or the transport's own end, then shuts it down within shutdownBudget.
//
// A signal first drains (how.drainTimeout > 0): /readyz answers 503, a
// new session is refused with 503, a new call with an error that says to
// reconnect; the runs in flight go on until they end, the drain timeout
// passes, a second signal comes, or stdin ends. Then the shutdown begins.
func serveUntilDone(ctx context.Context, e *env, srv *bridge.Server, eng *sandbox.Engine, how serving, log zerolog.Logger) (int, error) {
	httpAddr, maxRequest := how.httpAddr, how.maxRequest
	again := e.secondSignal()
	if how.warm {
		// Fill the warm pool now rather than at the first call; an engine
		// that is not there is reported here and to that call.
		go func() {
			if err := eng.Open(ctx); err != nil {
				log.Warn().Err(err).Msg("pool: no engine to start containers ahead of time; runs will say why")
			}
		}()
	}

	// The transport ends when the shutdown begins, not at the signal:
	// while draining it goes on answering the sessions that exist.
	tctx, stopTransport := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTransport()
	drain := transport.NewDrain()
	eof := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		if httpAddr != "" {
			pooled := how.pooled
			if pooled == nil {
				pooled = func() bool { return false }
			}
			served <- transport.ServeHTTP(tctx, srv.MCP(), transport.HTTPOptions{
				Addr: httpAddr, Token: strings.TrimSpace(os.Getenv("BRIDGE_HTTP_TOKEN")), Version: versionString(),
				ShutdownTimeout: shutdownBudget * 3 / 5, MaxRequest: maxRequest,
				Drain: drain, Readiness: serveReadiness(eng, pooled, log),
				Metrics: metricsHandler(how.metrics), Sessions: how.sessions,
			}, log)
			return
		}
		log.Info().Msg("serving MCP over stdio")
		served <- transport.ServeStdio(tctx, srv.MCP(), &eofReader{r: e.stdin, eof: eof}, e.stdout, maxRequest, log)
	}()
	finished := false
	var err error
	select {
	case err = <-served:
		finished = true
	case <-ctx.Done():
		if how.drainTimeout <= 0 {
			log.Info().Msg("signal: shutting down")
			break
		}
		finished, err = drainRuns(srv, drain, how.drainTimeout, again, eof, served, log)
	case <-eof:
		log.Info().Msg("end of stdin: shutting down")
	}

	// One deadline for the whole shutdown, fixed when it begins. Runs
	// still in flight are cancelled at once; whatever has not ended by
	// the deadline is left to the next bridge's reaper, and the process
	// exits anyway. After a signal the transport is told to end (stdin's
	// end ends stdio by itself).
	if ctx.Err() != nil {
		stopTransport()
	}
	dctx, cancel := context.WithTimeout(context.Background(), shutdownBudget)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(dctx) }()
	if !finished {
		select {
		case err = <-served:
		case <-dctx.Done():
			log.Warn().Msg("the transport did not close within the shutdown budget")
		}
	}
	if serr := <-shut; serr != nil {
		log.Error().Err(serr).Msg("shutdown: leftovers are removed by the next bridge's reaper")
	}
	if err != nil && ctx.Err() == nil {
		return exitBridge, err
	}
	log.Info().Msg("stopped")
	return 0, nil
}

// metricsHandler is m's handler, nil without m.
func metricsHandler(m *metrics.Metrics) http.Handler {
	if m == nil {
		return nil
	}
	return m.Handler()
}

// drainRuns drains srv after a signal: no new session (drain), no new
// call, until the calls and runs in flight end, timeout passes, again or
// eof is closed (a second signal; the stdio client left), or the
// transport ends (served; finished then says so, with its error).
func drainRuns(srv *bridge.Server, drain *transport.Drain, timeout time.Duration, again, eof <-chan struct{}, served <-chan error, log zerolog.Logger) (finished bool, err error) {
	drain.Start()
	idle := srv.Drain()
	log.Info().Int("in_flight", srv.InFlight()).Str("drain_timeout", timeout.String()).
		Msg("signal: draining (no new session or call; the runs in flight finish); a second signal stops at once")
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		log.Info().Msg("drained: no run in flight; shutting down")
	case <-t.C:
		log.Warn().Int("in_flight", srv.InFlight()).Msg("drain timeout: cancelling the runs still in flight; shutting down")
	case <-again:
		log.Warn().Int("in_flight", srv.InFlight()).Msg("second signal: cancelling the runs still in flight; shutting down")
	case <-eof:
		log.Info().Msg("end of stdin while draining: shutting down")
	case err = <-served:
		return true, err
	}
	return false, nil
}

// eofReader closes eof when the reader reports io.EOF.
type eofReader struct {
	r    io.Reader
	eof  chan struct{}
	once sync.Once
}

func (r *eofReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == io.EOF {
		r.once.Do(func() { close(r.eof) })
	}
	return n, err
}
