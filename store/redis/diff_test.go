package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// newTestStore returns a store on url with a fresh random prefix and the
// fake clock c.
func newTestStore(t testing.TB, url string, c *storetest.Clock) *Store {
	t.Helper()
	opts := Options{URL: url, Prefix: fmt.Sprintf("t%x:", rand.Uint64()), Timeout: 2 * time.Second}
	if c != nil {
		opts.Now = c.Now
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// diffLimits are the limits the differential traces use, one per algorithm
// and a few shapes each.
func diffLimits() []sluice.Limit {
	var ls []sluice.Limit
	for _, a := range stack.Algorithms() {
		ls = append(ls,
			sluice.Limit{Algorithm: a, Quota: 3, Window: 10 * time.Millisecond},
			sluice.Limit{Algorithm: a, Quota: 7, Window: 999 * time.Microsecond * 7},
		)
		if stack.HasBurst(a) {
			ls = append(ls, sluice.Limit{Algorithm: a, Quota: 5, Window: 30 * time.Millisecond, Burst: 9})
		}
	}
	return ls
}

// largeLimits are limits with large quotas, for traces with weighted costs
// up to largeCost: enough to fill them, and to deny costs whose RetryAfter
// needs more units than algorithm.ExactRetryUnits to leave.
func largeLimits() []sluice.Limit {
	var ls []sluice.Limit
	for _, a := range stack.Algorithms() {
		ls = append(ls, sluice.Limit{Algorithm: a, Quota: 1000, Window: 60 * time.Millisecond})
	}
	return append(ls,
		sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 300, Window: 25 * time.Millisecond},
		sluice.Limit{Algorithm: sluice.Concurrency, Quota: 200, Window: 30 * time.Millisecond},
		sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1000, Window: 200 * time.Millisecond},
	)
}

const largeCost = 150

// runDiff replays a random trace against a memory store and st (both on
// clock c) and fails at the first Result that differs.
func runDiff(t *testing.T, st sluice.Store, c *storetest.Clock, seed uint64, steps int, keys []string) {
	t.Helper()
	runDiffLimits(t, st, c, seed, steps, keys, diffLimits(), 3, noActions)
}

// How a differential trace mixes in charges, refunds and resets.
type actionMix int

const (
	noActions    actionMix = iota
	mixedActions           // any op may be an action
	actionGroups           // a batch is all actions or all takes (a cross-slot batch may not mix them)
)

// runDiffLimits is runDiff over the given limits, with costs up to maxCost
// (charges and refunds up to twice that) and actions mixed in as mix says.
func runDiffLimits(t *testing.T, st sluice.Store, c *storetest.Clock, seed uint64, steps int, keys []string, limits []sluice.Limit, maxCost int, mix actionMix) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	mem := memory.New(memory.Options{Now: c.Now})
	defer mem.Close()
	keyLimit := map[string]sluice.Limit{}
	for i, k := range keys {
		keyLimit[k] = limits[i%len(limits)]
	}
	type pair struct {
		key    string
		mem, r uint64
	}
	var leases []pair
	ctx := context.Background()
	for step := range steps {
		switch x := rng.IntN(10); {
		case x < 6:
			c.Advance(time.Duration(rng.IntN(4000)) * time.Microsecond)
		case x < 7:
			c.Advance(time.Duration(rng.IntN(40)) * time.Millisecond)
		case x < 8 && step%17 == 0:
			c.Advance(-time.Duration(rng.IntN(3000)) * time.Microsecond)
		}
		n := 1 + rng.IntN(3)
		memOps := make([]sluice.Op, n)
		rOps := make([]sluice.Op, n)
		actions := mix == actionGroups && rng.IntN(3) == 0
		for i := range n {
			k := keys[rng.IntN(len(keys))]
			l := keyLimit[k]
			op := sluice.Op{Key: k, Limit: l, Cost: int64(rng.IntN(maxCost + 1))}
			if rng.IntN(8) == 0 {
				op.Cost = stack.Capacity(l) + 1
			}
			if actions || (mix == mixedActions && rng.IntN(4) == 0) {
				op.Action = []sluice.Action{sluice.Charge, sluice.Charge, sluice.Refund, sluice.Refund, sluice.Reset}[rng.IntN(5)]
				op.Cost = int64(rng.IntN(2*maxCost + 1))
				if l.Algorithm == sluice.Concurrency {
					op.Action = sluice.Reset
				}
			}
			memOps[i], rOps[i] = op, op
			if l.Algorithm == sluice.Concurrency && op.Action == sluice.Take && len(leases) > 0 && rng.IntN(3) == 0 {
				j := rng.IntN(len(leases))
				p := leases[j]
				if p.key == k {
					memOps[i] = sluice.Op{Key: k, Limit: l, Release: true, Lease: p.mem}
					rOps[i] = sluice.Op{Key: k, Limit: l, Release: true, Lease: p.r}
					leases = append(leases[:j], leases[j+1:]...)
				}
			}
		}
		want := make([]sluice.Result, n)
		got := make([]sluice.Result, n)
		if err := mem.Take(ctx, memOps, want); err != nil {
			t.Fatalf("step %d: memory Take: %v", step, err)
		}
		if err := st.Take(ctx, rOps, got); err != nil {
			t.Fatalf("step %d: redis Take(%+v): %v", step, rOps, err)
		}
		for i := range n {
			w, g := want[i], got[i]
			if (w.Lease != 0) != (g.Lease != 0) {
				t.Fatalf("step %d (seed %d) op %d %+v: lease %d, memory lease %d", step, seed, i, rOps[i], g.Lease, w.Lease)
			}
			if w.Lease != 0 {
				leases = append(leases, pair{rOps[i].Key, w.Lease, g.Lease})
			}
			w.Lease, g.Lease = 0, 0
			if w != g {
				t.Fatalf("step %d (seed %d, now %v) ops %+v\nop %d: got  %+v\n      want %+v (memory store)", step, seed, c.Now().UnixMicro(), rOps, i, g, w)
			}
		}
	}
}

func diffKeys(n int, tag string) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%sk%d", tag, i)
	}
	return ks
}

func TestDifferentialSingle(t *testing.T) {
	t.Parallel() // its own servers and fake clock: CPU, beside the tests that wait
	srv := redistest.Start(t)
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			c := storetest.NewClock()
			st := newTestStore(t, srv.URL(), c)
			runDiff(t, st, c, seed, 1500, diffKeys(len(diffLimits()), ""))
		})
	}
}

// TestDifferentialLargeQuota replays weighted traces on large quotas, on a
// single node and across cluster slots (where denials refund log entries).
func TestDifferentialLargeQuota(t *testing.T) {
	t.Parallel() // its own servers and fake clock: CPU, beside the tests that wait
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for _, tc := range []struct {
		name, url string
	}{{"single", srv.URL()}, {"cluster", cl.URL()}} {
		t.Run(tc.name, func(t *testing.T) {
			c := storetest.NewClock()
			st := newTestStore(t, tc.url, c)
			runDiffLimits(t, st, c, 11, 2500, diffKeys(len(largeLimits()), ""), largeLimits(), largeCost, noActions)
		})
	}
}

func TestDifferentialCluster(t *testing.T) {
	t.Parallel() // its own servers and fake clock: CPU, beside the tests that wait
	cl := redistest.StartCluster(t)
	for _, tc := range []struct {
		name string
		tag  string
	}{
		{"cross-slot", ""},     // each key its own slot: refunds on denial
		{"one-slot", "{acme}"}, // shared hash tag: one script call per Take
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := storetest.NewClock()
			st := newTestStore(t, cl.URL(), c)
			if !st.Cluster() {
				t.Fatal("store on a cluster URL is not in cluster mode")
			}
			runDiff(t, st, c, 7, 1500, diffKeys(len(diffLimits()), tc.tag))
		})
	}
}

// TestDifferentialActions replays traces with charges, refunds and resets
// mixed in (every algorithm, large quotas too, so that logs go into debt
// past algorithm.ExactRetryUnits), on a single node and a cluster: in one
// slot mixed freely, across slots in batches of actions only.
//
// Seeds 0 and 1 each give a pair of traces (small and large quotas). A seed
// replayed on the single node and in one slot of the cluster is the same
// trace through the same script, one call per Take to one node, and must
// give the memory store's Results for it, so the two runs' Results are the
// same, one by one (their outcomes, counted per algorithm, action, reason
// and batch size, were identical sequences). So the single node and the
// one-slot cluster each replay one of the two seeds, and every trace the
// test replayed when each ran both still replays once on that path; the
// cross-slot case (batches of actions split per slot, another path)
// replays both.
// SLUICE_DIFF_SEEDS=n replays seeds 0..n-1 in every case.
func TestDifferentialActions(t *testing.T) {
	t.Parallel() // its own servers and fake clock: CPU, beside the tests that wait
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	every := diffSeeds(t)
	for _, tc := range []struct {
		name, url, tag string
		mix            actionMix
		seeds          []uint64
	}{
		{"single", srv.URL(), "", mixedActions, []uint64{0}},
		{"cluster/one-slot", cl.URL(), "{acme}", mixedActions, []uint64{1}},
		{"cluster/cross-slot", cl.URL(), "", actionGroups, []uint64{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds := tc.seeds
			if every != nil {
				seeds = every
			}
			for _, seed := range seeds {
				c := storetest.NewClock()
				st := newTestStore(t, tc.url, c)
				runDiffLimits(t, st, c, 100+seed, 1500, diffKeys(len(diffLimits()), tc.tag), diffLimits(), 3, tc.mix)
				runDiffLimits(t, st, c, 200+seed, 1500, diffKeys(len(largeLimits()), tc.tag+"large"), largeLimits(), largeCost, tc.mix)
			}
		})
	}
}

// diffSeeds returns seeds 0..n-1 when SLUICE_DIFF_SEEDS=n is set, else nil
// (each test's own seeds).
func diffSeeds(t *testing.T) []uint64 {
	t.Helper()
	v := os.Getenv("SLUICE_DIFF_SEEDS")
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("SLUICE_DIFF_SEEDS=%q: want a count of seeds ≥ 1", v)
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i)
	}
	return seeds
}

// TestSingleScript checks the one-key baseline script the benchmarks
// compare against: it must decide as the store does.
func TestSingleScript(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	script := rueidis.NewLuaScript(singleScript)
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	defer mem.Close()
	limit := sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 5, Window: 10 * time.Millisecond, Burst: 8}
	spec := limitSpec(limit)
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 500 {
		clock.Advance(time.Duration(rng.IntN(3000)) * time.Microsecond)
		cost := int64(rng.IntN(4))
		want := make([]sluice.Result, 1)
		if err := mem.Take(context.Background(), []sluice.Op{{Key: "s", Limit: limit, Cost: cost}}, want); err != nil {
			t.Fatal(err)
		}
		now := strconv.FormatInt(clock.Now().UnixMicro(), 10)
		v, err := script.Exec(context.Background(), c, []string{"single"}, []string{spec, strconv.FormatInt(cost, 10), now}).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		got := sluice.Result{Allowed: v[0] == 0, Reason: sluice.Reason(v[0]), Limit: stack.Capacity(limit), Remaining: v[1],
			ResetAfter: time.Duration(v[2]) * time.Microsecond, RetryAfter: time.Duration(v[3]) * time.Microsecond,
			At: clock.Now().UnixMicro()} // the script decides at the now it is given
		if got != want[0] {
			t.Fatalf("step %d cost %d: single script %+v, memory store %+v", step, cost, got, want[0])
		}
	}
}
