package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestCrossSlotFailureRefunds: in a cluster with one master of three
// SIGSTOPped, Takes whose ops span slots on the healthy masters (one op per
// algorithm) and the stopped one fail, with the error of the failure (the
// store timeout, or the caller's context); the charges the healthy slots made
// are refunded, so their keys end at full quota. Batches run concurrently,
// with the stopped master's op first or last, under a frozen fake clock and
// under Redis TIME.
func TestCrossSlotFailureRefunds(t *testing.T) {
	t.Parallel() // its own Cluster and keys; it mostly waits out timeouts
	if testing.Short() {
		t.Skip("starts a Redis Cluster; skipped with -short")
	}
	c := redistest.StartCluster(t)
	victim := c.Servers[0]
	// A long write timeout keeps the connection to the stopped master open,
	// so that its calls time out rather than fail on a closed connection.
	url := c.URL() + "&write_timeout=30s"
	const timeout = 300 * time.Millisecond
	for _, fake := range []bool{true, false} {
		var now func() time.Time
		if fake {
			now = storetest.NewClock().Now
		}
		st, err := New(Options{URL: url, Prefix: fmt.Sprintf("undo%v:", fake), Now: now, Timeout: timeout,
			// The breaker would refuse the stopped master's keys before
			// anything is charged: keep it closed to test the refunds.
			Breaker: BreakerOptions{ConsecutiveTimeouts: 1 << 20, MinCalls: 1 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		onVictim := func(op sluice.Op) bool {
			return st.nodeFor(slotOf(redisKey(st.prefix, op.Limit.Algorithm, op.Key))).name() == victim.Addr()
		}

		tests := []struct {
			name     string
			wait     time.Duration // the caller's context timeout, 0 for none
			wantKind error
		}{
			{"store timeout", 0, sluice.ErrStoreTimeout},
			{"caller gives up", timeout / 6, context.DeadlineExceeded},
		}
		for ti, tt := range tests {
			t.Run(fmt.Sprintf("fake clock %v/%s", fake, tt.name), func(t *testing.T) {
				// One op per algorithm on the healthy masters, each in a
				// slot of its own, and one on the stopped master.
				var healthy []sluice.Op
				slots := map[int]bool{}
				for _, a := range stack.Algorithms() {
					for i := 0; ; i++ {
						op := sluice.Op{Key: fmt.Sprintf("xf%d:%v:%d", ti, a, i), Limit: sluice.Limit{Algorithm: a, Quota: 100, Window: time.Hour}, Cost: 1}
						sl := slotOf(redisKey(st.prefix, a, op.Key))
						if !onVictim(op) && !slots[sl] {
							slots[sl] = true
							healthy = append(healthy, op)
							break
						}
					}
				}
				var stopped sluice.Op
				for i := 0; ; i++ {
					stopped = sluice.Op{Key: fmt.Sprintf("xf%d:victim:%d", ti, i), Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 100, Window: time.Hour}, Cost: 1}
					if onVictim(stopped) {
						break
					}
				}
				// The healthy keys charge and answer while the master is up.
				checkFull(t, st, healthy, 0)
				for _, op := range healthy {
					res := make([]sluice.Result, 1)
					if err := st.Take(context.Background(), []sluice.Op{op}, res); err != nil || !res[0].Allowed {
						t.Fatalf("%v before the stop: Take = %+v, %v; want allowed", op.Limit.Algorithm, res[0], err)
					}
					op.Cost = 0
					if err := st.Take(context.Background(), []sluice.Op{op}, res); err != nil || res[0].Remaining != res[0].Limit-1 {
						t.Fatalf("%v before the stop: look = %+v, %v; want remaining %d", op.Limit.Algorithm, res[0], err, res[0].Limit-1)
					}
				}
				resetAll(t, st, healthy)
				checkFull(t, st, healthy, 0)

				victim.Pause()
				defer victim.Resume()
				const workers, batches = 4, 2
				var wg sync.WaitGroup
				errs := make(chan error, workers*batches)
				for w := range workers {
					wg.Go(func() {
						ops := append([]sluice.Op{stopped}, healthy...)
						if w%2 == 1 {
							ops = append(append([]sluice.Op(nil), healthy...), stopped)
						}
						res := make([]sluice.Result, len(ops))
						for range batches {
							ctx, cancel := context.Background(), context.CancelFunc(func() {})
							if tt.wait > 0 {
								ctx, cancel = context.WithTimeout(ctx, tt.wait)
							}
							errs <- st.Take(ctx, ops, res)
							cancel()
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if !errors.Is(err, tt.wantKind) {
						t.Errorf("Take across a stopped master = %v, want an error wrapping %v", err, tt.wantKind)
					}
				}
				// Refunds of callers that gave up finish in the background,
				// within a store timeout or two: polled for up to a minute.
				checkFull(t, st, healthy, time.Minute)
				if n := st.Stats().RefundFailures; n != 0 {
					t.Errorf("Stats().RefundFailures = %d, want 0", n)
				}
			})
		}
	}
}

// checkFull fails the test unless a look at each op's key shows its full
// quota within wait (0: at once).
func checkFull(t *testing.T, st *Store, ops []sluice.Op, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for _, op := range ops {
		op.Cost = 0
		res := make([]sluice.Result, 1)
		for {
			if err := st.Take(context.Background(), []sluice.Op{op}, res); err != nil {
				t.Fatalf("look at %v %q: %v", op.Limit.Algorithm, op.Key, err)
			}
			if res[0].Remaining == res[0].Limit || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if res[0].Remaining != res[0].Limit {
			t.Errorf("%v %q: remaining %d after failed batches, want the full %d (no charge kept)",
				op.Limit.Algorithm, op.Key, res[0].Remaining, res[0].Limit)
		}
	}
}

// resetAll resets the keys of ops.
func resetAll(t *testing.T, st *Store, ops []sluice.Op) {
	t.Helper()
	for _, op := range ops {
		op.Action = sluice.Reset
		if err := st.Take(context.Background(), []sluice.Op{op}, make([]sluice.Result, 1)); err != nil {
			t.Fatalf("reset %v %q: %v", op.Limit.Algorithm, op.Key, err)
		}
	}
}
