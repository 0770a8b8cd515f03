package rlqs

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/store/storetest"
)

// TestPostAssignmentReportKeepsEstimate: the report a client sends as it
// applies an assignment (a millisecond of usage, no request in it) is
// recognised, and the next grant is still sized from the demand of the
// reports before it, on the memory store and on Redis.
func TestPostAssignmentReportKeepsEstimate(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		clock := storetest.NewClock()
		st := newSimStore(t, kind, clock.Now)
		eng, src := simEngineOn(t, st, simRules)
		// (AbandonAfter: no report comes between the last and the grant's end.)
		srv, err := New(eng, src, Options{Now: clock.Now, Allotter: st, AbandonAfter: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ss := srv.newSession()
		id := map[string]string{"tenant": "acme", "route": "api"}
		send := func(now time.Time, el time.Duration, allowed, denied uint64, domain string) *rlqspb.RateLimitQuotaResponse {
			t.Helper()
			resp, err := ss.handle(context.Background(), now, &rlqspb.RateLimitQuotaUsageReports{Domain: domain,
				BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
					BucketId: &rlqspb.BucketId{Bucket: id}, TimeElapsed: durationpb.New(el),
					NumRequestsAllowed: allowed, NumRequestsDenied: denied}}})
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		now := clock.Now()
		send(now, 0, 0, 1, simDomain) // subscribes: the initial share
		// 200 a second for 15 s, reported every 5 s; the third report says
		// the grant ran short (denials after it), and gets a top-up.
		var top *rlqspb.RateLimitQuotaResponse
		for i := 1; i <= 3; i++ {
			now = now.Add(5 * time.Second)
			clock.Set(now)
			top = send(now, 5*time.Second, 900, 100, "")
		}
		if top == nil {
			t.Fatal("a report of denials after the grant got no top-up")
		}
		// The report as the top-up is applied: 1 ms, nothing in it.
		now = now.Add(time.Millisecond)
		clock.Set(now)
		if resp := send(now, time.Millisecond, 0, 0, ""); resp != nil {
			t.Errorf("the report of an applied assignment was answered: %v", resp)
		}
		if got := srv.Stats().PostAssignmentReports; got == 0 {
			t.Errorf("post-assignment reports recognised %d, want ≥ 1", got)
		}
		// The next grant, at the grant's end, is sized from ~200 a second.
		b := ss.buckets[canonical(id)]
		if b.rate < 150 {
			t.Errorf("demand estimate after the near-empty report %.1f a second, want ≈ 200", b.rate)
		}
		now = b.expires
		clock.Set(now)
		resp := ss.tick(context.Background(), now)
		t.Logf("at the grant's end: %v", resp)
		var got uint32
		for _, a := range resp.GetBucketAction() {
			got = a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetMaxTokens()
		}
		// 200 a second × 60 s × headroom 1.25 = 15 000, capped at a
		// quarter of the limit left.
		if got < 10000 {
			t.Errorf("grant after the near-empty report: %d tokens, want ≥ 10000 (demand 200 a second over a 60 s window)", got)
		}
	})
}

// TestMaxStreamAge: a stream older than Options.MaxStreamAge ends with
// status OK; the client's next report, on a new stream, gets no new
// assignment (its grant was handed back, still in force) and the grant's
// units are not taken again, on the memory store and on Redis.
func TestMaxStreamAge(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		fx := newGRPCFixture(t, kind, Options{MaxStreamAge: 300 * time.Millisecond})
		id := map[string]string{"tenant": "acme", "route": "api"}
		stream, err := fx.client.StreamRateLimitQuotas(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		first := usage(id, 0, 1)
		first.TimeElapsed = durationpb.New(0)
		if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{first}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
			t.Fatalf("first assignment %v, want a token bucket", resp)
		}
		// The stream ages out (on the real clock; the server's is fake).
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("Recv after the max age: %v, want io.EOF (status OK)", err)
		}
		before := fx.srv.Stats()
		stream2, err := fx.client.StreamRateLimitQuotas(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// The client's next report, 2 s later: its last report was 2 s ago.
		fx.clock.Set(fx.clock.Now().Add(2 * time.Second))
		again := usage(id, 0, 0)
		again.TimeElapsed = durationpb.New(2 * time.Second)
		if err := stream2.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{again}}); err != nil {
			t.Fatal(err)
		}
		if err := stream2.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream2.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("report on the new stream: %v, %v; want nothing sent (the grant is handed back) and a clean end", resp, err)
		}
		after := fx.srv.Stats()
		if after.Aged < 1 || after.HandedBack != before.HandedBack+1 || after.Grants != before.Grants {
			t.Errorf("aged %d, handed back %d → %d, grants %d → %d; want aged ≥ 1, one bucket handed back, no new grant",
				after.Aged, before.HandedBack, after.HandedBack, before.Grants, after.Grants)
		}
	})
}
