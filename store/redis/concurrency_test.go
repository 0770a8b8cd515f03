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
