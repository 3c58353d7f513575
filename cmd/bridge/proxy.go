package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge/toolhost"
	"github.com/bridge-mcp/bridge/bridge/transport"
	"github.com/bridge-mcp/bridge/internal/metrics"
	"github.com/bridge-mcp/bridge/internal/tracing"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/proxy"
)

// upstreamFlags are the flags that say where the upstream MCP servers are.
type upstreamFlags struct {
	configs  stringList
	proxyURL string
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (u *upstreamFlags) register(fs *flag.FlagSet, withProxyURL bool) {
	fs.Var(&u.configs, "servers-config", "an MCP servers `FILE` (mcpServers or VS Code servers JSON); repeatable, later files win;\n"+
		"default: the Claude Desktop, Cursor and Claude Code files and ./.mcp.json (see docs/upstreams.md)")
	if withProxyURL {
		fs.StringVar(&u.proxyURL, "proxy-url", "", "use the MCP proxy at `URL` (served by 'bridge proxy --http') instead of\nstarting the upstream servers here (bearer token: $BRIDGE_PROXY_TOKEN)")
	}
}

func (u *upstreamFlags) check() error {
	if u.proxyURL != "" && len(u.configs) > 0 {
		return usagef("--proxy-url and --servers-config exclude each other: the remote proxy has its own servers")
	}
	return nil
}

// loadServers reads the configured (or default) servers files. selfURL is
// the URL this bridge serves HTTP at, if it does, so that an entry pointing
// back at it is skipped.
func (u *upstreamFlags) loadServers(e *env, selfURL string, log zerolog.Logger) (proxy.Config, error) {
	paths, skipMissing := []string(u.configs), false
	if len(paths) == 0 {
		home, _ := os.UserHomeDir()
		paths, skipMissing = proxy.DefaultPaths(os.Getenv, home), true
	}
	self, _ := os.Executable()
	cfg, warnings, err := proxy.LoadFiles(paths, proxy.LoadOptions{
		SelfPath: self, SelfURL: selfURL, SkipMissing: skipMissing, Logger: log,
	})
	for _, w := range warnings {
		log.Warn().Str("file", w.File).Str("server", w.Server).Msg(w.Message)
	}
	if err != nil {
		if !skipMissing {
			var ce *proxy.ConfigError
			if errors.As(err, &ce) && ce.Server != "" {
				return proxy.Config{}, fmt.Errorf("%w\n(fix the entry, or mark it \"disabled\": true)", err)
			}
			return proxy.Config{}, err
		}
		// Files the user did not name belong to other tools: a broken
		// entry there leaves that server out, not the bridge down.
		log.Error().Err(err).Msg("servers config: the entries named are left out")
	}
	names := make([]string, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		names = append(names, s.Name)
	}
	log.Info().Strs("servers", names).Msg("upstream MCP servers configured")
	return cfg, nil
}

// proxyOptions are the options of a proxy in this process: store, if not
// nil, is the policy it applies (whose budgets.call_timeout then bounds
// each call); callTimeout bounds each call otherwise.
func proxyOptions(store *policy.Store, callTimeout time.Duration, m *metrics.Metrics, log zerolog.Logger) proxy.Options {
	return proxy.Options{CallTimeout: callTimeout, Version: versionString(), Logger: log, Policy: store, Metrics: m}
}

// upstreams opens what answers the sandbox's tool calls: a proxy in this
// process over an in-memory session, or a remote one. Either session is
// opened on first use and again if it ends, so serve starts even while a
// remote proxy is down. stop closes it all. p is the proxy in this
// process, if there is one; m, if set, counts its calls and tp traces them.
func (u *upstreamFlags) upstreams(e *env, selfURL string, store *policy.Store, m *metrics.Metrics, tp *tracing.Provider, log zerolog.Logger) (up toolhost.Upstreams, p *proxy.Proxy, stop func(), err error) {
	if u.proxyURL != "" {
		token := strings.TrimSpace(os.Getenv("BRIDGE_PROXY_TOKEN"))
		r := proxy.NewRedialing(func(ctx context.Context) (*proxy.Client, error) {
			return proxy.DialHTTP(ctx, u.proxyURL, token, versionString(), log)
		})
		// The human is asked through the run, which a proxy in another
		// process cannot reach: say so now, not at the first ask.
		log.Info().Str("proxy", proxy.RedactURL(u.proxyURL)).Msg("the MCP proxy is remote: calls its policy would ask the user about get its tools.ask_fallback (asking needs the proxy in this process)")
		return r, nil, func() { _ = r.Close() }, nil
	}
	cfg, err := u.loadServers(e, selfURL, log)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(cfg.Servers) == 0 {
		return nil, nil, func() {}, nil
	}
	opts := proxyOptions(store, store.Current().Policy.Budgets.CallTimeout, m, log)
	if opts.Lock, err = toolsLock(store.Current().Policy); err != nil {
		return nil, nil, nil, err
	}
	opts.Tracer = tp.Tracer(scopeProxy)
	p = proxy.New(cfg, opts)
	r := proxy.NewRedialing(func(ctx context.Context) (*proxy.Client, error) {
		return p.Connect(ctx, log)
	})
	return r, p, func() { _ = r.Close(); p.Close() }, nil
}

func cmdProxy(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "proxy", "--http ADDR [flags]", "Serves the MCP proxy on its own, so several bridges can share one set of upstream\n"+
		"servers: `bridge serve --proxy-url http://ADDR/mcp`. The proxy offers every upstream\n"+
		"tool as SERVER__TOOL, and the resource "+proxy.ServersURI+".")
	httpAddr := fs.String("http", "", "serve streamable HTTP at ADDR/mcp (e.g. 127.0.0.1:8809); beyond loopback a\nbearer token is required: $BRIDGE_PROXY_TOKEN, or one is generated and logged once")
	var uf upstreamFlags
	uf.register(fs, false)
	var sf settingFlags
	sf.callTimeout(fs)
	drainValue := drainFlag(fs, "the calls in flight")
	policyPath := fs.String("policy", "", "the policy `FILE` whose tools, budgets, audit and http sections apply (docs/policy.md);\ndefault "+defaultPolicyPath()+" if it exists; reloaded when it changes and on SIGHUP;\n--call-timeout may only tighten it")
	metricsAddr := metricsFlag(fs)
	var tf tracingFlags
	tf.register(fs)
	args, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage, err
	}
	if len(args) != 0 {
		return exitUsage, usagef("takes no arguments, got %s", quoteArgs(args))
	}
	if *httpAddr == "" {
		return exitUsage, usagef("--http ADDR is required")
	}
	if err := uf.check(); err != nil {
		return exitUsage, err
	}
	drainTimeout, err := drainTimeoutOf(fs, *drainValue, false)
	if err != nil {
		return exitUsage, err
	}
	log := e.log
	if os.Getenv("BRIDGE_LOG_LEVEL") == "" {
		log = log.Level(zerolog.InfoLevel)
	}
	pol, polPath, err := loadPolicy(e, *policyPath, sf.set, nil)
	if err != nil {
		return exitUsage, err
	}
	store, err := openStore(ctx, pol, polPath, adjuster(sf.set, nil), log)
	if err != nil {
		return exitUsage, err
	}
	defer store.Close()
	cfg, err := uf.loadServers(e, "http://"+*httpAddr, log)
	if err != nil {
		return exitUsage, err
	}
	m := metrics.New(versionString())
	opts := proxyOptions(store, pol.Budgets.CallTimeout, m, log)
	if opts.Lock, err = toolsLock(pol); err != nil {
		return exitUsage, err
	}
	tp, err := tf.open(ctx, "bridge-proxy", log)
	if err != nil {
		return exitUsage, err
	}
	defer func() {
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("tracing")
		}
	}()
	opts.Tracer = tp.Tracer(scopeProxy)
	p := proxy.New(cfg, opts)
	defer p.Close()
	m.Watch(metrics.State{Policy: policyState(store), Upstreams: p.UpstreamStates})
	if err := serveMetricsAt(ctx, *metricsAddr, m, log); err != nil {
		return exitUsage, err
	}
	again := e.secondSignal()
	// The transport ends when the shutdown begins, not at the signal:
	// while draining it goes on answering the sessions that exist.
	tctx, stopTransport := context.WithCancel(context.WithoutCancel(ctx))
	defer stopTransport()
	drain := transport.NewDrain()
	served := make(chan error, 1)
	go func() {
		served <- transport.ServeHTTP(tctx, p.Server(), transport.HTTPOptions{
			Addr: *httpAddr, Token: strings.TrimSpace(os.Getenv("BRIDGE_PROXY_TOKEN")), TokenEnv: "BRIDGE_PROXY_TOKEN", Version: versionString(),
			ShutdownTimeout: shutdownBudget * 3 / 5,
			Drain:           drain, Readiness: proxyReadiness(p.Statuses, log), Metrics: m.Handler(),
			Sessions: httpSessions(*httpAddr, store, m),
		}, log)
	}()
	select {
	case err = <-served:
	case <-ctx.Done():
		if drainTimeout > 0 {
			drainCalls(drain, drainTimeout, again, log)
		}
		stopTransport()
		err = <-served
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return exitBridge, err
	}
	log.Info().Msg("stopped")
	return 0, nil
}

// proxyQuiet is how long `bridge proxy` waits, draining, with no call in
// flight before it takes the runs that made calls to be over: it cannot
// see when a bridge's run ends.
const proxyQuiet = time.Second

// drainCalls drains the proxy after a signal: no new session (drain), the
// sessions that exist still served (their runs are in flight on their
// bridges), until no call was in flight for proxyQuiet, timeout passes or
// again is closed (a second signal).
func drainCalls(drain *transport.Drain, timeout time.Duration, again <-chan struct{}, log zerolog.Logger) {
	drain.Start()
	log.Info().Int64("in_flight", drain.InFlight()).Str("drain_timeout", timeout.String()).
		Msg("signal: draining (no new session; the calls in flight finish); a second signal stops at once")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		select {
		case <-again:
			log.Warn().Msg("second signal: shutting down")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := drain.Quiet(ctx, proxyQuiet); err != nil {
		log.Warn().Int64("in_flight", drain.InFlight()).Msg("drain ended before the calls did; shutting down")
		return
	}
	log.Info().Msg("drained: no call in flight; shutting down")
}
