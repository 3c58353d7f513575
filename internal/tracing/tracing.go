// Package tracing sets up OpenTelemetry traces for `bridge serve` and
// `bridge proxy`: a TracerProvider exporting OTLP (over HTTP or gRPC) in
// batches when the standard OTEL_* environment or --otlp-endpoint turns it
// on, a no-op one otherwise, and the W3C trace context carried in an MCP
// request's _meta (carrier.go). Nothing here is global: the provider is
// passed to the parts that trace (docs/tracing.md).
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ShutdownTimeout bounds flushing the spans still queued at exit.
const ShutdownTimeout = 2 * time.Second

// Settings are what the command line says of tracing.
type Settings struct {
	// Endpoint, from --otlp-endpoint, turns tracing on and is the
	// collector's base URL (as OTEL_EXPORTER_OTLP_ENDPOINT, which it
	// overrides): http://HOST:4318 for http/protobuf, /v1/traces added;
	// http://HOST:4317 for grpc.
	Endpoint string
	// Service is service.name unless OTEL_SERVICE_NAME (or
	// OTEL_RESOURCE_ATTRIBUTES) names one: "bridge", "bridge-proxy".
	Service string
	// Version is service.version.
	Version string
}

// Provider is the process's TracerProvider: exporting, or a no-op one.
type Provider struct {
	tp  trace.TracerProvider
	sdk *sdktrace.TracerProvider // nil when off
	// Describe says where spans go ("" when off), for the start-up log.
	Describe string
}

// off is a Provider that records nothing.
func off() *Provider { return &Provider{tp: noop.NewTracerProvider()} }

// New returns the Provider of s and the environment, read with getenv
// (os.Getenv). Tracing is on when --otlp-endpoint is given, or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set,
// or OTEL_TRACES_EXPORTER is otlp; it is off when OTEL_SDK_DISABLED is
// true or OTEL_TRACES_EXPORTER is none, whatever else is set. The
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default) or grpc. The
// exporters read the rest of their OTEL_EXPORTER_OTLP_* settings
// (headers, timeout, TLS), the SDK OTEL_TRACES_SAMPLER(_ARG) and
// OTEL_BSP_*, the resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
// Nothing is sent before the first span ends. log gets export failures.
func New(ctx context.Context, s Settings, getenv func(string) string, log zerolog.Logger) (*Provider, error) {
	on, err := enabled(s, getenv)
	if err != nil || !on {
		return off(), err
	}
	proto := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	var exp sdktrace.SpanExporter
	switch proto {
	case "", "http/protobuf":
		proto = "http/protobuf"
		var opts []otlptracehttp.Option
		if s.Endpoint != "" {
			u, err := url.Parse(s.Endpoint)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				return off(), fmt.Errorf("--otlp-endpoint %q: want a URL such as http://127.0.0.1:4318", s.Endpoint)
			}
			u.Path = path.Join("/", u.Path, "v1/traces")
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		if s.Endpoint != "" {
			u, err := url.Parse(s.Endpoint)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				return off(), fmt.Errorf("--otlp-endpoint %q: want a URL such as http://127.0.0.1:4317", s.Endpoint)
			}
			opts = append(opts, otlptracegrpc.WithEndpointURL(s.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		return off(), fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: the bridge exports traces with http/protobuf or grpc", proto)
	}
	if err != nil {
		return off(), fmt.Errorf("tracing: %w", err)
	}
	service := s.Service
	if service == "" {
		service = "bridge"
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES come last: they win.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", s.Version)),
		resource.WithFromEnv())
	if err != nil && res == nil {
		return off(), fmt.Errorf("tracing: %w", err)
	}
	// Export failures go to the log (stderr), never to stdout. The SDK has
	// one error handler per process; only this Provider sets it.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Err(err).Msg("tracing: exporting spans failed")
	}))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{tp: sdk, sdk: sdk, Describe: "OTLP " + proto}, nil
}

// enabled applies the rule New documents.
func enabled(s Settings, getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exporter := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exporter {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
	default:
		// Stdout is the protocol: console is not an option, and others
		// are not built in.
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER %q: the bridge exports traces with otlp only (or none)", exporter)
	}
	return s.Endpoint != "" || firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != "", nil
}

func firstSet(getenv func(string) string, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// On reports whether spans are exported.
func (p *Provider) On() bool { return p != nil && p.sdk != nil }

// TracerProvider is the provider to take tracers from: a no-op one when
// off (or p is nil).
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return noop.NewTracerProvider()
	}
	return p.tp
}

// Tracer is the provider's tracer of the named part of the bridge.
func (p *Provider) Tracer(name string) trace.Tracer {
	return p.TracerProvider().Tracer(name)
}

// Shutdown exports the spans still queued, within ShutdownTimeout (or
// ctx), and stops exporting.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.On() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans at exit: %w", err)
	}
	return nil
}
