package rls

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

const benchRules = `domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

// benchEngine is a real engine over the memory store.
func benchEngine(b *testing.B) *service.Engine {
	b.Helper()
	snap, err := rules.Parse("bench.yaml", []byte(benchRules), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	b.Cleanup(func() { st.Close() })
	e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// serve runs g on a loopback port and returns a client connection to it.
func serve(b *testing.B, g *grpc.Server) *grpc.ClientConn {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

func benchRequests(n int) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			desc("remote_address", fmt.Sprintf("10.0.%d.%d", i>>8, i&255)),
		}}
	}
	return reqs
}

// cpuTime is the process's user+system CPU time. Wall time per op on this
// shared 2-core machine includes waiting for a core; CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op (client and server together: both run in this
// process) from start to now.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkHealthCheckBaseline is the floor: grpc-go's own health server,
// driven the same way as BenchmarkShouldRateLimit.
func BenchmarkHealthCheckBaseline(b *testing.B) {
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	client := healthpb.NewHealthClient(serve(b, g))
	b.ReportAllocs()
	b.SetParallelism(25) // 50 callers on 2 CPUs, as the load harness
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkShouldRateLimit: ShouldRateLimit over loopback gRPC, one
// descriptor, 10^4 distinct values, real engine and memory store, with the
// server options sluice serve uses (ServerOptions); /default-options is
// grpc-go's defaults, for comparison.
func BenchmarkShouldRateLimit(b *testing.B) {
	b.Run("server-options", func(b *testing.B) { benchShouldRateLimit(b, ServerOptions()...) })
	b.Run("default-options", func(b *testing.B) { benchShouldRateLimit(b) })
}

func benchShouldRateLimit(b *testing.B, opts ...grpc.ServerOption) {
	g := grpc.NewServer(opts...)
	New(benchEngine(b), Options{}).Register(g)
	client := rlsv3.NewRateLimitServiceClient(serve(b, g))
	reqs := benchRequests(10_000)
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(25) // 50 callers on 2 CPUs, as the load harness
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.ShouldRateLimit(context.Background(), reqs[next.Add(1)%int64(len(reqs))])
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				b.Errorf("ShouldRateLimit = %v, %v; want OK", resp.GetOverallCode(), err)
				return
			}
		}
	})
}

// BenchmarkHandler: the server's own work per call, without the transport:
// convert, decide (memory store), render.
func BenchmarkHandler(b *testing.B) {
	s := New(benchEngine(b), Options{})
	reqs := benchRequests(10_000)
	ctx := context.Background()
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for i := 0; b.Loop(); i++ {
		if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// BenchmarkCodec: a one-descriptor request decoded and its response
// encoded, by hand (the codec of ServerOptions) and by the protobuf
// library (grpc-go's default codec).
func BenchmarkCodec(b *testing.B) {
	req, err := proto.Marshal(benchRequests(1)[0])
	if err != nil {
		b.Fatal(err)
	}
	resp := response(service.Response{OverallCode: service.CodeOK, Statuses: []service.Status{{
		Code: service.CodeOK, CurrentLimit: &service.CurrentLimit{Name: "bench", RequestsPerUnit: 1000, Unit: "second", Window: time.Second},
		Result: sluice.Result{Allowed: true, Limit: 1000, Remaining: 999, ResetAfter: 300 * time.Millisecond},
	}}}, false)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		raw := string(req)
		for b.Loop() {
			d := decoders.Get().(*decoder)
			if !d.decode(raw) {
				b.Fatal("decode declined")
			}
			d.release()
			if _, ok := appendResponse(nil, resp); !ok {
				b.Fatal("appendResponse declined")
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m rlsv3.RateLimitRequest
			if err := proto.Unmarshal(req, &m); err != nil {
				b.Fatal(err)
			}
			if _, err := proto.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkWireHandler: what the server does per call between grpc-go's
// transport and it, with ServerOptions' codec: the request's bytes kept,
// decoded by hand, converted, decided (memory store, 10^4 keys), rendered
// and encoded. scripts/instr-transport.sh counts it with the transport.
func BenchmarkWireHandler(b *testing.B) {
	s := New(benchEngine(b), Options{})
	reqs := benchRequests(10_000)
	raw := make([]mem.BufferSlice, len(reqs))
	for i, r := range reqs {
		m, err := proto.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		raw[i] = mem.BufferSlice{mem.SliceBuffer(m)}
	}
	c := newCodec()
	ctx := context.Background()
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for i := 0; b.Loop(); i++ {
		data := raw[i%len(raw)]
		out, err := handleShouldRateLimit(s, ctx, func(v any) error { return c.Unmarshal(data, v) }, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Marshal(out); err != nil {
			b.Fatal(err)
		}
	}
}
