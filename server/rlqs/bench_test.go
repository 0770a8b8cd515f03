package rlqs

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkFirstAssignment: the time a new Envoy waits for its first
// assignment, over real gRPC on loopback: open a stream, send the report a
// new bucket triggers, receive the answer. "leased" buckets match a
// fixed-window rule (one lease from the store: the memory store, or a real
// redis-server); "unmatched" ones match no rule (no store call), the
// baseline run beside it.
func BenchmarkFirstAssignment(b *testing.B) {
	const yaml = `
domain: edge
descriptors:
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 60000}
`
	for _, kind := range simStores {
		for _, bucket := range []string{"unmatched", "leased"} {
			b.Run(kind+"/"+bucket, func(b *testing.B) {
				st := newSimStore(b, kind, nil)
				eng, src := simEngineOn(b, st, yaml)
				srv, err := New(eng, src, Options{Allotter: st, Unmatched: DenyUnmatched})
				if err != nil {
					b.Fatal(err)
				}
				g := grpc.NewServer()
				srv.Register(g)
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				go func() { _ = g.Serve(ln) }()
				defer func() { srv.Shutdown(); g.Stop() }()
				conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				client := rlqspb.NewRateLimitQuotaServiceClient(conn)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					id := map[string]string{"tenant": fmt.Sprint("t", i), "route": "api"}
					if bucket == "unmatched" {
						id = map[string]string{"nobody": fmt.Sprint(i)}
					}
					stream, err := client.StreamRateLimitQuotas(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(id, 0, 1)}}); err != nil {
						b.Fatal(err)
					}
					resp, err := stream.Recv()
					if err != nil {
						b.Fatal(err)
					}
					if resp.GetBucketAction()[0].GetQuotaAssignmentAction() == nil {
						b.Fatalf("no assignment: %v", resp)
					}
					_ = stream.CloseSend()
				}
			})
		}
	}
}
