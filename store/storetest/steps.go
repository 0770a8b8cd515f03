package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// Step is one row of a step table: at At (offset from Epoch), apply Cost to
// Key with Action (Take by default), or release the lease granted at step
// ReleaseOf (1-based; -1 releases a lease that never existed), and expect
// Want. Want.Lease is compared only as zero or non-zero, since stores choose
// lease numbers.
type Step struct {
	At        time.Duration
	Key       string
	Cost      int64
	Action    sluice.Action
	ReleaseOf int
	// Pair, when not 0, makes the op a reservation of reserve-then-settle
	// (sluice.Op.Lease) named Pair, reserving Reserve units when Cost is
	// 0, its record living PairWithin.
	Pair    uint64
	Reserve int64
	// Void, with Pair, voids the reservation (sluice.Op.Release).
	Void bool
	Want sluice.Result
}

// Table is a named step table for one limit.
type Table struct {
	Name  string
	Limit sluice.Limit
	Steps []Step
}

const us = time.Microsecond

// ok, limited and tooHigh build expected Results; durations in microseconds.
func ok(limit, remaining int64, reset int64) sluice.Result {
	return sluice.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: time.Duration(reset) * us}
}

func leased(limit, remaining, reset int64) sluice.Result {
	r := ok(limit, remaining, reset)
	r.Lease = 1 // any non-zero lease
	return r
}

func limited(limit, remaining, reset, retry int64) sluice.Result {
	return sluice.Result{Reason: sluice.ReasonLimited, Limit: limit, Remaining: remaining,
		ResetAfter: time.Duration(reset) * us, RetryAfter: time.Duration(retry) * us}
}

func tooHigh(limit, remaining, reset int64) sluice.Result {
	return sluice.Result{Reason: sluice.ReasonCostTooHigh, Limit: limit, Remaining: remaining, ResetAfter: time.Duration(reset) * us}
}

const (
	ms   = 1000
	sec  = 1000 * ms
	hour = 3600 * sec
)

func at(micros int64) time.Duration { return time.Duration(micros) * us }

// delayed returns a function that sets a Result's Delay (µs) when delay is
// set (leaky_bucket) and leaves it zero otherwise.
func delayed(delay bool) func(sluice.Result, int64) sluice.Result {
	return func(r sluice.Result, us int64) sluice.Result {
		if delay {
			r.Delay = time.Duration(us) * time.Microsecond
		}
		return r
	}
}

// bucketSteps is the table shared by token_bucket and gcra (they decide
// identically): 3 per second, burst 3, so the interval is ⌈1e6/3⌉ = 333334µs
// and the bucket holds 3 × 333334 = 1000002µs of work.
func bucketSteps(delay bool) []Step {
	d := delayed(delay)
	return []Step{
		{At: at(0), Cost: 1, Want: ok(3, 2, 333334)},
		{At: at(0), Cost: 0, Want: ok(3, 2, 333334)},                           // a look charges nothing
		{At: at(0), Cost: 2, Want: d(ok(3, 0, 1000002), 333334)},               // cost 2 fills the bucket
		{At: at(0), Cost: 1, Want: limited(3, 0, 1000002, 333334)},             // one interval to wait
		{At: at(333333), Cost: 1, Want: limited(3, 0, 666669, 1)},              // 1µs early
		{At: at(333334), Cost: 1, Want: d(ok(3, 0, 1000002), 666668)},          // exactly on time
		{At: at(333334), Cost: 4, Want: tooHigh(3, 0, 1000002)},                // more than the burst, ever
		{At: at(3 * hour), Cost: 1, Want: ok(3, 2, 333334)},                    // idle for hours: full again
		{At: at(3 * hour), Cost: 1, Want: d(ok(3, 1, 666668), 333334)},         // clock standing still
		{At: at(3 * hour), Cost: 1, Want: d(ok(3, 0, 1000002), 666668)},        //
		{At: at(3 * hour), Cost: 1, Want: limited(3, 0, 1000002, 333334)},      //
		{At: at(3*hour - sec), Cost: 1, Want: limited(3, 0, 2000002, 1333334)}, // clock 1s back: no extra quota
		{At: at(3*hour + 1000002), Cost: 3, Want: ok(3, 0, 1000002)},           // back to full once the clock catches up
	}
}

// Tables returns the hand-computed step tables for every algorithm. Each
// expectation follows from the algorithm's definition in package algorithm;
// the comments give the arithmetic where it is not obvious.
func Tables() []Table {
	three := func(a sluice.Algorithm) sluice.Limit {
		return sluice.Limit{Algorithm: a, Quota: 3, Window: time.Second}
	}
	return append([]Table{
		{Name: "token_bucket", Limit: three(sluice.TokenBucket), Steps: bucketSteps(false)},
		{Name: "gcra", Limit: three(sluice.GCRA), Steps: bucketSteps(false)},
		{Name: "leaky_bucket", Limit: three(sluice.LeakyBucket), Steps: bucketSteps(true)},
		{Name: "token_bucket/burst", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1, Window: 100 * time.Millisecond, Burst: 5}, Steps: []Step{
			// interval 100000µs, capacity 5 × 100000µs.
			{At: at(0), Cost: 5, Want: ok(5, 0, 500000)},
			{At: at(0), Cost: 1, Want: limited(5, 0, 500000, 100000)},
			{At: at(250000), Cost: 2, Want: ok(5, 0, 450000)}, // 2.5 tokens back, 2 taken
			{At: at(250000), Cost: 1, Want: limited(5, 0, 450000, 50000)},
			{At: at(250000), Cost: 6, Want: tooHigh(5, 0, 450000)},
		}},
		{Name: "fixed_window", Limit: three(sluice.FixedWindow), Steps: []Step{
			{At: at(0), Cost: 1, Want: ok(3, 2, sec)},
			{At: at(0), Cost: 0, Want: ok(3, 2, sec)},
			{At: at(500000), Cost: 2, Want: ok(3, 0, 500000)},
			{At: at(999999), Cost: 1, Want: limited(3, 0, 1, 1)},
			{At: at(sec), Cost: 1, Want: ok(3, 2, sec)}, // a new window
			{At: at(sec), Cost: 4, Want: tooHigh(3, 2, sec)},
			{At: at(999999), Cost: 3, Want: limited(3, 2, 1000001, 1000001)}, // clock back: the spent window is not reopened
			{At: at(3 * hour), Cost: 3, Want: ok(3, 0, sec)},
			{At: at(3*hour + 90*ms), Cost: 0, Want: ok(3, 0, 910000)},
		}},
		{Name: "fixed_window/90s", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2, Window: 90 * time.Second}, Steps: []Step{
			// Epoch is 2026-01-01T00:00:00Z = 1767225600s; 1767225600 mod 90 = 0.
			{At: at(10 * sec), Cost: 2, Want: ok(2, 0, 80*sec)},
			{At: at(89 * sec), Cost: 1, Want: limited(2, 0, sec, sec)},
			{At: at(90 * sec), Cost: 1, Want: ok(2, 1, 90*sec)},
		}},
		{Name: "sliding_window", Limit: three(sluice.SlidingWindow), Steps: []Step{
			{At: at(0), Cost: 1, Want: ok(3, 2, 2*sec)},
			{At: at(0), Cost: 0, Want: ok(3, 2, 2*sec)},
			{At: at(500000), Cost: 2, Want: ok(3, 0, 1500000)},
			// Next window: ⌈3 × (1e6 − e)/1e6⌉ + 1 ≤ 3 first holds at e = 333334.
			{At: at(999999), Cost: 1, Want: limited(3, 0, 1000001, 333335)},
			{At: at(1333334), Cost: 1, Want: ok(3, 0, 1666666)},
			{At: at(1333334), Cost: 4, Want: tooHigh(3, 0, 1666666)},
			// ⌈3 × (1e6 − e)/1e6⌉ ≤ 1 first holds at e = 666667.
			{At: at(1333334), Cost: 1, Want: limited(3, 0, 1666666, 333333)},
			{At: at(1666667), Cost: 1, Want: ok(3, 0, 1333333)},
			// Clock back to e = 0: estimate 3 + 2; allowed again at the next
			// window's start, where the estimate is 2 + 1.
			{At: at(sec), Cost: 1, Want: limited(3, 0, 2*sec, sec)},
			{At: at(3 * hour), Cost: 3, Want: ok(3, 0, 2*sec)},
		}},
		{Name: "sliding_log", Limit: three(sluice.SlidingLog), Steps: []Step{
			{At: at(0), Cost: 1, Want: ok(3, 2, sec)},
			{At: at(0), Cost: 0, Want: ok(3, 2, sec)},
			{At: at(500000), Cost: 2, Want: ok(3, 0, sec)},
			{At: at(999999), Cost: 1, Want: limited(3, 0, 500001, 1)}, // the entry at 0 leaves at 1e6
			{At: at(sec), Cost: 1, Want: ok(3, 0, sec)},
			{At: at(sec), Cost: 4, Want: tooHigh(3, 0, sec)},
			{At: at(sec), Cost: 2, Want: limited(3, 0, sec, 500000)},        // needs the 2 admitted at 0.5s to leave
			{At: at(600000), Cost: 1, Want: limited(3, 0, 1400000, 900000)}, // clock back
			{At: at(3 * hour), Cost: 3, Want: ok(3, 0, sec)},
		}},
		{Name: "concurrency", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 2, Window: 10 * time.Second}, Steps: []Step{
			{At: at(0), Cost: 1, Want: leased(2, 1, 10*sec)},
			{At: at(sec), Cost: 1, Want: leased(2, 0, 10*sec)},
			{At: at(2 * sec), Cost: 1, Want: limited(2, 0, 9*sec, 8*sec)}, // the first lease expires at 10s
			{At: at(2 * sec), ReleaseOf: 1, Want: ok(2, 1, 9*sec)},
			{At: at(2 * sec), Cost: 1, Want: leased(2, 0, 10*sec)},
			{At: at(2 * sec), Cost: 3, Want: tooHigh(2, 0, 10*sec)},
			{At: at(11 * sec), Cost: 1, Want: leased(2, 0, 10*sec)}, // the lease of 1s expired at 11s
			{At: at(11 * sec), ReleaseOf: -1, Want: ok(2, 0, 10*sec)},
			{At: at(12 * sec), Cost: 0, Want: ok(2, 1, 9*sec)},
		}},
		// Large quotas and weighted costs: RetryAfter is exact while the
		// units that must leave number at most algorithm.ExactRetryUnits
		// (64), and ResetAfter past that.
		{Name: "sliding_log/weighted", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 100, Window: time.Second}, Steps: []Step{
			{At: at(0), Cost: 70, Want: ok(100, 30, sec)},
			{At: at(100 * ms), Cost: 20, Want: ok(100, 10, sec)},
			{At: at(200 * ms), Cost: 10, Want: ok(100, 0, sec)},
			{At: at(300 * ms), Cost: 64, Want: limited(100, 0, 900*ms, 700*ms)}, // 64 must leave: the 70 at 0 do, at 1s
			{At: at(300 * ms), Cost: 66, Want: limited(100, 0, 900*ms, 900*ms)}, // 66 must leave: past the bound, when all have
			{At: at(300 * ms), Cost: 101, Want: tooHigh(100, 0, 900*ms)},
			{At: at(sec), Cost: 70, Want: ok(100, 0, sec)}, // the 70 at 0 left at 1s
			{At: at(sec), Cost: 1, Want: limited(100, 0, sec, 100*ms)},
			{At: at(1100 * ms), Cost: 20, Want: ok(100, 0, sec)},
			{At: at(5 * sec), Cost: 0, Want: ok(100, 100, 0)},
		}},
		{Name: "concurrency/weighted", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 100, Window: 10 * time.Second}, Steps: []Step{
			{At: at(0), Cost: 70, Want: leased(100, 30, 10*sec)},
			{At: at(sec), Cost: 20, Want: leased(100, 10, 10*sec)},
			{At: at(2 * sec), Cost: 10, Want: leased(100, 0, 10*sec)},
			{At: at(3 * sec), Cost: 64, Want: limited(100, 0, 9*sec, 7*sec)}, // the lease of 70 expires at 10s
			{At: at(3 * sec), Cost: 66, Want: limited(100, 0, 9*sec, 9*sec)}, // past the bound: when all have expired
			{At: at(3 * sec), ReleaseOf: 2, Want: ok(100, 20, 9*sec)},
			{At: at(3 * sec), ReleaseOf: 2, Want: ok(100, 20, 9*sec)}, // twice: nothing more to free
			{At: at(3 * sec), Cost: 20, Want: leased(100, 0, 10*sec)},
			{At: at(3 * sec), ReleaseOf: 1, Want: ok(100, 70, 10*sec)},
			{At: at(3 * sec), Cost: 66, Want: leased(100, 4, 10*sec)},
			{At: at(12 * sec), Cost: 0, Want: ok(100, 14, sec)}, // the lease of 10 expired at 12s; 20 + 66 held until 13s
			{At: at(14 * sec), Cost: 0, Want: ok(100, 100, 0)},
		}},
		{Name: "quota_zero/charge", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 0, Window: time.Second}, Steps: []Step{
			{At: at(0), Cost: 5, Action: sluice.Charge, Want: ok(0, 0, 0)}, // capped at 2 × 0
			{At: at(0), Cost: 5, Action: sluice.Refund, Want: ok(0, 0, 0)},
			{At: at(0), Action: sluice.Reset, Want: ok(0, 0, 0)},
		}},
		{Name: "quota_zero", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 0, Window: time.Second}, Steps: []Step{
			{At: at(0), Cost: 1, Want: tooHigh(0, 0, 0)},
			{At: at(0), Cost: 0, Want: ok(0, 0, 0)},
		}},
	}, append(actionTables(), pairTables()...)...)
}

func runSteps(t *testing.T, newStore NewStore, opts Options) {
	for _, tb := range Tables() {
		t.Run(tb.Name, func(t *testing.T) {
			if why, ok := opts.Skip["Steps/"+tb.Name]; ok {
				t.Skipf("not honoured by this store: %s", why)
			}
			clock := NewClock()
			s := newStore(t, clock)
			RunTable(t, s, clock, tb)
		})
	}
}

// RunTable replays one step table against s, moving clock to each step's time.
func RunTable(t *testing.T, s sluice.Store, clock *Clock, tb Table) {
	t.Helper()
	leases := make([]uint64, len(tb.Steps)+1)
	for i, st := range tb.Steps {
		clock.Set(Epoch.Add(st.At))
		key := st.Key
		if key == "" {
			key = "k"
		}
		op := sluice.Op{Key: tb.Name + ":" + key, Limit: tb.Limit, Cost: st.Cost, Action: st.Action}
		switch {
		case st.ReleaseOf > 0:
			op.Release, op.Lease = true, leases[st.ReleaseOf]
		case st.ReleaseOf < 0:
			op.Release, op.Lease = true, 1<<63+12345
		case st.Pair != 0:
			op.Lease, op.Reserve, op.SettleWithin, op.Release = st.Pair, st.Reserve, PairWithin, st.Void
		}
		got, err := take1(s, op)
		if err != nil {
			t.Fatalf("step %d: Take(at %v, %v %d): %v", i+1, st.At, st.Action, st.Cost, err)
		}
		leases[i+1] = got.Lease
		if at := clock.Now().UnixMicro(); got.At != 0 && got.At != at {
			t.Errorf("step %d: Take(at %v, %v %d): At = %d, want %d (the clock's reading) or 0 (unknown)", i+1, st.At, st.Action, st.Cost, got.At, at)
		}
		if msg := diff(got, st.Want); msg != "" {
			t.Errorf("step %d: Take(at %v, %v %d, release %d) = %+v\nwant %+v\n(%s)", i+1, st.At, st.Action, st.Cost, st.ReleaseOf, got, st.Want, msg)
		}
	}
}

func take1(s sluice.Store, op sluice.Op) (sluice.Result, error) {
	res := make([]sluice.Result, 1)
	err := s.Take(context.Background(), []sluice.Op{op}, res)
	return res[0], err
}

// diff compares got with want, treating Lease as "zero or not"; it returns ""
// when they match. It ignores At, which RunTable and runDecisionInstant
// check against the clock.
func diff(got, want sluice.Result) string {
	if (got.Lease != 0) != (want.Lease != 0) {
		return fmt.Sprintf("lease %d, want zero=%v", got.Lease, want.Lease == 0)
	}
	got.Lease, want.Lease = 0, 0
	got.At, want.At = 0, 0
	if got != want {
		return "results differ"
	}
	return ""
}
