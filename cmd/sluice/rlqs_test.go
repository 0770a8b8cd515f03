package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestServeRLQS: `sluice serve` answers Envoy's rate limit quota stream on
// its gRPC address; a bucket matching no rule gets --rlqs-unmatched; a
// stream still open at shutdown does not hold the drain up (run returns
// nil within the test server's deadline).
func TestServeRLQS(t *testing.T) {
	for _, tt := range []struct {
		flag string
		want typev3.RateLimitStrategy_BlanketRule
	}{{"", typev3.RateLimitStrategy_ALLOW_ALL}, {"deny", typev3.RateLimitStrategy_DENY_ALL}} {
		t.Run("unmatched="+tt.flag, func(t *testing.T) {
			ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), func(c *serveConfig) { c.Listen.RLQSUnmatched = tt.flag })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := rlqspb.NewRateLimitQuotaServiceClient(ts.conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"no_such_key": "x"}}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 1,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			if got := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule(); got != tt.want {
				t.Errorf("unmatched bucket: got %v, want %v", got, tt.want)
			}
			ts.stop() // with the stream open
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				t.Errorf("after shutdown: Recv error %v, want io.EOF", err)
			}
		})
	}
}

// TestServeRLQSLeases: with --store memory and with --store redis, a
// bucket of a fixed-window rule gets a token bucket leased from the store
// (through the placement-routing stack serve builds): 3 an hour for
// remote_address, so at most 3 tokens; /metrics counts the stream open
// and the assignment.
func TestServeRLQSLeases(t *testing.T) {
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			var edit func(*serveConfig)
			if kind == "redis" {
				edit = withRedis(redistest.Start(t).URL(), nil)
			}
			ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), edit)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := rlqspb.NewRateLimitQuotaServiceClient(ts.conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqspb.BucketId{Bucket: map[string]string{"remote_address": "10.0.0.1"}}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 100,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("Recv: %v", err)
			}
			qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
			if n := qa.GetRateLimitStrategy().GetTokenBucket().GetMaxTokens(); n < 1 || n > 3 {
				t.Errorf("bucket of a 3-an-hour rule: %v, want a token bucket of 1–3 tokens", qa)
			}
			_, body := get(t, ts.base+"/metrics")
			for _, want := range []string{
				"sluice_rlqs_streams_open 1\n",
				`sluice_rlqs_assignments_total{action="token_bucket"} 1` + "\n",
				"sluice_rlqs_grants_total 1\n",
				"sluice_rlqs_reports_total 1\n",
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics has no %q", strings.TrimSpace(want))
				}
			}
		})
	}
}
