package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// hammer has nodes stores (separate clients, as separate service instances
// would be) × workers goroutines take cost 1 from one key, tries times each,
// and returns how many were admitted. With batch set, each Take also takes
// from a second key with the same hash tag, so only whole batches count.
func hammer(t *testing.T, stores []*Store, workers, tries int, limit sluice.Limit, key string, batch bool) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*workers)
	for _, st := range stores {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ops := []sluice.Op{{Key: key, Limit: limit, Cost: 1}}
				if batch {
					ops = append(ops, sluice.Op{Key: key + ":second", Limit: limit, Cost: 1})
				}
				res := make([]sluice.Result, len(ops))
				for range tries {
					if err := st.Take(context.Background(), ops, res); err != nil {
						errs <- err
						return
					}
					all := true
					for _, r := range res {
						all = all && r.Allowed
					}
					if all {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Take: %v", err)
	}
	return admitted.Load()
}

func TestConcurrentNodes(t *testing.T) {
	t.Parallel() // its own servers and keys; exact counts under a still clock, 5 s timeouts
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var url string
			if mode == "single" {
				url = redistest.Start(t).URL()
			} else {
				url = redistest.StartCluster(t).URL()
			}
			clock := storetest.NewClock() // stands still: the quota is all there is
			var stores []*Store
			prefix := fmt.Sprintf("conc%d:", time.Now().UnixNano())
			for range 3 {
				st, err := New(Options{URL: url, Prefix: prefix, Now: clock.Now, Timeout: 5 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				stores = append(stores, st)
			}
			const quota = 100
			for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingLog, sluice.Concurrency} {
				for _, batch := range []bool{false, true} {
					limit := sluice.Limit{Algorithm: a, Quota: quota, Window: time.Hour}
					key := fmt.Sprintf("{hot}:%v:%v", a, batch)
					got := hammer(t, stores, 32, 4, limit, key, batch)
					if got != quota {
						t.Errorf("%v (batch %v): 3 stores × 32 goroutines admitted %d, want exactly %d", a, batch, got, quota)
					}
				}
			}
		})
	}
}

// TestCrossSlotRefunds: in a cluster, batches whose keys live in different
// slots are charged per slot and refunded when another slot denies. Under
// contention from 3 stores the loose limits must end up charged exactly
// once per admitted batch: refunds that race with other charges subtract
// instead of restoring.
func TestCrossSlotRefunds(t *testing.T) {
	t.Parallel() // its own Cluster; exact counts, hour-long windows, 5 s timeouts
	url := redistest.StartCluster(t).URL()
	for _, fake := range []bool{true, false} {
		t.Run(fmt.Sprintf("fake clock %v", fake), func(t *testing.T) { crossSlotRefunds(t, url, fake) })
	}
}

// crossSlotRefunds runs the test with a frozen fake clock, or with Redis
// TIME and hour-long windows (then up to one unit may refill meanwhile).
func crossSlotRefunds(t *testing.T, url string, fake bool) {
	var now func() time.Time
	if fake {
		now = storetest.NewClock().Now
	}
	prefix := fmt.Sprintf("xs%d:", time.Now().UnixNano())
	var stores []*Store
	for range 3 {
		st, err := New(Options{URL: url, Prefix: prefix, Now: now, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores = append(stores, st)
	}
	tight := sluice.Op{Key: "xs:tight", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 40, Window: time.Hour}, Cost: 1}
	loose := []sluice.Op{
		{Key: "xs:tb", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1000, Window: time.Hour}, Cost: 1},
		{Key: "xs:gcra", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: time.Hour}, Cost: 1},
		{Key: "xs:fw", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour}, Cost: 1},
		{Key: "xs:sw", Limit: sluice.Limit{Algorithm: sluice.SlidingWindow, Quota: 1000, Window: time.Hour}, Cost: 1},
		{Key: "xs:log", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 1000, Window: time.Hour}, Cost: 1},
	}
	ops := append([]sluice.Op{tight}, loose...)
	for i := range ops {
		for j := range i {
			if slotOf(redisKey(prefix, ops[i].Limit.Algorithm, ops[i].Key)) == slotOf(redisKey(prefix, ops[j].Limit.Algorithm, ops[j].Key)) {
				t.Fatalf("test keys %q and %q share a slot; pick others", ops[i].Key, ops[j].Key)
			}
		}
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, st := range stores {
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := make([]sluice.Result, len(ops))
				for range 5 {
					if err := st.Take(context.Background(), ops, res); err != nil {
						t.Error(err)
						return
					}
					all := true
					for _, r := range res {
						all = all && r.Allowed
					}
					if all {
						admitted.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != tight.Limit.Quota {
		t.Errorf("admitted %d batches, want %d", got, tight.Limit.Quota)
	}
	for _, op := range loose {
		op.Cost = 0
		res := make([]sluice.Result, 1)
		if err := stores[0].Take(context.Background(), []sluice.Op{op}, res); err != nil {
			t.Fatal(err)
		}
		charged, want := op.Limit.Quota-res[0].Remaining, admitted.Load()
		// With Redis TIME a bucket may refill a unit during the test (one
		// per 3.6s), and a window may roll over at the hour.
		if charged != want && (fake || charged > want || charged < want-1) {
			t.Errorf("%v: charged %d, want %d (one per admitted batch; denied batches refunded)", op.Limit, charged, want)
		}
	}
}
