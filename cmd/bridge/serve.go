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
	"github.com/bridge-mcp/bridge/bridge/snapshots"
	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/bridge/transport"
	"github.com/bridge-mcp/bridge/images"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/internal/tracing"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// shutdownBudget is how long serve waits, after stdin ends or a signal, for
// runs in flight to be cancelled and their containers removed.
const shutdownBudget = 5 * time.Second

// serveFlags are serve's flags, parsed and checked.
type serveFlags struct {
	httpAddr, metricsAddr, debugAddr, policyPath string
	principalsPath                               string
	instance                                     string
	settings                                     settingFlags
	upstreams                                    upstreamFlags
	tracing                                      tracingFlags
	drainTimeout                                 time.Duration
}

// serveParts are what serve opens, in this order, and makes its MCP
// server of; cmdServe closes them in the reverse order when it ends.
type serveParts struct {
	pol    *policy.Policy
	limits sandbox.Limits
	image  string // the runner image
	store  *policy.Store
	tp     *tracing.Provider
	m      *metrics.Metrics // nil: nothing serves metrics
	tools  hostTools
	files  *artifacts.Store // nil: no artifacts.dir
	snaps  *snapshots.Store // nil: no sessions or no snapshots
	eng    *sandbox.Engine
	// principals name who calls over HTTP by their tokens (--principals);
	// nil: everyone is the local user.
	principals *transport.Principals
}

// cmdServe is `bridge serve`: its flags, then its parts (serveParts),
// then its MCP server, served until it is done.
func cmdServe(ctx context.Context, e *env, args []string) (int, error) {
	f, err := parseServeFlags(e, args)
	if err != nil {
		return exitUsage, err
	}
	log := e.log
	if os.Getenv("BRIDGE_LOG_LEVEL") == "" {
		log = log.Level(zerolog.InfoLevel)
	}
	var p serveParts
	if err := p.openPolicy(ctx, e, f, log); err != nil {
		return exitUsage, err
	}
	defer p.store.Close()

	// Spans go out in batches; what is queued at exit is flushed, within
	// a bound of its own, after the shutdown.
	if p.tp, err = f.tracing.open(ctx, "bridge", log); err != nil {
		return exitUsage, err
	}
	defer func() {
		if err := p.tp.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("tracing")
		}
	}()

	// Upstream servers start on first use, not now. Metrics are counted
	// when something serves them: /metrics of --http, or --metrics-addr.
	if f.httpAddr != "" || f.metricsAddr != "" {
		p.m = metrics.New(versionString())
	}
	if p.tools, err = wireTools(e, &f.upstreams, f.selfURL(), p.store, p.m, p.tp, log); err != nil {
		return exitUsage, err
	}
	defer p.tools.stop()

	if p.files, err = openArtifacts(p.pol, log); err != nil {
		return exitUsage, err
	}
	if p.files != nil {
		defer p.files.Close()
	}
	if p.snaps, err = openSnapshots(p.pol, p.store, log); err != nil {
		return exitUsage, err
	}
	if p.snaps != nil {
		defer p.snaps.Close()
	}
	// The engine is opened on the first call, not now: serve answers
	// initialize at once even where no engine runs, and a call then says
	// what is wrong.
	p.eng = wireEngine(p.pol, p.image, p.tools.handler, p.store, true, log)
	defer p.eng.Close(shutdownBudget)

	if f.principalsPath != "" {
		if p.principals, err = transport.LoadPrincipals(f.principalsPath); err != nil {
			return exitUsage, usagef("%v", err)
		}
		log.Info().Int("tokens", p.principals.Count()).Str("file", f.principalsPath).Msg("principals: loaded")
	}
	srv, err := p.server(ctx, f, log)
	if err != nil {
		return exitUsage, err
	}
	return serveUntilDone(ctx, e, srv, p.eng, p.how(f), log)
}

// parseServeFlags reads serve's command line.
func parseServeFlags(e *env, args []string) (*serveFlags, error) {
	f := &serveFlags{}
	fs := newFlagSet(e, "serve", "[flags]", "Serves MCP with one tool, run_python, over stdio (default) or streamable\n"+
		"HTTP (--http). Register it in your agent: see docs/clients.md. Stdout carries\n"+
		"only the protocol; logs go to stderr.")
	fs.StringVar(&f.httpAddr, "http", "", "serve streamable HTTP at ADDR/mcp (e.g. 127.0.0.1:8808) instead of stdio;\nbeyond loopback a bearer token is required: $BRIDGE_HTTP_TOKEN, or one is generated and logged once")
	fs.StringVar(&f.instance, "instance", os.Getenv("BRIDGE_INSTANCE"), "with --http behind a balancer, this bridge's `name` ($BRIDGE_INSTANCE; 1 to 32 letters, digits, _ or .):\n"+
		"the ids of its tasks start with it, so that the balancer sends a task's polls here (docs/operations.md)")
	fs.StringVar(&f.principalsPath, "principals", "", "with --http, a `file` of `PRINCIPAL TOKEN` lines: each token names who calls, the owner of\nits sessions' snapshots and its runs' files (reloaded when it changes; docs/operations.md)")
	sf := &f.settings
	sf.engine(fs)
	sf.limits(fs)
	fs.Lookup("timeout").Usage = "timeout of a call that gives no timeout_seconds (a `duration`)"
	sf.add(fs, "max-timeout", "sandbox.max_timeout", "largest timeout_seconds a call may ask for (a `duration`)")
	sf.add(fs, "max-concurrent", "sandbox.max_concurrent", "`number` of runs at once")
	sf.add(fs, "queue", "sandbox.queue", "`number` of calls that may wait for a free slot; more get a busy error")
	f.upstreams.register(fs, true)
	sf.callTimeout(fs)
	fs.StringVar(&f.policyPath, "policy", "", "the policy `FILE` (docs/policy.md); default "+defaultPolicyPath()+" if it exists;\n"+
		"it is reloaded when it changes and on SIGHUP; with a policy file, the sandbox flags may only tighten it")
	metricsAddr := metricsFlag(fs)
	drainFlagValue := drainFlag(fs, "the runs in flight (with --http; under stdio 0 unless given)")
	fs.StringVar(&f.debugAddr, "debug-addr", "", "serve /debug/stats (goroutines, heap, RSS, fds, pool, tool-call times) and /debug/pprof/NAME at `ADDR`, loopback only")
	f.tracing.register(fs)
	args, err := parseFlags(fs, args)
	if err != nil {
		return nil, err
	}
	if err := f.upstreams.check(); err != nil {
		return nil, err
	}
	if len(args) != 0 {
		return nil, usagef("takes no arguments, got %s", quoteArgs(args))
	}
	if f.drainTimeout, err = drainTimeoutOf(fs, *drainFlagValue, f.httpAddr == ""); err != nil {
		return nil, err
	}
	f.metricsAddr = *metricsAddr
	if f.principalsPath != "" && f.httpAddr == "" {
		return nil, usagef("--principals needs --http: over stdio the caller is the local user")
	}
	return f, nil
}

// selfURL is the URL serve answers HTTP at, "" under stdio: an upstream
// entry pointing at it is skipped.
func (f *serveFlags) selfURL() string {
	if f.httpAddr == "" {
		return ""
	}
	return "http://" + f.httpAddr
}

// openPolicy puts in force the policy: the file's, tightened by the
// flags, or the defaults they replace. A reload must not bring in what
// this bridge could not apply, and the flags go on tightening it.
func (p *serveParts) openPolicy(ctx context.Context, e *env, f *serveFlags, log zerolog.Logger) error {
	check := func(pol *policy.Policy) error { return remoteProxyPolicy(f.upstreams.proxyURL, pol) }
	pol, polPath, limits, image, err := runPolicy(e, f.policyPath, f.upstreams.proxyURL, f.settings.set)
	if err != nil {
		return err
	}
	store, err := openStore(ctx, pol, polPath, adjuster(f.settings.set, check), log)
	if err != nil {
		return err
	}
	p.pol, p.limits, p.image, p.store = pol, limits, image, store
	return nil
}

// openArtifacts is where files returned by reference are kept while the
// bridge runs (and until they expire): the policy's artifacts folder; nil
// without one.
func openArtifacts(pol *policy.Policy, log zerolog.Logger) (*artifacts.Store, error) {
	a := pol.Artifacts
	if a.Dir == "" {
		return nil, nil
	}
	files, err := artifacts.OpenStore(artifacts.StoreOptions{Dir: a.Dir, Expiry: a.Expiry, MaxBytesKept: a.MaxBytesKept, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("artifacts.dir: %w", err)
	}
	return files, nil
}

// resourceReader is r as the bridge's reader of inputs by URI, or nil
// (not a typed nil) without upstreams.
func resourceReader(r *toolhost.Resources) bridge.ResourceReader {
	if r == nil {
		return nil
	}
	return r
}

// openSnapshots is where sessions' snapshots are kept: the policy's
// snapshots folder, when sessions and snapshots are on at start; nil
// otherwise.
func openSnapshots(pol *policy.Policy, store *policy.Store, log zerolog.Logger) (*snapshots.Store, error) {
	sn := pol.Snapshots
	if !pol.Sessions.Enabled || !sn.Enabled {
		return nil, nil
	}
	dir, err := sn.Folder()
	if err != nil {
		return nil, err
	}
	st, err := snapshots.Open(snapshots.Options{Dir: dir, MaxBytes: sn.MaxBytes, MaxCount: sn.MaxCount, TTL: sn.TTL,
		Logger: log, OnEvent: snapshots.Audit(store.Audit())})
	if err != nil {
		return nil, fmt.Errorf("snapshots.dir: %w", err)
	}
	return st, nil
}

// server is the MCP server of p's parts, with /debug at --debug-addr and
// /metrics at --metrics-addr served from now on if asked for.
func (p *serveParts) server(ctx context.Context, f *serveFlags, log zerolog.Logger) (*bridge.Server, error) {
	if f.debugAddr != "" {
		if _, err := serveDebug(ctx, f.debugAddr, debugSources{pool: p.eng.PoolStats, calls: p.tools.times}, log); err != nil {
			return nil, usagef("%v", err)
		}
	}
	pol := p.pol
	srv, err := bridge.New(bridge.Options{
		Instances:     p.eng,
		Runs:          p.tools.runs,
		Limits:        p.limits,
		MaxTimeout:    pol.Sandbox.MaxTimeout,
		MaxConcurrent: pol.Sandbox.MaxConcurrent,
		QueueLength:   pol.Sandbox.Queue,
		Policy:        p.store,
		Store:         p.files,
		Snapshots:     p.snaps,
		Resources:     resourceReader(p.tools.resources),
		DataScience:   pol.Sandbox.Image == "" && pol.Sandbox.Variant == images.DataScience,
		Metrics:       p.m,
		Tracer:        p.tp.Tracer(scopeBridge),
		Version:       versionString(),
		Instance:      f.instance,
		Logger:        log,
	})
	if err != nil {
		return nil, usagef("%v", err)
	}
	if p.m != nil {
		p.m.Watch(serveState(srv, p.eng, p.store, p.tools.upstreams, p.files))
		if err := serveMetricsAt(ctx, f.metricsAddr, p.m, log); err != nil {
			return nil, err
		}
	}
	return srv, nil
}

// how is how serveUntilDone serves p's server, as f says.
func (p *serveParts) how(f *serveFlags) serving {
	pol, store := p.pol, p.store
	return serving{
		warm: pol.Pool.Size > 0, httpAddr: f.httpAddr, drainTimeout: f.drainTimeout, metrics: p.m, sessions: httpSessions(f.httpAddr, store, p.m),
		pooled:     func() bool { return store.Current().Policy.Pool.Size > 0 },
		maxRequest: transport.RequestLimit{Bytes: pol.Sandbox.MaxRequestBytes, Setting: "sandbox.max_request_bytes"},
		principals: p.principals,
	}
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
	principals   *transport.Principals
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
				Metrics: metricsHandler(how.metrics), Sessions: how.sessions, Principals: how.principals,
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
