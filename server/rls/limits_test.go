package rls

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// limitCases are requests each just over one limit of testLimits, and the
// message naming it.
var testLimits = service.RequestBounds{MaxKeyBytes: 8, MaxValueBytes: 16, MaxDescriptors: 3, MaxEntries: 2}

func limitCases() []struct {
	name string
	req  *rlsv3.RateLimitRequest
	want string
} {
	many := func(n int) []*ratelimitv3.RateLimitDescriptor {
		ds := make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc("k", "v")
		}
		return ds
	}
	one := func(d *ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{desc("k", "v"), d}
	}
	return []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"domain", &rlsv3.RateLimitRequest{Domain: "123456789", Descriptors: many(1)}, "domain: 9 bytes exceeds the limit max-key-bytes=8"},
		{"descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many(4)}, "descriptors: 4 exceeds the limit max-descriptors=3"},
		{"entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: one(desc("a", "1", "b", "2", "c", "3"))}, "descriptors[1].entries: 3 exceeds the limit max-entries=2"},
		{"key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: one(desc("a", "1", "123456789", "2"))}, "descriptors[1].entries[1].key: 9 bytes exceeds the limit max-key-bytes=8"},
		{"value", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: one(desc("a", strings.Repeat("v", 17)))}, "descriptors[1].entries[0].value: 17 bytes exceeds the limit max-value-bytes=16"},
	}
}

func TestFromProtoLimits(t *testing.T) {
	for _, tt := range limitCases() {
		_, err := FromProtoLimits(tt.req, testLimits)
		var le *service.LimitError
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &le) {
			t.Errorf("%s: FromProtoLimits error = %v, want ErrInvalidRequest and a LimitError containing %q", tt.name, err, tt.want)
		}
	}
	atLimit := &rlsv3.RateLimitRequest{Domain: "12345678", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("12345678", strings.Repeat("v", 16), "b", "2"), desc("k", "v"), desc("k", "v")}}
	if _, err := FromProtoLimits(atLimit, testLimits); err != nil {
		t.Errorf("FromProtoLimits of a request at every limit = %v, want accepted", err)
	}
	big := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", strings.Repeat("v", 4097))}}
	if _, err := FromProto(big); err == nil || !strings.Contains(err.Error(), "max-value-bytes=4096") {
		t.Errorf("FromProto of a 4097-byte value = %v, want the default max-value-bytes=4096", err)
	}
}

// Over gRPC: each limit is InvalidArgument naming it, and no rule is asked.
func TestShouldRateLimitLimits(t *testing.T) {
	snap, err := rules.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	defer st.Close()
	cfg := service.DefaultConfig()
	cfg.RequestBounds = testLimits
	eng, err := service.New(cfg, service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions()...) // as sluice serve runs it
	New(eng, Options{RequestBounds: testLimits}).Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	for _, tt := range limitCases() {
		_, err := client.ShouldRateLimit(context.Background(), tt.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tt.want) {
			t.Errorf("%s: ShouldRateLimit error = %v, want InvalidArgument containing %q", tt.name, err, tt.want)
		}
	}
	if keys := st.Stats().Keys; keys != 0 {
		t.Errorf("store holds %d keys after refused requests, want 0", keys)
	}
	resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit within limits = %v, %v, want OK", resp, err)
	}
}

// BenchmarkRefuseOversized is the worst a request can cost before it is
// refused: a message just under the gRPC size limit (64 KiB, 256 KiB as
// `sluice serve` sets it by default, 1 MiB) packed with the smallest
// descriptors, decoded by protobuf and then refused for its descriptor
// count.
func BenchmarkRefuseOversized(b *testing.B) {
	one := proto.Size(&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "1")}})
	for _, size := range []int{64 << 10, 256 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			req := &rlsv3.RateLimitRequest{Domain: "edge"}
			for range (size - 16) / one {
				req.Descriptors = append(req.Descriptors, desc("k", "1"))
			}
			wire, err := proto.Marshal(req)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				var got rlsv3.RateLimitRequest
				if err := proto.Unmarshal(wire, &got); err != nil {
					b.Fatal(err)
				}
				if _, err := FromProto(&got); err == nil {
					b.Fatal("accepted")
				}
			}
			b.ReportMetric(float64(len(req.Descriptors)), "descriptors")
		})
	}
}
