package hybrid

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The hybrid store over a real three-master Redis Cluster: several
// instances share keys spread over the masters' slots, and half the Takes
// are batches of two keys in different slots (a request limited per user
// and per tenant), so allotments are leased from every master in pipelined
// calls and global decisions are cross-slot (per-slot atomic, refunded on
// denial). The stated bounds must hold for every key.

// clusterKeys are n keys without a hash tag of their own: each gets its own
// slot.
func clusterKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("cl:%d", i)
	}
	return keys
}

// batch is one Take: the indices of its keys (one, or two in different
// slots).
type batch []int

// mixBatches draws n batches over nKeys keys, half of them pairs, and deals
// them to the instances by weight.
func mixBatches(rng *rand.Rand, nKeys, n int, weights []int) [][]batch {
	total := 0
	for _, w := range weights {
		total += w
	}
	work := make([][]batch, len(weights))
	for range n {
		b := batch{rng.IntN(nKeys)}
		if rng.IntN(2) == 0 {
			o := rng.IntN(nKeys - 1)
			if o >= b[0] {
				o++
			}
			b = append(b, o)
		}
		i, r := 0, rng.IntN(total)
		for r >= weights[i] {
			r -= weights[i]
			i++
		}
		work[i] = append(work[i], b)
	}
	return work
}

// driveBatches runs each instance's batches in order, the instances
// concurrently, and returns per key the units admitted (each admitted
// batch charges each of its keys 1).
func (f *fleet) driveBatches(t *testing.T, keys []string, l sluice.Limit, work [][]batch) []int {
	t.Helper()
	admitted := make([]int, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, bs := range work {
		wg.Go(func() {
			ops := make([]sluice.Op, 0, 2)
			res := make([]sluice.Result, 2)
			for _, b := range bs {
				ops = ops[:0]
				for _, k := range b {
					ops = append(ops, sluice.Op{Key: keys[k], Limit: l, Cost: 1})
				}
				if err := f.inst[i].Take(context.Background(), ops, res[:len(ops)]); err != nil {
					t.Errorf("instance %d: Take %v: %v", i, b, err)
					return
				}
				// A denied batch charges nothing; its other op reports a look.
				if res[0].Allowed && (len(b) == 1 || res[1].Allowed) {
					mu.Lock()
					for _, k := range b {
						admitted[k]++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return admitted
}

// checkSpread fails unless every master of c holds some of the test's
// keys, so that the test did lease from and decide on all three.
func checkSpread(t *testing.T, c *redistest.Cluster) {
	t.Helper()
	for _, s := range c.Servers {
		n, err := s.Do("DBSIZE")
		if err != nil || n == int64(0) {
			t.Errorf("master %s: DBSIZE = %v, %v; want keys on every master", s.Addr(), n, err)
		}
		t.Logf("master %s holds %v keys", s.Addr(), n)
	}
}

// checkBothPaths fails unless the fleet decided both from allotments and
// in Redis, and leased allotments.
func (f *fleet) checkBothPaths(t *testing.T) {
	t.Helper()
	var local, global, allots uint64
	for _, h := range f.inst {
		st := h.Stats()
		local, global, allots = local+st.Local, global+st.Global, allots+st.Allots
	}
	t.Logf("fleet: %d ops decided locally, %d in Redis, %d allotment requests", local, global, allots)
	if local == 0 || global == 0 || allots == 0 {
		t.Errorf("fleet: %d local, %d global decisions and %d allotment requests, want all > 0", local, global, allots)
	}
}

// TestClusterFixedWindowBound: over a Redis Cluster, four instances with
// skewed traffic never admit more than the quota of any key in any window,
// demand rising from below the limit to 3× it in each window.
func TestClusterFixedWindowBound(t *testing.T) {
	t.Parallel() // its own Cluster, fleet and fake clock
	if testing.Short() {
		t.Skip("starts a Redis Cluster; skipped with -short")
	}
	c := redistest.StartCluster(t)
	const quota, nKeys, windows = 100, 9, 4
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: quota, Window: time.Second}
	f := newFleetAt(t, c.URL(), 4, Options{})
	keys := clusterKeys(nKeys)
	weights := []int{50, 25, 15, 10}
	rng := rand.New(rand.NewPCG(3, 4))
	for w := range windows {
		f.clock.Set(storetest.Epoch.Add(time.Duration(w) * time.Second))
		admitted := make([]int, nKeys)
		// Ten steps per window; a batch holds 1.5 keys on average, so a
		// key's demand is 6 × (step+1) a step: 330 in the window.
		for step := range 10 {
			got := f.driveBatches(t, keys, l, mixBatches(rng, nKeys, 4*(step+1)*nKeys, weights))
			for k := range got {
				admitted[k] += got[k]
			}
			f.clock.Advance(90 * time.Millisecond)
		}
		for k, n := range admitted {
			if n > quota {
				t.Errorf("window %d, key %s: admitted %d, want ≤ quota %d", w, keys[k], n, quota)
			}
			// Unspent reservations and pairs refused for their other key
			// are the only losses.
			if n < quota/2 {
				t.Errorf("window %d, key %s: admitted %d of demand ~330, want ≥ %d", w, keys[k], n, quota/2)
			}
		}
		t.Logf("window %d: admitted per key %v (quota %d)", w, admitted, quota)
	}
	checkSpread(t, c)
	f.checkBothPaths(t)
}

// clusterGCRASeeds are the seeds TestClusterGCRABound runs by default;
// SLUICE_GCRA_SEEDS=n runs seeds 1..n instead.
var clusterGCRASeeds = func() []uint64 {
	seeds := make([]uint64, 0, 40)
	for s := range uint64(40) {
		seeds = append(seeds, s+1)
	}
	return seeds
}()

// TestClusterGCRABound: over a Redis Cluster, for every key and every
// interval [a, b], the fleet admits at most burst + rate×(b−a) + the units
// held at a, where held counts the units of allotments unspent and the
// grants in flight (taken from the bucket by the global store, not yet
// applied by the instance that asked: a background refill under way). It
// runs over many seeds, each a subtest named by its seed.
func TestClusterGCRABound(t *testing.T) {
	t.Parallel() // its own Cluster; each seed its own fleet, keys and fake clock
	if testing.Short() {
		t.Skip("starts a Redis Cluster; skipped with -short")
	}
	seeds := clusterGCRASeeds
	if v := os.Getenv("SLUICE_GCRA_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_GCRA_SEEDS=%q: want a count of seeds ≥ 1", v)
		}
		seeds = seeds[:0]
		for s := range uint64(n) {
			seeds = append(seeds, s+1)
		}
	}
	c := redistest.StartCluster(t)
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel() // a fleet, keys and clock of its own: seeds share only the Cluster
			clusterGCRARun(t, c, seed)
		})
	}
}

// clusterGCRARun is one seed of TestClusterGCRABound, on keys of its own.
func clusterGCRARun(t *testing.T, c *redistest.Cluster, seed uint64) {
	const nKeys, steps = 9, 150
	const dt = 10 * time.Millisecond
	l := sluice.Limit{Algorithm: sluice.GCRA, Quota: 100, Window: time.Second, Burst: 50}
	f := newFleetAt(t, c.URL(), 4, Options{Horizon: 200 * time.Millisecond})
	keys := clusterKeys(nKeys)
	for k := range keys {
		keys[k] = fmt.Sprintf("s%d:%s", seed, keys[k])
	}
	weights := []int{60, 25, 10, 5}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	adm := make([][]int, steps)    // [step][key]
	held := make([][]int64, steps) // [step][key], before the step's hits
	inFlight := int64(0)           // of held, summed over steps and keys: the grants in flight
	for s := range steps {
		held[s] = make([]int64, nKeys)
		resume := f.pause()
		for k, key := range keys {
			var fl int64
			held[s][k], fl = f.heldAt(key, l)
			inFlight += fl
		}
		resume()
		// A third of the run at about half the rate (0.5 hits a key a
		// step: allotments last), then at 2.4 times it (the reserve, and
		// Redis, decide).
		n := 1 + rng.IntN(5)
		if s >= steps/3 {
			n = 1 + rng.IntN(3*nKeys)
		}
		adm[s] = f.driveBatches(t, keys, l, mixBatches(rng, nKeys, n, weights))
		f.clock.Advance(dt)
	}
	t.Logf("seed %d: %d unit-steps of held were grants in flight", seed, inFlight)
	for k, key := range keys {
		a, h := make([]int, steps), make([]int64, steps)
		for s := range steps {
			a[s], h[s] = adm[s][k], held[s][k]
		}
		total := checkGCRA(t, fmt.Sprintf("%s (seed %d)", key, seed), l, dt, a, h)
		if exact := stack.Params(l).Burst + steps*dt.Microseconds()/stack.Params(l).Interval; int64(total) < exact/2 {
			t.Errorf("seed %d, key %s: admitted %d in the run under twice the rate of demand, want ≥ %d", seed, key, total, exact/2)
		}
	}
	checkSpread(t, c)
	f.checkBothPaths(t)
}
