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

	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
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

// BenchmarkReport: the server's work for one usage report of 50 buckets
// of a fixed-window rule, each its own counter, every one of them due for
// a grant, on one stream (the first report creates them), on the memory
// store and a real redis-server. The fake clock moves a window on each
// iteration, so each report finds every grant ended and every counter
// whole: each bucket is leased 15 units (1 request in 5 s × 60 s × 1.25
// headroom). Called directly (no gRPC): the figure is the store calls'
// and the server's, not the transport's. On Redis it reports the script
// calls per report (redis-calls/op).
func BenchmarkReport(b *testing.B) {
	const n = 50
	for _, kind := range simStores {
		b.Run(kind, func(b *testing.B) {
			clock := storetest.NewClock()
			st := newSimStore(b, kind, clock.Now)
			eng, src := simEngineOn(b, st, simRules)
			srv, err := New(eng, src, Options{Allotter: st, Now: clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			m := &rlqspb.RateLimitQuotaUsageReports{Domain: simDomain}
			for i := range n {
				m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(map[string]string{"tenant": "acme", "route": fmt.Sprint("r", i)}, 0, 1))
			}
			ctx := context.Background()
			ss := srv.newSession()
			rs, _ := st.(*redis.Store)
			var calls0 uint64
			if rs != nil {
				calls0 = rs.Stats().Calls
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				clock.Advance(time.Minute)
				resp, err := ss.handle(ctx, clock.Now(), m)
				if err != nil {
					b.Fatal(err)
				}
				if got := resp.GetBucketAction(); len(got) != n || got[n-1].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetMaxTokens() != 15 {
					b.Fatalf("got %d actions, the last %v; want %d token buckets of 15", len(got), got[len(got)-1], n)
				}
			}
			if rs != nil {
				b.ReportMetric(float64(rs.Stats().Calls-calls0)/float64(b.N), "redis-calls/op")
			}
		})
	}
}
