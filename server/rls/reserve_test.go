package rls

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/storetest"
)

// reserveRules: a budget of 1000 tokens an hour per API key, reserved on
// the request path (100 when Envoy sends hits_addend 0) and settled at
// stream end, paired by the request id entry; a reservation waits 10m
// for its settle.
const reserveRules = `domain: llm
descriptors:
  - key: api_key
    descriptors:
      - key: request_id
        rate_limit: {unit: hour, requests_per_unit: 1000, settle: reserve, pair_by: request_id, reserve: 100, settle_within: 10m}
`

// envoyLLM is what Envoy sends for request id of key: the same
// descriptor on the request path and at stream end (apply_on_stream_done),
// hits as the descriptor's hits_addend (nil: none on the descriptor) and
// the request's.
func envoyLLM(key, id string, descHits *uint64, reqHits uint32) *rlsv3.RateLimitRequest {
	d := desc("api_key", key, "request_id", id)
	if descHits != nil {
		d = withHits(d, *descHits)
	}
	return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}, HitsAddend: reqHits}
}

func hits(n uint64) *uint64 { return &n }

// TestReserveSettleRLS: reserve-then-settle behind Envoy, over real gRPC
// servers (two, on one store: the request path on one, stream end on the
// other), on memory, Redis and a Redis Cluster: N concurrent requests
// reserving max_tokens admit no more than the budget; settles larger,
// smaller, duplicate, of a denied request and after the record expired.
func TestReserveSettleRLS(t *testing.T) {
	stores(t, func(t *testing.T, st sluice.Store, clock *storetest.Clock) {
		path, done := serveYAML(t, reserveRules, st, Options{}), serveYAML(t, reserveRules, st, Options{})
		expect := func(t *testing.T, what string, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, ok bool, remaining uint32) {
			t.Helper()
			resp := call(t, c, req)
			got := resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
			if rem := resp.GetStatuses()[0].GetLimitRemaining(); got != ok || rem != remaining {
				t.Errorf("%s: OK %v, limit_remaining %d; want %v, %d", what, got, rem, ok, remaining)
			}
		}
		const n, maxTokens = 30, 70
		var mu sync.Mutex
		var admitted []string
		var reserved uint64
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprint("r", i)
				resp, err := path.ShouldRateLimit(context.Background(), envoyLLM("k", id, hits(maxTokens), 0))
				if err != nil {
					t.Errorf("request %s: %v", id, err)
					return
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					mu.Lock()
					admitted, reserved = append(admitted, id), reserved+maxTokens
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(admitted) != 1000/maxTokens || reserved > 1000 {
			t.Fatalf("%d concurrent reservations of max_tokens %d: %d admitted, %d reserved; want %d, at most 1000", n, maxTokens, len(admitted), reserved, 1000/maxTokens)
		}
		expect(t, "a request with hits_addend 0 reserves the rule's 100: denied", path, envoyLLM("k", "d1", hits(0), 0), false, 0) // a denial reports 0 left
		expect(t, "stream done, usage 100 (request hits_addend): charges 30", done, envoyLLM("k", admitted[0], nil, 100), true, 0)
		expect(t, "stream done, usage 20 (descriptor hits_addend): refunds 50", done, envoyLLM("k", admitted[1], hits(20), 0), true, 40)
		expect(t, "a duplicate stream done: ignored", done, envoyLLM("k", admitted[1], hits(20), 0), true, 40)
		expect(t, "stream done of the denied request: ignored", done, envoyLLM("k", "d1", hits(0), 0), true, 40)
		expect(t, "a request within what is left", path, envoyLLM("k", "e1", hits(40), 0), true, 0)
		expect(t, "its stream done, usage 0: refunds 40", done, envoyLLM("k", "e1", hits(0), 0), true, 40)
		// The other reservations never settle: they stand. After 10m
		// their records are gone, and a late stream done is a new
		// reservation: charged, never under-charged.
		clock.Advance(10*time.Minute + time.Second)
		expect(t, "a stream done after its record expired: reserves 30", done, envoyLLM("k", admitted[2], hits(30), 0), true, 10)
		expect(t, "and is settled by a duplicate", done, envoyLLM("k", admitted[2], hits(30), 0), true, 10)
	})
}
