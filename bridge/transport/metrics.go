package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// MetricsOptions configure ServeMetrics.
type MetricsOptions struct {
	// Addr is the TCP address to listen on, host:port (port 0: a free one;
	// Ready learns which).
	Addr string
	// Token is the bearer token a scraper must send; when empty, a
	// loopback address needs none and any other gets a random token,
	// logged once (as for /mcp). TokenEnv names where it comes from.
	Token, TokenEnv string
	Ready           func(addr net.Addr)
}

// ServeMetrics serves h at /metrics on its own address until ctx ends:
// what `--metrics-addr` gives a bridge that serves MCP over stdio, and the
// proxy. It is behind [Guard], as every endpoint of the bridge. It returns once it listens (or could not); the server stops when
// ctx ends.
func ServeMetrics(ctx context.Context, h http.Handler, opts MetricsOptions, log zerolog.Logger) error {
	if err := checkToken(opts.Token); err != nil {
		return err
	}
	if opts.TokenEnv == "" {
		opts.TokenEnv = "BRIDGE_METRICS_TOKEN"
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr: listening on %s: %w", opts.Addr, err)
	}
	token, err := bearerToken(HTTPOptions{Token: opts.Token, TokenEnv: opts.TokenEnv}, ln.Addr(), log)
	if err != nil {
		ln.Close()
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", bearerAuth(token)(getOnly(h)))
	hs := NewServer(mux, log)
	hs.WriteTimeout = 30 * time.Second
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("serving /metrics")
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	log.Info().Str("metrics", "http://"+ln.Addr().String()+"/metrics").Bool("auth", token != "").Msg("serving metrics")
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}
	return nil
}
