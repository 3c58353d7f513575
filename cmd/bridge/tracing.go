package main

import (
	"context"
	"flag"
	"os"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/tracing"
)

// tracingFlags turn OpenTelemetry traces on (docs/tracing.md).
type tracingFlags struct {
	endpoint string
}

func (t *tracingFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.endpoint, "otlp-endpoint", "", "export OpenTelemetry traces over OTLP to the collector at `URL` (e.g. http://127.0.0.1:4318;\n"+
		"as $OTEL_EXPORTER_OTLP_ENDPOINT, which it overrides). Without it, traces are on when\n"+
		"$OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT is set or $OTEL_TRACES_EXPORTER=otlp,\n"+
		"off when $OTEL_SDK_DISABLED=true or $OTEL_TRACES_EXPORTER=none; also honoured: $OTEL_EXPORTER_OTLP_PROTOCOL\n"+
		"(http/protobuf or grpc), $OTEL_EXPORTER_OTLP_HEADERS, $OTEL_SERVICE_NAME, $OTEL_RESOURCE_ATTRIBUTES,\n"+
		"$OTEL_TRACES_SAMPLER(_ARG), $OTEL_BSP_* (docs/tracing.md)")
}

// open returns the provider the flag and the environment say: service is
// the default service.name. Its Shutdown flushes what is queued.
func (t *tracingFlags) open(ctx context.Context, service string, log zerolog.Logger) (*tracing.Provider, error) {
	tp, err := tracing.New(ctx, tracing.Settings{Endpoint: t.endpoint, Service: service, Version: versionString()}, os.Getenv, log)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if tp.On() {
		log.Info().Str("exporter", tp.Describe).Msg("tracing: spans are exported")
	}
	return tp, nil
}

// Instrumentation scopes of the spans.
const (
	scopeBridge   = "github.com/bridge-mcp/bridge/bridge"
	scopeToolhost = "github.com/bridge-mcp/bridge/bridge/toolhost"
	scopeProxy    = "github.com/bridge-mcp/bridge/proxy"
)
