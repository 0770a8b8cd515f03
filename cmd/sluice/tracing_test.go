package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/server/rls"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// TestTracing: with tracing on, each RLS call is one span that continues
// the caller's W3C trace context and carries the domain and the decision;
// a call without context starts a trace of its own.
func TestTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := newTracerProvider(sdktrace.NewSimpleSpanProcessor(exp), "sluice-test", 1)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	snap, err := rules.LoadDir(filepath.Join(repoRoot, "examples/rules"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	eng, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(tracingOptions(tp)...)
	rls.New(eng, rls.Options{}).Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "1.2.3.4")}}

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if _, err := client.ShouldRateLimit(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	// A server span ends when the stats handler sees the call end, which
	// may be after the client has its answer: wait for both, and tell them
	// apart by trace, not by the order they ended in.
	spans := exp.GetSpans()
	for deadline := time.Now().Add(time.Minute); len(spans) < 2 && time.Now().Before(deadline); spans = exp.GetSpans() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (one per call)", len(spans))
	}
	first, second := spans[0], spans[1]
	if second.SpanContext.TraceID().String() == traceID {
		first, second = second, first
	}
	if got := first.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("no span continues the caller's trace %s (got %s and %s)", traceID, got, second.SpanContext.TraceID())
	}
	if got := first.Parent.SpanID().String(); got != parentID || !first.Parent.IsRemote() {
		t.Errorf("span parent %s (remote %v), want the caller's span %s", got, first.Parent.IsRemote(), parentID)
	}
	attrs := map[string]string{}
	for _, a := range first.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["ratelimit.domain"] != "edge" || attrs["ratelimit.overall_code"] != "OK" {
		t.Errorf("span attributes %v, want ratelimit.domain=edge and ratelimit.overall_code=OK", attrs)
	}
	if second.SpanContext.TraceID().String() == traceID || second.Parent.IsValid() {
		t.Errorf("a call without trace context joined trace %s (parent %v), want a new root span", second.SpanContext.TraceID(), second.Parent)
	}
}

// TestTracingCollectorDown: serve with --tracing and a collector that is
// not there still answers checks (spans are lost, never checks).
func TestTracingCollectorDown(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Envoy.Tracing = tracingConfig{On: true, ServiceName: "sluice", SamplingRate: 1, Endpoint: "127.0.0.1:1", Insecure: true}
	})
	if err := grpcCheck(t, ts.grpcAddr(), insecure.NewCredentials()); err != nil {
		t.Errorf("check with tracing on and no collector: %v", err)
	}
	bad := defaultServeConfig()
	bad.Rules.Dir = filepath.Join(repoRoot, "examples/rules")
	bad.Envoy.Tracing.SamplingRate = 1.5
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--tracing-sampling-rate: 1.5, want a number from 0 to 1") {
		t.Errorf("Validate = %v, want the sampling rate refused", err)
	}
}
