package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// tracingConfig turns on OpenTelemetry tracing of RLS calls (envoyproxy/
// ratelimit's TRACING_*): one span per ShouldRateLimit, continuing the
// trace context the caller sent (W3C traceparent), exported over OTLP/gRPC.
// Off by default; when off, no handler is installed and calls cost nothing
// more.
type tracingConfig struct {
	On bool
	// ServiceName is the resource's service.name.
	ServiceName string
	// SamplingRate is the fraction of new traces sampled, in [0, 1]; a
	// call continuing a trace follows its parent's decision.
	SamplingRate float64
	// Endpoint is the OTLP/gRPC collector's host:port; "" means the SDK's
	// default (OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317).
	Endpoint string
	// Insecure sends spans to the collector in plain text.
	Insecure bool
}

func (c *tracingConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.On, "tracing", c.On, "trace RLS calls with OpenTelemetry (a span per check, continuing the caller's trace), exported over OTLP/gRPC")
	fs.StringVar(&c.ServiceName, "tracing-service-name", c.ServiceName, "service.name of the spans")
	fs.Float64Var(&c.SamplingRate, "tracing-sampling-rate", c.SamplingRate, "fraction of new traces sampled, 0 to 1 (a call in a trace follows its parent)")
	fs.StringVar(&c.Endpoint, "tracing-endpoint", c.Endpoint, "OTLP/gRPC collector host:port (default: OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317)")
	fs.BoolVar(&c.Insecure, "tracing-insecure", c.Insecure, "send spans to the collector without TLS")
}

func (c tracingConfig) validate() []error {
	var errs []error
	if !(c.SamplingRate >= 0 && c.SamplingRate <= 1) {
		errs = append(errs, fmt.Errorf("--tracing-sampling-rate: %v, want a number from 0 to 1", c.SamplingRate))
	}
	if c.On && c.ServiceName == "" {
		errs = append(errs, errors.New("--tracing-service-name: empty"))
	}
	return errs
}

// provider builds the tracer provider exporting over OTLP/gRPC. The
// exporter connects lazily: a collector that is down loses spans, never
// checks.
func (c tracingConfig) provider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	var opts []otlptracegrpc.Option
	if c.Endpoint != "" {
		opts = append(opts, otlptracegrpc.WithEndpoint(c.Endpoint))
	}
	if c.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("--tracing: OTLP exporter: %w", err)
	}
	return newTracerProvider(sdktrace.NewBatchSpanProcessor(exp), c.ServiceName, c.SamplingRate), nil
}

func newTracerProvider(sp sdktrace.SpanProcessor, service string, rate float64) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(rate))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	)
}

// tracingOptions are the gRPC server options that trace with tp: a span
// per call (continuing W3C trace context from the call's metadata), with
// the RLS domain and overall code as attributes.
func tracingOptions(tp trace.TracerProvider) []grpc.ServerOption {
	h := otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))
	return []grpc.ServerOption{grpc.StatsHandler(h), grpc.ChainUnaryInterceptor(rlsSpanAttributes)}
}

// rlsSpanAttributes adds the domain and the decision of a ShouldRateLimit
// call to its span.
func rlsSpanAttributes(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return resp, err
	}
	if r, ok := req.(*rlsv3.RateLimitRequest); ok {
		span.SetAttributes(attribute.String("ratelimit.domain", r.GetDomain()), attribute.Int("ratelimit.descriptors", len(r.GetDescriptors())))
	}
	if r, ok := resp.(*rlsv3.RateLimitResponse); ok {
		span.SetAttributes(attribute.String("ratelimit.overall_code", r.GetOverallCode().String()))
	}
	return resp, err
}
