package rlqs

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestBucketOrder: a bucket's keys are put in the rule tree's order (tenant
// above route, though route sorts first), whatever their order in the map;
// a key set that is no rule's path, or a value no rule matches, is
// unmatched (Options.Unmatched).
func TestBucketOrder(t *testing.T) {
	clock := storetest.NewClock()
	st := newSimStore(t, "memory", clock.Now) // matching makes no store call
	eng, src := simEngineOn(t, st, simRules)
	srv, err := New(eng, src, Options{Unmatched: DenyUnmatched, Now: clock.Now, Allotter: st})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		bucket map[string]string
		want   []rules.Entry
		kind   kind
	}{
		{map[string]string{"route": "api", "tenant": "acme"}, []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "api"}}, kindLease},
		{map[string]string{"tenant": "acme", "route": "api"}, []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "api"}}, kindLease},
		{map[string]string{"route": "x", "tenant": "free"}, []rules.Entry{{Key: "tenant", Value: "free"}, {Key: "route", Value: "x"}}, kindAllow},
		{map[string]string{"route": "x", "tenant": "other"}, []rules.Entry{{Key: "route", Value: "x"}, {Key: "tenant", Value: "other"}}, kindDeny},
		{map[string]string{"tenant": "acme"}, []rules.Entry{{Key: "tenant", Value: "acme"}}, kindDeny},
		{map[string]string{"a": "1", "b": "2", "route": "api"}, []rules.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "route", Value: "api"}}, kindDeny},
	}
	ss := srv.newSession()
	ss.domain = simDomain
	for _, tt := range tests {
		b := &bucket{id: usage(tt.bucket, 0, 0).GetBucketId()}
		if err := ss.resolve(b); err != nil {
			t.Fatalf("%v: resolve: %v", tt.bucket, err)
		}
		if !slices.Equal(b.entries, tt.want) || b.kind != tt.kind {
			t.Errorf("%v: got entries %v kind %d, want %v kind %d", tt.bucket, b.entries, b.kind, tt.want, tt.kind)
		}
	}
}

// TestGrantIsChecksCounter: the units granted to an Envoy are taken from
// the counter Check charges for the same descriptor, whatever the
// algorithm and however it is leased (Allot for fixed_window and gcra,
// Takes for token_bucket, sliding_window and rules placed local), on the
// memory store and on Redis: after a grant, Check sees the limit less the
// grant remaining; and an Envoy asking again gets no more than is left.
func TestGrantIsChecksCounter(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		for _, tc := range []struct{ name, alg, extra string }{
			{"fixed_window", "fixed_window", ""},
			{"gcra", "gcra", ""},
			{"token_bucket", "token_bucket", ""},
			{"sliding_window", "sliding_window", ""},
			{"fixed_window placed local", "fixed_window", ", placement: local"},
			{"token_bucket placed local", "token_bucket", ", placement: local"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				clock := storetest.NewClock()
				st := newSimStore(t, kind, clock.Now)
				eng, src := simEngineOn(t, st, algRules(tc.alg, tc.extra))
				srv, err := New(eng, src, Options{Now: clock.Now, Allotter: st})
				if err != nil {
					t.Fatal(err)
				}
				e := newSimEnvoy("envoy", func() *Server { return srv }, clock.Now())
				id := map[string]string{"route": "api", "tenant": "acme"}
				e.request(t, clock.Now(), id)
				granted := int64(e.buckets[canonical(id)].strategy.GetTokenBucket().GetMaxTokens())
				if granted == 0 {
					t.Fatalf("no grant: %v", e.buckets[canonical(id)].strategy)
				}
				check := func() int64 {
					t.Helper()
					resp, err := eng.Check(context.Background(), service.Request{Domain: simDomain,
						Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "api"}}}}})
					if err != nil {
						t.Fatal(err)
					}
					return resp.Statuses[0].Result.Remaining
				}
				// Check took one more unit. (1/16 of the limit was asked
				// for: the first report carries no demand.)
				if got, want := check(), 60000-granted-1; got != want || granted != 60000/16 {
					t.Errorf("Check after a grant of %d (want %d): remaining %d, want %d", granted, 60000/16, got, want)
				}
				// Spend all but 10 units through Check's counter (check
				// itself takes one); a new lease (denials reported after
				// the grant) gets at most those 10.
				resp, err := eng.Check(context.Background(), service.Request{Domain: simDomain, Hits: uint64(check() - 10),
					Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "api"}}}}})
				if err != nil || resp.Statuses[0].Result.Remaining != 10 {
					t.Fatalf("Check of all but 10: %+v, %v; want 10 remaining after it", resp.Statuses[0].Result, err)
				}
				now := clock.Now().Add(5 * time.Millisecond)
				clock.Set(now)
				b := e.buckets[canonical(id)]
				b.tokens = 0
				for range 100 {
					e.request(t, now, id)
				}
				e.report(t, now, nil)
				if got := b.strategy.GetTokenBucket().GetMaxTokens(); got == 0 || got > 10 {
					t.Errorf("top-up with 10 left: %v, want a token bucket of 1–10 tokens", b.strategy)
				}
			})
		}
	})
}

// TestUnleasableDenied: a bucket whose rule's limit no lease keeps within
// its bound (sliding_log, leaky_bucket, concurrency) is denied, even with
// Options.Unmatched allow, and counted as unleasable.
func TestUnleasableDenied(t *testing.T) {
	for _, alg := range []string{"sliding_log", "leaky_bucket", "concurrency"} {
		t.Run(alg, func(t *testing.T) {
			clock := storetest.NewClock()
			st := newSimStore(t, "memory", clock.Now)
			eng, src := simEngineOn(t, st, algRules(alg, ""))
			srv, err := New(eng, src, Options{Unmatched: AllowUnmatched, Now: clock.Now, Allotter: st})
			if err != nil {
				t.Fatal(err)
			}
			e := newSimEnvoy("envoy", func() *Server { return srv }, clock.Now())
			id := map[string]string{"route": "api", "tenant": "acme"}
			e.request(t, clock.Now(), id)
			if e.request(t, clock.Now(), id) {
				t.Errorf("bucket of a %s rule allowed, want DENY_ALL", alg)
			}
			if s := srv.Stats(); s.Unleasable != 1 || s.Assignments[ActionDeny] != 1 || s.Grants != 0 {
				t.Errorf("stats %+v: want 1 unleasable, 1 deny assignment, no grant", s)
			}
		})
	}
}

// swapRules is a RuleSource whose snapshot a test replaces (a reload).
type swapRules struct {
	p atomic.Pointer[rules.Snapshot]
}

func (s *swapRules) Current() *rules.Snapshot { return s.p.Load() }

func parseRules(t *testing.T, yaml string) *rules.Snapshot {
	t.Helper()
	snap, err := rules.Parse("edge.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	return snap
}

// TestReload: after the rules are reloaded, a bucket's next report
// matches it again; a bucket whose rule changed gets the new assignment at
// once (here: unmatched DENY_ALL, then an unlimited rule's ALLOW_ALL).
func TestReload(t *testing.T) {
	clock := storetest.NewClock()
	st, err := redis.New(redis.Options{URL: redistest.Start(t).URL(), Now: clock.Now, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	src := &swapRules{}
	src.p.Store(parseRules(t, simRules))
	eng, err := service.New(service.DefaultConfig(), src, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(eng, src, Options{Unmatched: DenyUnmatched, Now: clock.Now, Allotter: st})
	if err != nil {
		t.Fatal(err)
	}
	e := newSimEnvoy("envoy", func() *Server { return srv }, clock.Now())
	id := map[string]string{"tenant": "other", "route": "x"}
	e.request(t, clock.Now(), id)
	if e.request(t, clock.Now(), id) {
		t.Fatalf("unmatched bucket allowed before the reload, want DENY_ALL")
	}
	src.p.Store(parseRules(t, simRules+`  - key: tenant
    value: other
    descriptors:
      - key: route
        rate_limit: {unlimited: true}
`))
	now := clock.Now().Add(5 * time.Second)
	clock.Set(now)
	e.report(t, now, nil)
	if !e.request(t, now, id) {
		t.Errorf("bucket of a rule made unlimited by a reload: denied after the next report, want ALLOW_ALL")
	}
}

// TestLeaseTTL: a grant lives to the end of the window that counts its
// units for the window algorithms (so a sliding window's units are spent
// in the window that counts them), and one window for the bucket
// algorithms (tokens taken now), on both stores: 45 s into a one-minute
// window, 15 s and 60 s.
func TestLeaseTTL(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		for _, tc := range []struct {
			alg  string
			want time.Duration
		}{
			{"fixed_window", 15 * time.Second},
			{"sliding_window", 15 * time.Second},
			{"gcra", time.Minute},
			{"token_bucket", time.Minute},
		} {
			t.Run(tc.alg, func(t *testing.T) {
				clock := storetest.NewClock()
				clock.Advance(45 * time.Second)
				st := newSimStore(t, kind, clock.Now)
				eng, src := simEngineOn(t, st, algRules(tc.alg, ""))
				srv, err := New(eng, src, Options{Now: clock.Now, Allotter: st})
				if err != nil {
					t.Fatal(err)
				}
				e := newSimEnvoy("envoy", func() *Server { return srv }, clock.Now())
				id := map[string]string{"route": "api", "tenant": "acme"}
				e.request(t, clock.Now(), id)
				b := e.buckets[canonical(id)]
				if b.strategy.GetTokenBucket() == nil || b.expires.Sub(clock.Now()) != tc.want {
					t.Errorf("assignment %v expiring in %v, want a token bucket expiring in %v", b.strategy, b.expires.Sub(clock.Now()), tc.want)
				}
			})
		}
	})
}
