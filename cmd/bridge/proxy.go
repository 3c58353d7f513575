package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/bridge"
	"github.com/bridge-mcp/bridge/proxy"
)

// upstreamFlags are the flags that say where the upstream MCP servers are.
type upstreamFlags struct {
	configs     stringList
	proxyURL    string
	callTimeout time.Duration
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (u *upstreamFlags) register(fs *flag.FlagSet, withProxyURL bool) {
	fs.Var(&u.configs, "servers-config", "an MCP servers `FILE` (mcpServers or VS Code servers JSON); repeatable, later files win;\n"+
		"default: the Claude Desktop, Cursor and Claude Code files and ./.mcp.json (see docs/upstreams.md)")
	fs.DurationVar(&u.callTimeout, "call-timeout", 60*time.Second, "how long one upstream tool call may take")
	if withProxyURL {
		fs.StringVar(&u.proxyURL, "proxy-url", "", "use the MCP proxy at `URL` (served by 'bridge proxy --http') instead of\nstarting the upstream servers here (bearer token: $BRIDGE_PROXY_TOKEN)")
	}
}

func (u *upstreamFlags) check() error {
	if u.proxyURL != "" && len(u.configs) > 0 {
		return usagef("--proxy-url and --servers-config exclude each other: the remote proxy has its own servers")
	}
	if u.callTimeout <= 0 {
		return usagef("--call-timeout must be positive")
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
			return proxy.Config{}, fmt.Errorf("%w\n(fix the file, or mark the entry \"disabled\": true)", err)
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

func (u *upstreamFlags) proxyOptions(log zerolog.Logger) proxy.Options {
	return proxy.Options{CallTimeout: u.callTimeout, Version: version, Logger: log}
}

// upstreams opens what answers the sandbox's tool calls: a proxy in this
// process over an in-memory session, or a remote one. The remote one is
// dialled on first use, so serve starts even while the proxy is down.
// stop closes it all.
func (u *upstreamFlags) upstreams(ctx context.Context, e *env, selfURL string, log zerolog.Logger) (up bridge.Upstreams, stop func(), err error) {
	if u.proxyURL != "" {
		token := strings.TrimSpace(os.Getenv("BRIDGE_PROXY_TOKEN"))
		r := &remoteUpstreams{dial: func(ctx context.Context) (*proxy.Client, error) {
			return proxy.DialHTTP(ctx, u.proxyURL, token, version, log)
		}}
		return r, r.close, nil
	}
	cfg, err := u.loadServers(e, selfURL, log)
	if err != nil {
		return nil, nil, err
	}
	if len(cfg.Servers) == 0 {
		return nil, func() {}, nil
	}
	p := proxy.New(cfg, u.proxyOptions(log))
	c, err := p.Connect(ctx, log)
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); p.Close() }, nil
}

// remoteUpstreams dials a remote proxy on first use, and again after the
// session to it ended.
type remoteUpstreams struct {
	dial func(context.Context) (*proxy.Client, error)

	mu     sync.Mutex
	client *proxy.Client
}

func (r *remoteUpstreams) get(ctx context.Context) (*proxy.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil && !r.client.Closed() {
		return r.client, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := r.dial(dctx)
	if err != nil {
		return nil, &proxy.Error{Kind: proxy.KindUpstream, Message: "the MCP proxy is unreachable: " + err.Error()}
	}
	r.client = c
	return c, nil
}

func (r *remoteUpstreams) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil {
		_ = r.client.Close()
	}
}

func (r *remoteUpstreams) Servers(ctx context.Context) ([]proxy.ServerStatus, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Servers(ctx)
}

func (r *remoteUpstreams) Catalog(ctx context.Context) (*proxy.Catalog, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Catalog(ctx)
}

func (r *remoteUpstreams) Resolve(ctx context.Context, server, tool string) (proxy.ServerStatus, error) {
	c, err := r.get(ctx)
	if err != nil {
		return proxy.ServerStatus{}, err
	}
	return c.Resolve(ctx, server, tool)
}

func (r *remoteUpstreams) Call(ctx context.Context, runID, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Call(ctx, runID, server, tool, args)
}

func cmdProxy(ctx context.Context, e *env, args []string) (int, error) {
	fs := newFlagSet(e, "proxy", "--http ADDR [flags]", "Serves the MCP proxy on its own, so several bridges can share one set of upstream\n"+
		"servers: `bridge serve --proxy-url http://ADDR/mcp`. The proxy offers every upstream\n"+
		"tool as SERVER__TOOL, and the resource "+proxy.ServersURI+".")
	httpAddr := fs.String("http", "", "serve streamable HTTP at ADDR/mcp (e.g. 127.0.0.1:8809); beyond loopback a\nbearer token is required: $BRIDGE_PROXY_TOKEN, or one is generated and logged once")
	var uf upstreamFlags
	uf.register(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if fs.NArg() != 0 {
		return exitUsage, usagef("takes no arguments")
	}
	if *httpAddr == "" {
		return exitUsage, usagef("--http ADDR is required")
	}
	if err := uf.check(); err != nil {
		return exitUsage, err
	}
	log := e.log
	if os.Getenv("BRIDGE_LOG_LEVEL") == "" {
		log = log.Level(zerolog.InfoLevel)
	}
	cfg, err := uf.loadServers(e, "http://"+*httpAddr, log)
	if err != nil {
		return exitUsage, err
	}
	p := proxy.New(cfg, uf.proxyOptions(log))
	defer p.Close()
	err = bridge.ServeHTTP(ctx, p.Server(), bridge.HTTPOptions{
		Addr: *httpAddr, Token: strings.TrimSpace(os.Getenv("BRIDGE_PROXY_TOKEN")), Version: version,
		ShutdownTimeout: shutdownBudget * 3 / 5,
	}, log)
	if err != nil && !errors.Is(err, context.Canceled) {
		return exitBridge, err
	}
	return 0, nil
}
