package rlqs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// countingAllotter counts the calls the server makes to the store under
// it: the requests of each Allot call, and the Takes. Allot call failCall
// (1-based; 0: none) fails without reaching the store.
type countingAllotter struct {
	stack.Allotter
	failCall int

	mu     sync.Mutex
	allots []int // requests per Allot call
	takes  int
}

var errInjected = errors.New("injected store failure")

func (c *countingAllotter) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	c.mu.Lock()
	c.allots = append(c.allots, len(reqs))
	n := len(c.allots)
	c.mu.Unlock()
	if n == c.failCall {
		return errInjected
	}
	return c.Allotter.Allot(ctx, reqs, out)
}

func (c *countingAllotter) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	c.mu.Lock()
	c.takes++
	c.mu.Unlock()
	return c.Allotter.Take(ctx, ops, res)
}

// batchRules: tenant acme's routes are fixed-window counters (leased by
// Allot), tenant beta's token buckets (leased by Takes), tenant free's
// unlimited; anything else matches no rule.
const batchRules = `
domain: edge
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 60000}
  - key: tenant
    value: beta
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 60000, algorithm: token_bucket}
  - key: tenant
    value: free
    descriptors:
      - key: route
        rate_limit: {unlimited: true}
`

// TestReportLeasesInOneCall: the buckets of one usage report leased by
// Allot are leased in one Allot call, whatever their number; those down
// to fewer than Split units left in a second call, one unit each; buckets
// leased by Takes one by one (a look and a Take each). Each bucket gets
// what it would get alone, the actions come in the usages' order, and a
// failed call fails every bucket in it (none answered, each counted in
// AllotErrors). On the memory store and a real redis-server.
func TestReportLeasesInOneCall(t *testing.T) {
	acme := func(i int) string { return fmt.Sprint("acme/r", i) }
	routes := func(n int) []string {
		var s []string
		for i := range n {
			s = append(s, acme(i))
		}
		return s
	}
	tests := []struct {
		name     string
		buckets  []string       // tenant/route, or "nobody"
		spend    map[string]int // bucket → units Check takes first (60000 − left)
		failCall int
		// want: Allot calls (requests each), Takes, and per bucket the
		// action: "tb N" (a token bucket of N), "allow", "deny", or "-"
		// (none).
		allots     []int
		takes      int
		actions    []string
		allotErrs  uint64
		noResponse bool
	}{
		{name: "20 fresh counters", buckets: routes(20), allots: []int{20},
			actions: slices.Repeat([]string{"tb 15"}, 20)},
		{name: "two near the limit", buckets: routes(10), spend: map[string]int{acme(3): 59997, acme(7): 59997},
			allots:  []int{10, 2},
			actions: []string{"tb 15", "tb 15", "tb 15", "tb 1", "tb 15", "tb 15", "tb 15", "tb 1", "tb 15", "tb 15"}},
		{name: "one spent", buckets: routes(3), spend: map[string]int{acme(1): 60000},
			allots: []int{3}, actions: []string{"tb 15", "deny", "tb 15"}},
		{name: "mixed with Takes and blankets",
			buckets: []string{acme(0), acme(1), "free/x", "beta/r0", acme(2), "nobody", "beta/r1", acme(3)},
			allots:  []int{4}, takes: 4,
			actions: []string{"tb 15", "tb 15", "allow", "tb 15", "tb 15", "deny", "tb 15", "tb 15"}},
		{name: "the same bucket twice", buckets: []string{acme(0), acme(1), acme(0), acme(2)},
			allots: []int{2, 1}, actions: []string{"tb 15", "tb 15", "-", "tb 15"}},
		{name: "the call fails", buckets: routes(5), failCall: 1,
			allots: []int{5}, actions: slices.Repeat([]string{"-"}, 5), allotErrs: 5, noResponse: true},
		{name: "the one-unit call fails", buckets: routes(4), spend: map[string]int{acme(1): 59997}, failCall: 2,
			allots: []int{4, 1}, actions: []string{"tb 15", "-", "tb 15", "tb 15"}, allotErrs: 1},
	}
	eachStore(t, func(t *testing.T, kind string) {
		var url string
		if kind == "redis" {
			url = redistest.Start(t).URL()
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				clock := storetest.NewClock()
				var st stack.Allotter
				var rs *redis.Store
				if kind == "redis" {
					rs = newRedisStore(t, url, clock.Now)
					st = rs
				} else {
					ms := memory.New(memory.Options{Now: clock.Now})
					t.Cleanup(func() { ms.Close() })
					st = ms
				}
				eng, src := simEngineOn(t, st, batchRules)
				ca := &countingAllotter{Allotter: st, failCall: tt.failCall}
				srv, err := New(eng, src, Options{Allotter: ca, Now: clock.Now, Unmatched: DenyUnmatched})
				if err != nil {
					t.Fatal(err)
				}
				ids := make([]map[string]string, len(tt.buckets))
				m := &rlqspb.RateLimitQuotaUsageReports{Domain: simDomain}
				for i, name := range tt.buckets {
					ids[i] = map[string]string{"tenant": name}
					if tenant, route, ok := strings.Cut(name, "/"); ok {
						ids[i] = map[string]string{"tenant": tenant, "route": route}
					}
					m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(ids[i], 0, 1))
					if n := tt.spend[name]; n > 0 {
						resp, err := eng.Check(context.Background(), service.Request{Domain: simDomain, Hits: uint64(n),
							Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "tenant", Value: ids[i]["tenant"]}, {Key: "route", Value: ids[i]["route"]}}}}})
						if err != nil || !resp.Statuses[0].Result.Allowed {
							t.Fatalf("Check of %d on %s: %+v, %v", n, name, resp, err)
						}
					}
				}
				var calls0 uint64
				if rs != nil {
					calls0 = rs.Stats().Calls
				}
				resp, err := srv.newSession().handle(context.Background(), clock.Now(), m)
				if err != nil {
					t.Fatalf("handle: %v", err)
				}
				if rs != nil {
					t.Logf("Redis script calls for the report: %d", rs.Stats().Calls-calls0)
				}
				if !slices.Equal(ca.allots, tt.allots) {
					t.Errorf("Allot calls (requests each): got %v, want %v", ca.allots, tt.allots)
				}
				if ca.takes != tt.takes {
					t.Errorf("Takes: got %d, want %d", ca.takes, tt.takes)
				}
				if got := srv.Stats().AllotErrors; got != tt.allotErrs {
					t.Errorf("AllotErrors: got %d, want %d", got, tt.allotErrs)
				}
				if (resp == nil) != tt.noResponse {
					t.Errorf("response: got %v, want none: %v", resp, tt.noResponse)
				}
				// The actions in the usages' order, a bucket with none
				// skipped.
				var want []string
				var wantIDs []string
				for i, a := range tt.actions {
					if a != "-" {
						want = append(want, a)
						wantIDs = append(wantIDs, canonical(ids[i]))
					}
				}
				var got, gotIDs []string
				for _, a := range resp.GetBucketAction() {
					got = append(got, describe(a))
					gotIDs = append(gotIDs, canonical(a.GetBucketId().GetBucket()))
				}
				if !slices.Equal(got, want) || !slices.Equal(gotIDs, wantIDs) {
					t.Errorf("actions: got %v for %q, want %v for %q", got, gotIDs, want, wantIDs)
				}
			})
		}
	})
}

// describe is an action as "tb N", "allow", "deny" or "abandon".
func describe(a *rlqspb.RateLimitQuotaResponse_BucketAction) string {
	if a.GetAbandonAction() != nil {
		return "abandon"
	}
	st := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	if tb := st.GetTokenBucket(); tb != nil {
		return fmt.Sprint("tb ", tb.GetMaxTokens())
	}
	if st.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL {
		return "allow"
	}
	return "deny"
}

// TestTickLeasesInOneCall: at a window's end, the grants that ended are
// leased again in one Allot call, pushed in one message in the buckets'
// order, on the memory store and a real redis-server.
func TestTickLeasesInOneCall(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		const n = 10
		clock := storetest.NewClock()
		// 50 s into a window: its grants end before the buckets are
		// abandoned.
		clock.Set(clock.Now().Truncate(time.Minute).Add(time.Minute + 50*time.Second))
		st := newSimStore(t, kind, clock.Now)
		eng, src := simEngineOn(t, st, batchRules)
		ca := &countingAllotter{Allotter: st}
		srv, err := New(eng, src, Options{Allotter: ca, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		m := &rlqspb.RateLimitQuotaUsageReports{Domain: simDomain}
		var wantIDs []string
		for i := range n {
			id := map[string]string{"tenant": "acme", "route": fmt.Sprint("r", i)}
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(id, 0, 1))
			wantIDs = append(wantIDs, canonical(id))
		}
		slices.Sort(wantIDs)
		ss := srv.newSession()
		start := clock.Now()
		if _, err := ss.handle(context.Background(), clock.Now(), m); err != nil {
			t.Fatalf("handle: %v", err)
		}
		next := ss.next()
		clock.Set(next)
		resp := ss.tick(context.Background(), next)
		if want := []int{n, n}; !slices.Equal(ca.allots, want) {
			t.Errorf("Allot calls (requests each), report then tick %v later: got %v, want %v", next.Sub(start), ca.allots, want)
		}
		var got, gotIDs []string
		for _, a := range resp.GetBucketAction() {
			got = append(got, describe(a))
			gotIDs = append(gotIDs, canonical(a.GetBucketId().GetBucket()))
		}
		if want := slices.Repeat([]string{"tb 15"}, n); !slices.Equal(got, want) || !slices.Equal(gotIDs, wantIDs) {
			t.Errorf("tick: got %v for %q, want %v for %q", got, gotIDs, want, wantIDs)
		}
	})
}
