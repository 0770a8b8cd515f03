package hybrid

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// countingStore counts the ops that reach it.
type countingStore struct {
	sluice.Store
	ops int
}

func (c *countingStore) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	c.ops += len(ops)
	return c.Store.Take(ctx, ops, res)
}

// deniedOverMemory is a Denied cache over a counted memory store, both on
// one fake clock.
func deniedOverMemory(t *testing.T) (*Denied, *countingStore, *storetest.Clock) {
	t.Helper()
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	next := &countingStore{Store: mem}
	return NewDenied(next, DeniedOptions{Now: clock.Now}), next, clock
}

func TestDeniedCache(t *testing.T) {
	d, next, clock := deniedOverMemory(t)
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Second}
	take := func(key string, cost int64) sluice.Result {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := d.Take(context.Background(), []sluice.Op{{Key: key, Limit: l, Cost: cost}}, res); err != nil {
			t.Fatalf("Take: %v", err)
		}
		return res[0]
	}
	for i := range 3 {
		if r := take("a", 1); !r.Allowed {
			t.Fatalf("hit %d: denied, want allowed", i)
		}
	}
	clock.Advance(100 * time.Millisecond)
	r := take("a", 1)
	if r.Allowed || r.RetryAfter != 900*time.Millisecond {
		t.Fatalf("4th hit: %+v, want denied with RetryAfter 900ms", r)
	}
	before := next.ops
	steps := []struct {
		advance  time.Duration
		cost     int64
		allowed  bool
		retry    time.Duration
		fromCach bool
	}{
		{0, 1, false, 900 * time.Millisecond, true},
		{400 * time.Millisecond, 2, false, 500 * time.Millisecond, true}, // larger cost: denied too
		{0, 0, true, 0, false},                                           // a look always reaches the store
		{499 * time.Millisecond, 1, false, time.Millisecond, true},
		{time.Millisecond, 1, true, 0, false}, // RetryAfter has passed
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		n := next.ops
		r := take("a", s.cost)
		if r.Allowed != s.allowed || r.RetryAfter != s.retry {
			t.Errorf("step %d: got allowed %v retry %v, want %v %v", i, r.Allowed, r.RetryAfter, s.allowed, s.retry)
		}
		if cached := next.ops == n; cached != s.fromCach {
			t.Errorf("step %d: answered from cache %v, want %v", i, cached, s.fromCach)
		}
	}
	if got, want := d.Stats().Hits, uint64(3); got != want {
		t.Errorf("Hits = %d, want %d (store ops %d since the denial)", got, want, next.ops-before)
	}
	// A denial at a larger cost says nothing about a smaller one.
	clock.Advance(time.Second)
	take("b", 3)
	if r := take("b", 2); r.Allowed {
		t.Fatalf("b cost 2 after 3: allowed, want denied")
	}
	n := next.ops
	if r := take("b", 1); r.Allowed || next.ops == n {
		t.Errorf("b cost 1 after a denial at cost 2: %+v, from cache %v; want denied by the store", r, next.ops == n)
	}
}

func TestDeniedCacheBounded(t *testing.T) {
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	defer mem.Close()
	d := NewDenied(mem, DeniedOptions{Now: clock.Now, MaxKeys: 64})
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Hour}
	res := make([]sluice.Result, 1)
	for i := range 10_000 {
		op := []sluice.Op{{Key: fmt.Sprint(i), Limit: l, Cost: 1}}
		for range 2 {
			if err := d.Take(context.Background(), op, res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := d.Stats().Keys; got > 64 {
		t.Fatalf("Keys = %d after 10,000 denied keys, want ≤ 64", got)
	}
}

// The cache changes no decision: instances, each with its own cache and
// Redis client, and a reference store without a cache (its own prefix) see
// the same random traffic on a fake clock; every Allowed must agree, and a
// cached RetryAfter is never later than the store's.
func TestDeniedCacheChangesNoDecision(t *testing.T) {
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	open := func(prefix string) *redis.Store {
		s, err := redis.New(redis.Options{URL: srv.URL(), Prefix: prefix, Now: clock.Now, Timeout: time.Second})
		if err != nil {
			t.Fatalf("redis.New: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	ref := open("ref:")
	var inst []*Denied
	for range 3 {
		inst = append(inst, NewDenied(open("dc:"), DeniedOptions{Now: clock.Now}))
	}
	limits := []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Quota: 5, Window: 100 * time.Millisecond},
		{Algorithm: sluice.GCRA, Quota: 10, Window: 100 * time.Millisecond, Burst: 3},
		{Algorithm: sluice.TokenBucket, Quota: 10, Window: 100 * time.Millisecond, Burst: 4},
		{Algorithm: sluice.SlidingWindow, Quota: 6, Window: 100 * time.Millisecond},
		{Algorithm: sluice.SlidingLog, Quota: 4, Window: 100 * time.Millisecond},
		{Algorithm: sluice.LeakyBucket, Quota: 20, Window: 100 * time.Millisecond, Burst: 3},
	}
	rng := rand.New(rand.NewPCG(7, 8))
	hits := uint64(0)
	for i := range 3000 {
		clock.Advance(time.Duration(rng.IntN(500)) * time.Microsecond)
		n := 1 + rng.IntN(2)
		ops := make([]sluice.Op, n)
		used := map[string]bool{}
		for j := range ops {
			l := limits[rng.IntN(len(limits))]
			key := fmt.Sprintf("k%d-%v", rng.IntN(3), l.Algorithm)
			for used[key] {
				l = limits[rng.IntN(len(limits))]
				key = fmt.Sprintf("k%d-%v", rng.IntN(3), l.Algorithm)
			}
			used[key] = true
			ops[j] = sluice.Op{Key: key, Limit: l, Cost: int64(rng.IntN(3))}
		}
		got := make([]sluice.Result, n)
		want := make([]sluice.Result, n)
		d := inst[rng.IntN(len(inst))]
		if err := d.Take(context.Background(), ops, got); err != nil {
			t.Fatalf("step %d: cached Take: %v", i, err)
		}
		if err := ref.Take(context.Background(), ops, want); err != nil {
			t.Fatalf("step %d: reference Take: %v", i, err)
		}
		for j := range ops {
			if ops[j].Key == "k2-sliding_window" && testing.Verbose() {
				t.Logf("step %d t=%v n=%d op %d cost %d: got %v %v rem %d, want %v %v rem %d", i, clock.Now().Sub(storetest.Epoch), n, j, ops[j].Cost, got[j].Allowed, got[j].RetryAfter, got[j].Remaining, want[j].Allowed, want[j].RetryAfter, want[j].Remaining)
			}
			if got[j].Allowed != want[j].Allowed || got[j].Reason != want[j].Reason {
				t.Fatalf("step %d op %d %+v: got allowed %v (%v), want %v (%v)", i, j, ops[j], got[j].Allowed, got[j].Reason, want[j].Allowed, want[j].Reason)
			}
			if got[j].RetryAfter > want[j].RetryAfter {
				t.Fatalf("step %d op %d: cached RetryAfter %v, want ≤ the store's %v", i, j, got[j].RetryAfter, want[j].RetryAfter)
			}
		}
	}
	for _, d := range inst {
		hits += d.Stats().Hits
	}
	if hits == 0 {
		t.Fatal("no cache hits: the test exercised nothing")
	}
	t.Logf("%d ops answered from the caches", hits)
}

// The cache answers only what the store would: a larger cost is asked of
// the store (its RetryAfter is later), but for fixed_window, whose
// RetryAfter is the window's end whatever the cost; a cost the limit can
// never admit is the store's "cost too high"; and a sliding_log denial
// whose RetryAfter is its ResetAfter (may be late) is not remembered.
func TestDeniedCacheCosts(t *testing.T) {
	slog := sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 100, Window: time.Second}
	fixed := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Second}
	type step struct {
		at        time.Duration // since the first step
		cost      int64
		reason    sluice.Reason
		retry     time.Duration
		fromCache bool
	}
	for _, tc := range []struct {
		name  string
		limit sluice.Limit
		steps []step
	}{
		{"sliding_log", slog, []step{
			{0, 70, sluice.ReasonAllowed, 0, false},
			{100 * time.Millisecond, 30, sluice.ReasonAllowed, 0, false},
			{300 * time.Millisecond, 64, sluice.ReasonLimited, 700 * time.Millisecond, false}, // exact: remembered
			{300 * time.Millisecond, 64, sluice.ReasonLimited, 700 * time.Millisecond, true},
			{300 * time.Millisecond, 66, sluice.ReasonLimited, 800 * time.Millisecond, false}, // larger: the store's (its ResetAfter)
			{300 * time.Millisecond, 101, sluice.ReasonCostTooHigh, 0, false},
			{400 * time.Millisecond, 100, sluice.ReasonLimited, 700 * time.Millisecond, false}, // 100 must leave: ResetAfter, not remembered
			{500 * time.Millisecond, 100, sluice.ReasonLimited, 600 * time.Millisecond, false},
			{time.Second, 64, sluice.ReasonAllowed, 0, false}, // the 64's denial ran out
		}},
		{"fixed_window", fixed, []step{
			{0, 100, sluice.ReasonAllowed, 0, false},
			{100 * time.Millisecond, 10, sluice.ReasonLimited, 900 * time.Millisecond, false},
			{200 * time.Millisecond, 50, sluice.ReasonLimited, 800 * time.Millisecond, true}, // the window's end, whatever the cost
			{200 * time.Millisecond, 5, sluice.ReasonLimited, 800 * time.Millisecond, false}, // smaller: the store's
			{200 * time.Millisecond, 101, sluice.ReasonCostTooHigh, 0, false},
			{time.Second, 100, sluice.ReasonAllowed, 0, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, next, clock := deniedOverMemory(t)
			start := clock.Now()
			for i, st := range tc.steps {
				clock.Set(start.Add(st.at))
				n := next.ops
				res := make([]sluice.Result, 1)
				if err := d.Take(context.Background(), []sluice.Op{{Key: "k", Limit: tc.limit, Cost: st.cost}}, res); err != nil {
					t.Fatal(err)
				}
				r, cached := res[0], next.ops == n
				if r.Reason != st.reason || r.RetryAfter != st.retry || cached != st.fromCache {
					t.Errorf("step %d: cost %d at %v: %v retry %v from cache %v; want %v retry %v from cache %v",
						i+1, st.cost, st.at, r.Reason, r.RetryAfter, cached, st.reason, st.retry, st.fromCache)
				}
			}
		})
	}
}

// TestDeniedPaired: the cache never remembers a reservation's denial
// (reserve-then-settle, sluice.Op.Lease) nor answers one: the same op is
// a settle, never denied, once its record holds a reservation. Here a
// plain Take's denial of the key is remembered, a reservation is denied,
// and the settle of an earlier reservation still reaches the store and
// charges.
func TestDeniedPaired(t *testing.T) {
	d, next, _ := deniedOverMemory(t)
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}
	pair := func(lease uint64, cost int64) sluice.Op {
		return sluice.Op{Key: "k", Limit: l, Cost: cost, Lease: lease, SettleWithin: time.Minute}
	}
	take := func(op sluice.Op) sluice.Result {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := d.Take(context.Background(), []sluice.Op{op}, res); err != nil {
			t.Fatalf("Take: %v", err)
		}
		return res[0]
	}
	if r := take(pair(1, 8)); !r.Allowed || r.Remaining != 2 {
		t.Fatalf("reservation 1 of 8: %+v, want allowed, 2 left", r)
	}
	if r := take(sluice.Op{Key: "k", Limit: l, Cost: 5}); r.Allowed {
		t.Fatalf("a plain Take of 5: %+v, want denied (and remembered)", r)
	}
	if r := take(pair(2, 5)); r.Allowed {
		t.Fatalf("reservation 2 of 5: %+v, want denied", r)
	}
	before := next.ops
	if r := take(pair(1, 9)); !r.Allowed || r.Remaining != 1 || next.ops != before+1 {
		t.Fatalf("settle of 1 (usage 9): %+v, %d ops reached the store; want allowed, 1 left, 1 op", r, next.ops-before)
	}
	if r := take(pair(2, 1)); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("the call after reservation 2's denial: %+v, want ignored (allowed, 1 left)", r)
	}
}
