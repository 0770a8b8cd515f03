package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

const penaltyRules = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 2, penalty: 10s}
  - key: calm
    rate_limit: {unit: second, requests_per_unit: 2}
`

// TestPenalty: a key that goes over a limit with a penalty stays denied,
// with reason penalty, for the penalty time, although its window has
// turned; a denied check neither charges nor lengthens the penalty; a
// second instance on the same store sees the penalty. On memory and Redis
// (single and Cluster).
func TestPenalty(t *testing.T) {
	t.Parallel() // its own stores, servers and clocks
	t.Run("memory", func(t *testing.T) {
		clock := storetest.NewClock()
		st := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		testPenalty(t, clock, st, st)
	})
	redisCase := func(t *testing.T, url string) {
		clock := storetest.NewClock()
		prefix := fmt.Sprintf("pen%d:", time.Now().UnixNano())
		var stores [2]sluice.Store
		for i := range stores {
			st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second, Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			stores[i] = st
		}
		testPenalty(t, clock, stores[0], stores[1])
	}
	t.Run("redis", func(t *testing.T) { redisCase(t, redistest.Start(t).URL()) })
	t.Run("cluster", func(t *testing.T) { redisCase(t, redistest.StartCluster(t).URL()) })
}

// testPenalty runs the penalty scenario on two engines, one per store (a
// fleet of two instances when the stores share their state).
func testPenalty(t *testing.T, clock *storetest.Clock, a, b sluice.Store) {
	snap, err := rules.Parse("p.yaml", []byte(penaltyRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine := func(st sluice.Store) *Engine {
		cfg := DefaultConfig()
		cfg.Now = clock.Now
		e, err := New(cfg, StaticRules{snap}, st, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ea, eb := engine(a), engine(b)
	check := func(e *Engine, key string) Status {
		t.Helper()
		resp, err := e.Check(context.Background(), Request{Domain: "d", Descriptors: []Descriptor{desc(key, "k1")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0]
	}
	clock.Advance(time.Second - time.Duration(clock.Now().UnixNano())%time.Second) // a window's start

	// Two fit, the third goes over: a penalty of 10s starts.
	allowed := 0
	for range 3 {
		if check(ea, "user").Code == CodeOK {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("first window: %d allowed, want 2", allowed)
	}
	// The windows turn, but the key stays out on both instances.
	for i := range 18 {
		clock.Advance(500 * time.Millisecond)
		e := ea
		if i%2 == 1 {
			e = eb
		}
		st := check(e, "user")
		if st.Code != CodeOverLimit || st.Result.Reason != ReasonPenalty {
			t.Fatalf("%v after the penalty began: code %v reason %v, want OVER_LIMIT, penalty", time.Duration(i+1)*500*time.Millisecond, st.Code, st.Result.Reason)
		}
		want := 10*time.Second - time.Duration(i+1)*500*time.Millisecond
		if st.Result.RetryAfter != want {
			t.Errorf("RetryAfter %v, want %v (the end of the penalty)", st.Result.RetryAfter, want)
		}
	}
	// Another key and another rule are not affected.
	if st := check(eb, "calm"); st.Code != CodeOK {
		t.Errorf("a rule without a penalty: %v, want OK", st.Code)
	}
	other, err := ea.Check(context.Background(), Request{Domain: "d", Descriptors: []Descriptor{desc("user", "k2")}})
	if err != nil || other.Statuses[0].Code != CodeOK {
		t.Errorf("another key of the rule: %+v %v, want OK", other.Statuses, err)
	}
	// The penalty ends 10s after it began (now 9s): denied checks did
	// not lengthen it, and the quota is whole (nothing was charged).
	clock.Advance(time.Second + time.Millisecond)
	allowed = 0
	for range 3 {
		if check(eb, "user").Code == CodeOK {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("after the penalty: %d of 3 allowed, want 2 (a full window)", allowed)
	}
	// That third check went over again: a new penalty.
	clock.Advance(time.Second)
	if st := check(ea, "user"); st.Result.Reason != ReasonPenalty {
		t.Errorf("after going over again: reason %v, want penalty", st.Result.Reason)
	}
}
