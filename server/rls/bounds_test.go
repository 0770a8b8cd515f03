package rls

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// maxRequest is `sluice serve`'s default --max-request-bytes, which bounds
// a gRPC message (grpc.MaxRecvMsgSize) and a call's metadata
// (grpc.MaxHeaderListSize).
const maxRequest = 256 << 10

// fillDescriptors returns a request of descriptors d(i), as many as fit in
// maxRequest bytes on the wire, at most max.
func fillDescriptors(max int, d func(i int) *ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge"}
	size := proto.Size(req)
	for i := range max {
		di := d(i)
		size += protowire.SizeTag(2) + protowire.SizeBytes(proto.Size(di))
		if size > maxRequest {
			break
		}
		req.Descriptors = append(req.Descriptors, di)
	}
	return req
}

// TestWorstRequestMemory: over real gRPC on loopback, with the options
// `sluice serve` runs with (ServerOptions, a 256 KiB message and header
// list bound), the worst requests the bounds allow — the most descriptors
// (refused for their count), the most entries of the longest keys and
// values (decided), and the largest metadata, one field or thousands —
// allocate at most perByte bytes per byte sent, client and server together
// (TotalAlloc over many calls, divided). Metadata past the bound is
// refused without a call. (Before the decoder kept at most the descriptors
// and entries the limits allow, 256 KiB of empty descriptors allocated
// 32 MB a call: 124 bytes a byte.) The allocations are the whole
// process's: the test stays serial, so it runs alone (in a process of its
// own, proctest.Alone, it took longer than the parallel tests it would
// overlap).
func TestWorstRequestMemory(t *testing.T) {
	const perByte = 8
	const calls = 40
	snap, err := rules.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	defer st.Close()
	eng, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(append(ServerOptions(), grpc.MaxRecvMsgSize(maxRequest), grpc.MaxHeaderListSize(maxRequest))...)
	New(eng, Options{}).Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(1<<30)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	small := marshal(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}})
	long := strings.Repeat("v", service.DefaultMaxValueBytes-8)
	// Metadata fields each count their name, value and 32 bytes
	// (RFC 7541 §4.1) towards the bound; grpc-go's client adds a few of
	// its own.
	manyMD := metadata.MD{}
	for i := range (maxRequest - 1024) / (32 + 24) {
		manyMD.Append(fmt.Sprintf("x-h%05d", i), fmt.Sprintf("value-%09d", i))
	}
	oneMD := metadata.Pairs("x-big", strings.Repeat("v", maxRequest-1024))
	overMD := metadata.Pairs("x-big", strings.Repeat("v", maxRequest+1))
	cases := []struct {
		name string
		req  []byte
		md   metadata.MD
		code codes.Code
	}{
		{"most empty descriptors", marshal(t, fillDescriptors(1<<20, func(int) *ratelimitv3.RateLimitDescriptor { return &ratelimitv3.RateLimitDescriptor{} })), nil, codes.InvalidArgument},
		{"most one-entry descriptors", marshal(t, fillDescriptors(1<<20, func(int) *ratelimitv3.RateLimitDescriptor { return desc("k", "1") })), nil, codes.InvalidArgument},
		{"64 descriptors of 16 entries", marshal(t, fillDescriptors(service.DefaultMaxDescriptors, func(i int) *ratelimitv3.RateLimitDescriptor {
			kv := make([]string, 0, 2*service.DefaultMaxEntries)
			for j := range service.DefaultMaxEntries {
				kv = append(kv, fmt.Sprintf("k%d", j)+strings.Repeat("k", 60), fmt.Sprintf("%d-%d-", i, j)+strings.Repeat("v", 180))
			}
			return desc(kv...)
		})), nil, codes.OK},
		{"longest values", marshal(t, fillDescriptors(service.DefaultMaxDescriptors, func(i int) *ratelimitv3.RateLimitDescriptor {
			return desc("k", fmt.Sprintf("%06d", i)+long)
		})), nil, codes.OK},
		{"longest keys", marshal(t, fillDescriptors(service.DefaultMaxDescriptors, func(i int) *ratelimitv3.RateLimitDescriptor {
			return desc(fmt.Sprintf("%06d", i)+strings.Repeat("k", service.DefaultMaxKeyBytes-6), long)
		})), nil, codes.OK},
		{"thousands of metadata fields", small, manyMD, codes.OK},
		{"one metadata field at the bound", small, oneMD, codes.OK},
		// grpc-go's client refuses it itself, told the bound in the
		// server's SETTINGS_MAX_HEADER_LIST_SIZE.
		{"metadata over the bound", small, overMD, codes.Internal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.NewOutgoingContext(context.Background(), tc.md)
			call := func() error {
				var out []byte
				return conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &tc.req, &out)
			}
			err := call()
			if status.Code(err) != tc.code {
				t.Fatalf("ShouldRateLimit: %v, want %v", err, tc.code)
			}
			mdBytes := 0
			for k, vs := range tc.md {
				for _, v := range vs {
					mdBytes += len(k) + len(v) + 32
				}
			}
			sent := len(tc.req) + mdBytes
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range calls {
				if err := call(); status.Code(err) != tc.code {
					t.Fatalf("ShouldRateLimit: %v, want %v", err, tc.code)
				}
			}
			runtime.ReadMemStats(&after)
			got := (after.TotalAlloc - before.TotalAlloc) / calls
			t.Logf("%d bytes sent (%d of message, %d of metadata): %d bytes allocated a call (%.1f a byte); %v", sent, len(tc.req), mdBytes, got, float64(got)/float64(sent), err)
			if budget := uint64(perByte * sent); got > budget {
				t.Errorf("a call of %d bytes allocated %d bytes, want at most %d (%d a byte)", sent, got, budget, perByte)
			}
		})
	}
}
