package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// PropLimits are the limits the property tests run each algorithm with, one
// per algorithm: small quotas, windows that do not divide evenly, a burst
// above the quota. Each call returns a fresh slice.
func PropLimits() []sluice.Limit {
	return []sluice.Limit{
		{Algorithm: sluice.TokenBucket, Quota: 7, Window: 3 * time.Second, Burst: 10},
		{Algorithm: sluice.GCRA, Quota: 7, Window: 3 * time.Second, Burst: 10},
		{Algorithm: sluice.LeakyBucket, Quota: 5, Window: 700 * time.Millisecond, Burst: 4},
		{Algorithm: sluice.FixedWindow, Quota: 9, Window: 1500 * time.Millisecond},
		{Algorithm: sluice.SlidingWindow, Quota: 9, Window: 1300 * time.Millisecond},
		{Algorithm: sluice.SlidingLog, Quota: 6, Window: 900 * time.Millisecond},
		{Algorithm: sluice.Concurrency, Quota: 4, Window: 2 * time.Second},
	}
}

// runRetryAfter checks the contract of RetryAfter for every algorithm: with
// no other traffic, the denied op is allowed after waiting exactly RetryAfter
// and still denied one microsecond earlier. Three keys get the same random
// history; at the first denial one probes RetryAfter−1µs and one RetryAfter.
func runRetryAfter(t *testing.T, newStore NewStore) { retryAfter(t, newStore, false) }

// runRetryAfterSettle is runRetryAfter with charges (up to twice the
// capacity, so keys go into debt) and refunds mixed into the histories:
// RetryAfter stays exact.
func runRetryAfterSettle(t *testing.T, newStore NewStore) { retryAfter(t, newStore, true) }

func retryAfter(t *testing.T, newStore NewStore, settle bool) {
	clock := NewClock()
	s := newStore(t, clock)
	rng := rand.New(rand.NewPCG(1, 2))
	prefix := "retry"
	if settle {
		rng, prefix = rand.New(rand.NewPCG(3, 4)), "retrysettle"
	}
	for _, l := range PropLimits() {
		if settle && l.Algorithm == sluice.Concurrency {
			continue // no charges or refunds
		}
		checked := 0
		for trial := 0; trial < 60; trial++ {
			keys := sameKeys(prefix, l, trial)
			for step := 0; step < 200; step++ {
				clock.Advance(time.Duration(rng.Int64N(int64(l.Window)/3)) / time.Microsecond * time.Microsecond)
				if settle {
					switch rng.IntN(6) {
					case 0, 1:
						actSame(t, s, keys, sluice.Op{Limit: l, Cost: 1 + rng.Int64N(2*stack.Capacity(l)), Action: sluice.Charge})
					case 2:
						actSame(t, s, keys, sluice.Op{Limit: l, Cost: 1 + rng.Int64N(stack.Capacity(l)), Action: sluice.Refund})
					}
				}
				cost := 1 + rng.Int64N(stack.Capacity(l))
				res := takeSame(t, s, keys, l, cost)
				if res[0].Allowed {
					continue
				}
				wait := res[0].RetryAfter
				if wait <= 0 {
					t.Fatalf("%v: denied cost %d with RetryAfter %v, want > 0", l, cost, wait)
				}
				op := sluice.Op{Limit: l, Cost: cost}
				clock.Advance(wait - time.Microsecond)
				op.Key = keys[1]
				if r, _ := take1(s, op); r.Allowed {
					t.Errorf("%v: cost %d allowed after %v, RetryAfter said %v: %+v", l, cost, wait-time.Microsecond, wait, r)
				}
				clock.Advance(time.Microsecond)
				op.Key = keys[2]
				if r, _ := take1(s, op); !r.Allowed {
					t.Errorf("%v: cost %d denied after exactly RetryAfter %v: %+v", l, cost, wait, r)
				}
				checked++
				break
			}
		}
		if checked < 30 {
			t.Errorf("%v: only %d denials checked, want at least 30", l, checked)
		}
	}
}

// sameKeys names the three keys of one trial, which get one history.
func sameKeys(prefix string, l sluice.Limit, trial int) [3]string {
	var keys [3]string
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%v:%d:%d", prefix, l.Algorithm, trial, i)
	}
	return keys
}

// takeSame takes cost under l on each of keys, which share one history, and
// returns their results, failing the test unless they are the same.
func takeSame(t *testing.T, s sluice.Store, keys [3]string, l sluice.Limit, cost int64) [3]sluice.Result {
	t.Helper()
	return actSame(t, s, keys, sluice.Op{Limit: l, Cost: cost})
}

// actSame applies op to each of keys, which share one history, and returns
// their results, failing the test unless they are the same.
func actSame(t *testing.T, s sluice.Store, keys [3]string, op sluice.Op) [3]sluice.Result {
	t.Helper()
	var res [3]sluice.Result
	l := op.Limit
	for i, k := range keys {
		op.Key = k
		r, err := take1(s, op)
		if err != nil {
			t.Fatalf("%v: %v", l, err)
		}
		res[i] = r
	}
	if diff(res[0], res[1]) != "" || diff(res[0], res[2]) != "" {
		t.Fatalf("%v: same history, different results: %+v %+v %+v", l, res[0], res[1], res[2])
	}
	return res
}

// runRetryAfterLarge checks RetryAfter of the log algorithms on quotas
// above algorithm.ExactRetryUnits (64) with weighted costs: where at most 64
// units must leave (cost − Remaining ≤ 64) it is exact, as runRetryAfter
// checks; past that it is ResetAfter, and the cost is allowed then.
func runRetryAfterLarge(t *testing.T, newStore NewStore) {
	const bound = 64
	clock := NewClock()
	s := newStore(t, clock)
	rng := rand.New(rand.NewPCG(5, 8))
	for _, l := range []sluice.Limit{
		{Algorithm: sluice.SlidingLog, Quota: 300, Window: time.Second},
		{Algorithm: sluice.Concurrency, Quota: 200, Window: 2 * time.Second},
	} {
		var exact, bounded int
		for trial := 0; trial < 80; trial++ {
			keys := sameKeys("retrylarge", l, trial)
			for step := 0; step < 200; step++ {
				clock.Advance(time.Duration(rng.Int64N(int64(l.Window)/20)) / time.Microsecond * time.Microsecond)
				cost := 1 + rng.Int64N(stack.Capacity(l))
				res := takeSame(t, s, keys, l, cost)
				if res[0].Allowed {
					continue
				}
				wait, need := res[0].RetryAfter, cost-res[0].Remaining
				if need > bound && wait != res[0].ResetAfter {
					t.Errorf("%v: cost %d needs %d units to leave: RetryAfter %v, want ResetAfter %v", l, cost, need, wait, res[0].ResetAfter)
				}
				op := sluice.Op{Limit: l, Cost: cost}
				clock.Advance(wait - time.Microsecond)
				op.Key = keys[1]
				if r, _ := take1(s, op); r.Allowed && need <= bound {
					t.Errorf("%v: cost %d (%d units to leave) allowed after %v, RetryAfter said %v: %+v", l, cost, need, wait-time.Microsecond, wait, r)
				}
				clock.Advance(time.Microsecond)
				op.Key = keys[2]
				if r, _ := take1(s, op); !r.Allowed {
					t.Errorf("%v: cost %d (%d units to leave) denied after RetryAfter %v: %+v", l, cost, need, wait, r)
				}
				if need <= bound {
					exact++
				} else {
					bounded++
				}
				break
			}
		}
		t.Logf("%v: %d exact and %d bounded RetryAfters checked", l, exact, bounded)
		if exact < 15 || bounded < 15 {
			t.Errorf("%v: %d exact and %d bounded denials checked, want at least 15 each", l, exact, bounded)
		}
	}
}

// runConcurrency hammers one key of each exact algorithm from many
// goroutines with the clock frozen: exactly the capacity is admitted. Then
// the clock moves one window on and it happens again.
func runConcurrency(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	const goroutines, perG = 32, 50
	for _, l := range append(settleLimits(), sluice.Limit{Algorithm: sluice.Concurrency, Quota: 64, Window: time.Minute}) {
		key := "hammer:" + l.Algorithm.String()
		for round := 0; round < 2; round++ {
			var admitted atomic.Int64
			err := hammer(goroutines, perG, func(int, int) error {
				r, err := take1(s, sluice.Op{Key: key, Limit: l, Cost: 1})
				if r.Allowed {
					admitted.Add(1)
				}
				return err
			})
			if err != nil {
				t.Fatalf("%v: %v", l, err)
			}
			want := stack.Capacity(l)
			if got := admitted.Load(); got != want {
				t.Errorf("%v round %d: %d goroutines × %d hits admitted %d, want exactly %d", l, round, goroutines, perG, got, want)
			}
			// Move on far enough that the key is fresh again: two windows
			// for sliding_window, burst intervals for the buckets.
			clock.Advance(2*l.Window + time.Duration(stack.Capacity(l))*l.Window)
		}
	}
}

// runBatchConcurrency: many goroutines take batches of two limits that share
// one key; the tighter limit denies some batches, and the looser limit's
// count shows that denied batches charged nothing.
func runBatchConcurrency(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	tight := sluice.Op{Key: "bc:tight", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 40, Window: time.Minute}, Cost: 1}
	loose := sluice.Op{Key: "bc:loose", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 1000, Window: time.Minute}, Cost: 1}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]sluice.Result, 2)
			for i := 0; i < 20; i++ {
				if err := s.Take(context.Background(), []sluice.Op{loose, tight}, res); err != nil {
					t.Error(err)
					return
				}
				if res[0].Allowed && res[1].Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 40 {
		t.Errorf("admitted %d batches, want 40", got)
	}
	r, err := take1(s, withCost(loose, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := 1000 - r.Remaining; got != 40 {
		t.Errorf("loose limit charged %d times, want 40 (denied batches must charge nothing)", got)
	}
}

// hammer runs f(g, i) for i < perG in each of goroutines goroutines g, all
// at once, and returns the first error (a goroutine stops at its first).
func hammer(goroutines, perG int, f func(g, i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				if err := f(g, i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
