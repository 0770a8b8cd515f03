package rls

import (
	"fmt"
	"os"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/storetest"
)

// envoyCall is what Envoy sends for one LLM call of key in team, model:
// on the request path the token entries hold their metadata action's
// default_value "0"; at stream end (apply_on_stream_done) they hold the
// usage the AI gateway put in dynamic metadata, and hits_addend whatever
// it is configured with (a money budget ignores it).
func envoyCall(key, team, model string, in, out, cached int) *rlsv3.RateLimitRequest {
	usage := []string{"model", model, "input_tokens", fmt.Sprint(in), "output_tokens", fmt.Sprint(out), "cached_tokens", fmt.Sprint(cached)}
	return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		withHits(desc(append([]string{"api_key", key}, usage...)...), uint64(in+out)),
		withHits(desc(append([]string{"team", team}, usage...)...), uint64(in+out)),
	}}
}

// TestMoneyBudgets: the example budgets (examples/llm) over a real gRPC
// server, on memory and Redis: a call's cost is its tokens at the
// example table's prices, charged to the key's and the team's budgets at
// stream end, concurrent charges all count, and a spent budget denies
// the request path.
func TestMoneyBudgets(t *testing.T) {
	yaml, err := os.ReadFile("../../examples/llm/rules/budgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	opts := rules.Options{PricesFile: "../../examples/llm/prices.yaml"}
	stores(t, func(t *testing.T, st sluice.Store, _ *storetest.Clock) {
		c := serveYAMLOpts(t, string(yaml), opts, st, Options{})
		// remaining looks on the request path and returns the key's and
		// the team's budget left, in micro-dollars, and the overall code.
		remaining := func(t *testing.T, key, team string) (uint32, uint32, bool) {
			t.Helper()
			resp := call(t, c, envoyCall(key, team, "gpt-4o", 0, 0, 0))
			s := resp.GetStatuses()
			return s[0].GetLimitRemaining(), s[1].GetLimitRemaining(), resp.GetOverallCode() == rlsv3.RateLimitResponse_OK
		}
		if k, tm, ok := remaining(t, "k1", "t1"); !ok || k != 50_000_000 || tm != 2_000_000_000 {
			t.Fatalf("a fresh key: %d, %d, %v; want $50 and $2000 left, OK", k, tm, ok)
		}

		// gpt-4o: 1000 input ($2.50/M), 1000 cached ($1.25/M), 1000 output
		// ($10/M) = 2500 + 1250 + 10000 µ$; 3 such calls at once.
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.ShouldRateLimit(t.Context(), envoyCall("k1", "t1", "gpt-4o", 1000, 1000, 1000))
				if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					t.Errorf("stream end: %v, %v", resp, err)
				}
			}()
		}
		wg.Wait()
		// One input token of gpt-4o-mini ($0.15/M) costs 0.15 µ$: 1 µ$.
		call(t, c, envoyCall("k1", "t1", "gpt-4o-mini", 1, 0, 0))
		const spent = 3*13_750 + 1
		if k, tm, ok := remaining(t, "k1", "t1"); !ok || k != 50_000_000-spent || tm != 2_000_000_000-spent {
			t.Fatalf("after 4 calls: %d, %d, %v; want %d, %d, OK", k, tm, ok, 50_000_000-spent, 2_000_000_000-spent)
		}

		// Three calls that spend the rest of k1's $50 and more (o3, 2.5M
		// output tokens at $8/M: $20 each): charged in full, and k1's
		// request path is denied; k2 of the same team is not.
		for range 3 {
			req := envoyCall("k1", "t1", "o3", 0, 0, 0)
			for _, d := range req.Descriptors {
				d.Entries[3].Value = "2500000" // output tokens
			}
			call(t, c, req)
		}
		if k, _, ok := remaining(t, "k1", "t1"); ok || k != 0 {
			t.Errorf("k1 after spending its budget: %d left, OK %v; want 0, denied", k, ok)
		}
		if k, tm, ok := remaining(t, "k2", "t1"); !ok || k != 50_000_000 || tm != 2_000_000_000-spent-60_000_000 {
			t.Errorf("k2: %d, %d, %v; want $50 and the team's rest, OK", k, tm, ok)
		}
		// Token counts no counter can take: INVALID_ARGUMENT, nothing charged.
		bad := envoyCall("k3", "t2", "gpt-4o", 0, 0, 0)
		bad.Descriptors[0].Entries[2].Value = "12k"
		if _, err := c.ShouldRateLimit(t.Context(), bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("bad token count: %v, want INVALID_ARGUMENT", err)
		}
		// An unlisted model pays default_model's (gpt-4o's) prices.
		call(t, c, envoyCall("k3", "t2", "some-new-model", 1000, 0, 0))
		if k, _, _ := remaining(t, "k3", "t2"); k != 50_000_000-2500 {
			t.Errorf("k3 after an unlisted model: %d left, want %d", k, 50_000_000-2500)
		}
	})
}
