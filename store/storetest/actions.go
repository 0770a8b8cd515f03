package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Charge, refund and reset (sluice.Action): step tables, batches, concurrent
// properties and the KeyLister check.

// actionBucketSteps is the charge, refund and reset table shared by the
// three bucket algorithms (3 per second, burst 3: the interval is 333334µs,
// the bucket holds 1000002µs of work and a charge's debt is capped at twice
// that, 2000004µs past now). Actions never delay; Takes of leaky_bucket do.
func actionBucketSteps(delay bool) []Step {
	d := delayed(delay)
	return []Step{
		{At: at(0), Cost: 2, Action: sluice.Charge, Want: ok(3, 1, 666668)},
		{At: at(0), Cost: 5, Action: sluice.Charge, Want: ok(3, 0, 2000004)},             // 666668 + 5 × 333334, capped at 2 × 1000002
		{At: at(0), Cost: 1, Action: sluice.Charge, Want: ok(3, 0, 2000004)},             // at the cap: nothing more
		{At: at(0), Cost: 1, Action: sluice.Take, Want: limited(3, 0, 2000004, 1333336)}, // 2000004 + 333334 − 1000002
		{At: at(1333335), Cost: 1, Want: limited(3, 0, 666669, 1)},
		{At: at(1333336), Cost: 1, Want: d(ok(3, 0, 1000002), 666668)},
		{At: at(1333336), Cost: 1, Action: sluice.Refund, Want: ok(3, 1, 666668)},
		{At: at(1333336), Cost: 10, Action: sluice.Refund, Want: ok(3, 3, 0)}, // clamped at a full bucket
		{At: at(1333336), Cost: 1, Action: sluice.Refund, Want: ok(3, 3, 0)},  // nothing left to give back
		{At: at(1333336), Cost: 0, Action: sluice.Charge, Want: ok(3, 3, 0)},  // cost 0 is a look
		{At: at(1333336), Cost: 3, Want: ok(3, 0, 1000002)},                   // the full burst again
		{At: at(1333336), Action: sluice.Reset, Want: ok(3, 3, 0)},
		{At: at(1333336), Cost: 1, Want: ok(3, 2, 333334)},
		// Clock 1s back: TAT 1666670 + 333334, under the cap of now + 2000004.
		{At: at(333336), Cost: 1, Action: sluice.Charge, Want: ok(3, 0, 1666668)},
		// Clock further back: the cap (now + 2000004) is below the TAT; a
		// charge never moves the TAT earlier.
		{At: at(-sec), Cost: 3, Action: sluice.Charge, Want: ok(3, 0, 3000004)},
		{At: at(-sec), Cost: 1, Action: sluice.Refund, Want: ok(3, 0, 2666670)},
		{At: at(3 * hour), Cost: 1, Action: sluice.Refund, Want: ok(3, 3, 0)},       // long drained: nothing to give back
		{At: at(3 * hour), Cost: 7, Action: sluice.Charge, Want: ok(3, 0, 2000004)}, // 7 counts as 6 = 2 × burst
		{At: at(3*hour + 2000004), Cost: 3, Want: ok(3, 0, 1000002)},
	}
}

// actionTables are the step tables of charge, refund and reset; Tables
// includes them.
func actionTables() []Table {
	three := func(a sluice.Algorithm) sluice.Limit {
		return sluice.Limit{Algorithm: a, Quota: 3, Window: time.Second}
	}
	return []Table{
		{Name: "token_bucket/actions", Limit: three(sluice.TokenBucket), Steps: actionBucketSteps(false)},
		{Name: "gcra/actions", Limit: three(sluice.GCRA), Steps: actionBucketSteps(false)},
		{Name: "leaky_bucket/actions", Limit: three(sluice.LeakyBucket), Steps: actionBucketSteps(true)},
		{Name: "token_bucket/burst/actions", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1, Window: 100 * time.Millisecond, Burst: 5}, Steps: []Step{
			// interval 100000µs, capacity 5 × 100000µs, debt cap 1000000µs.
			{At: at(0), Cost: 20, Action: sluice.Charge, Want: ok(5, 0, 1000000)},
			{At: at(0), Cost: 1, Want: limited(5, 0, 1000000, 600000)},
			{At: at(600000), Cost: 1, Want: ok(5, 0, 500000)},
			{At: at(600000), Cost: 2, Action: sluice.Refund, Want: ok(5, 2, 300000)},
		}},
		{Name: "fixed_window/actions", Limit: three(sluice.FixedWindow), Steps: []Step{
			{At: at(0), Cost: 2, Action: sluice.Charge, Want: ok(3, 1, sec)},
			{At: at(100 * ms), Cost: 10, Action: sluice.Charge, Want: ok(3, 0, 900*ms)}, // 12 counts as 6 = 2 × quota
			{At: at(200 * ms), Cost: 1, Want: limited(3, 0, 800*ms, 800*ms)},
			{At: at(200 * ms), Cost: 2, Action: sluice.Refund, Want: ok(3, 0, 800*ms)}, // 4 counted
			{At: at(200 * ms), Cost: 2, Action: sluice.Refund, Want: ok(3, 1, 800*ms)}, // 2 counted
			{At: at(200 * ms), Cost: 1, Want: ok(3, 0, 800*ms)},
			{At: at(1100 * ms), Cost: 3, Action: sluice.Refund, Want: ok(3, 3, 0)}, // the window passed: nothing back
			{At: at(1100 * ms), Cost: 1, Want: ok(3, 2, 900*ms)},
			{At: at(1100 * ms), Cost: 5, Action: sluice.Refund, Want: ok(3, 3, 0)}, // clamped at zero
			{At: at(1100 * ms), Cost: 3, Want: ok(3, 0, 900*ms)},
			{At: at(1100 * ms), Action: sluice.Reset, Want: ok(3, 3, 0)},
			{At: at(1100 * ms), Cost: 0, Want: ok(3, 3, 0)},
			{At: at(1100 * ms), Cost: 0, Action: sluice.Charge, Want: ok(3, 3, 0)},
			{At: at(1500 * ms), Cost: 3, Want: ok(3, 0, 500*ms)},
			{At: at(2200 * ms), Cost: 1, Action: sluice.Charge, Want: ok(3, 2, 800*ms)}, // a new window
			{At: at(2200 * ms), Cost: 1, Action: sluice.Refund, Want: ok(3, 3, 0)},
			{At: at(2200 * ms), Cost: 2, Want: ok(3, 1, 800*ms)},
			// A refund at an instant of the window before the key's (a late
			// reply's refund at its charge's instant, or a clock that went
			// back): the units were not counted in this window, so nothing
			// comes back (the answer is the key's window, 1.1 s from then).
			{At: at(1900 * ms), Cost: 2, Action: sluice.Refund, Want: ok(3, 1, 1100*ms)},
			{At: at(2200 * ms), Cost: 1, Want: ok(3, 0, 800*ms)},
		}},
		{Name: "sliding_window/actions", Limit: three(sluice.SlidingWindow), Steps: []Step{
			{At: at(0), Cost: 4, Action: sluice.Charge, Want: ok(3, 0, 2*sec)},
			// Next window: ⌈4 × (1e6 − e)/1e6⌉ + 1 ≤ 3 first holds at e = 500000.
			{At: at(0), Cost: 1, Want: limited(3, 0, 2*sec, 1500000)},
			{At: at(1500 * ms), Cost: 1, Want: ok(3, 0, 1500000)}, // estimate 2 + 1
			// From the current window's 1 first, then the previous one's 4:
			// estimate ⌈3 × 0.5⌉ + 0 = 2.
			{At: at(1500 * ms), Cost: 2, Action: sluice.Refund, Want: ok(3, 1, 500000)},
			{At: at(1500 * ms), Cost: 5, Action: sluice.Refund, Want: ok(3, 3, 0)},
			{At: at(1500 * ms), Cost: 2, Want: ok(3, 1, 1500000)},
			// Rolled: previous 2, current 1; estimate ⌈2 × 0.75⌉ + 1 = 3.
			{At: at(2250 * ms), Cost: 1, Action: sluice.Charge, Want: ok(3, 0, 1750000)},
			{At: at(2250 * ms), Action: sluice.Reset, Want: ok(3, 3, 0)},
			{At: at(2250 * ms), Cost: 0, Action: sluice.Refund, Want: ok(3, 3, 0)},
			{At: at(2250 * ms), Cost: 9, Action: sluice.Charge, Want: ok(3, 0, 1750000)}, // 9 counts as 6
			{At: at(2250 * ms), Cost: 4, Action: sluice.Refund, Want: ok(3, 1, 1750000)},
			{At: at(2250 * ms), Cost: 2, Action: sluice.Refund, Want: ok(3, 3, 0)},
		}},
		{Name: "sliding_log/actions", Limit: three(sluice.SlidingLog), Steps: []Step{
			{At: at(0), Cost: 1, Want: ok(3, 2, sec)},
			{At: at(100 * ms), Cost: 4, Action: sluice.Charge, Want: ok(3, 0, sec)},
			{At: at(100 * ms), Cost: 3, Action: sluice.Charge, Want: ok(3, 0, sec)}, // only 1 more: 6 = 2 × quota
			// 4 units must leave: the 1 at 0 and the 5 at 0.1s, at 1.1s.
			{At: at(200 * ms), Cost: 1, Want: limited(3, 0, 900*ms, 900*ms)},
			{At: at(sec), Cost: 1, Want: limited(3, 0, 100*ms, 100*ms)},
			{At: at(sec), Cost: 3, Action: sluice.Refund, Want: ok(3, 1, 100*ms)}, // 2 left at 0.1s
			{At: at(sec), Cost: 1, Want: ok(3, 0, sec)},
			// Newest first: the 1 at 1s, then 1 of the 2 at 0.1s.
			{At: at(sec), Cost: 2, Action: sluice.Refund, Want: ok(3, 2, 100*ms)},
			{At: at(sec), Cost: 5, Action: sluice.Refund, Want: ok(3, 3, 0)},
			{At: at(sec), Cost: 2, Want: ok(3, 1, sec)},
			{At: at(sec), Action: sluice.Reset, Want: ok(3, 3, 0)},
			{At: at(sec), Cost: 0, Action: sluice.Charge, Want: ok(3, 3, 0)},
		}},
		{Name: "sliding_log/weighted/actions", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 100, Window: time.Second}, Steps: []Step{
			{At: at(0), Cost: 150, Action: sluice.Charge, Want: ok(100, 0, sec)},
			{At: at(100 * ms), Cost: 10, Want: limited(100, 0, 900*ms, 900*ms)},         // 60 must leave: exact
			{At: at(100 * ms), Cost: 100, Action: sluice.Charge, Want: ok(100, 0, sec)}, // 50 of them: 200 = 2 × quota
			{At: at(200 * ms), Cost: 1, Want: limited(100, 0, 900*ms, 900*ms)},          // 101 must leave: ResetAfter
			{At: at(sec), Cost: 1, Want: ok(100, 49, sec)},                              // the 150 at 0 left
			{At: at(sec), Cost: 60, Want: limited(100, 49, sec, 100*ms)},
			{At: at(sec), Cost: 30, Action: sluice.Refund, Want: ok(100, 79, 100*ms)},
		}},
		{Name: "concurrency/reset", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 2, Window: 10 * time.Second}, Steps: []Step{
			{At: at(0), Cost: 1, Want: leased(2, 1, 10*sec)},
			{At: at(sec), Cost: 1, Want: leased(2, 0, 10*sec)},
			{At: at(2 * sec), Action: sluice.Reset, Want: ok(2, 2, 0)}, // every lease dropped
			{At: at(2 * sec), Cost: 2, Want: leased(2, 0, 10*sec)},
			{At: at(2 * sec), ReleaseOf: 1, Want: ok(2, 0, 10*sec)}, // a lease from before the reset frees nothing
			{At: at(2 * sec), ReleaseOf: 4, Want: ok(2, 2, 0)},
		}},
	}
}

// runActionBatch checks that batches stay all-or-nothing with charges,
// refunds and resets: when a Take of the batch is denied, none of its ops
// is applied and the others report looks; each op sees the ops before it.
// The keys share a hash tag, so a Redis Cluster decides each batch in one
// slot; the last batch, of actions only, spans slots.
func runActionBatch(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	a := sluice.Op{Key: "{ab}:a", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 3, Window: time.Second}}
	b := sluice.Op{Key: "{ab}:b", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute}}
	c := sluice.Op{Key: "{ab}:c", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Minute}}
	d := sluice.Op{Key: "{ab}:d", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Minute}}
	take := func(op sluice.Op, cost int64) sluice.Op { op.Cost = cost; return op }
	charge := func(op sluice.Op, cost int64) sluice.Op { op.Cost, op.Action = cost, sluice.Charge; return op }
	refund := func(op sluice.Op, cost int64) sluice.Op { op.Cost, op.Action = cost, sluice.Refund; return op }
	reset := func(op sluice.Op) sluice.Op { op.Action = sluice.Reset; return op }
	untagged := func(op sluice.Op) sluice.Op { op.Key = op.Key[len("{ab}:"):] + ":spread"; return op }

	runBatchSteps(t, s, []batchStep{
		{"setup", []sluice.Op{take(c, 2), take(d, 1)},
			[]sluice.Result{ok(5, 3, 60*sec), leased(1, 0, 60*sec)}},
		{"b's second take denied: nothing applied",
			[]sluice.Op{charge(a, 2), refund(c, 1), reset(c), reset(d), take(b, 1), take(b, 1)},
			[]sluice.Result{ok(3, 3, 0), ok(5, 3, 60*sec), ok(5, 3, 60*sec), ok(1, 0, 60*sec), ok(1, 1, 0), limited(1, 0, 60*sec, 60*sec)}},
		{"looks show it", []sluice.Op{take(c, 0), take(d, 0), take(a, 0), take(b, 0)},
			[]sluice.Result{ok(5, 3, 60*sec), ok(1, 0, 60*sec), ok(3, 3, 0), ok(1, 1, 0)}},
		{"actions alone apply", []sluice.Op{charge(a, 2), refund(c, 1), reset(d), charge(b, 5)},
			[]sluice.Result{ok(3, 1, 666668), ok(5, 4, 60*sec), ok(1, 1, 0), ok(1, 0, 60*sec)}}, // b: 5 counts as 2
		{"a refund that does not free enough", []sluice.Op{take(c, 1), refund(b, 1), take(b, 1)},
			[]sluice.Result{ok(5, 4, 60*sec), ok(1, 0, 60*sec), limited(1, 0, 60*sec, 60*sec)}},
		{"a refund that does", []sluice.Op{refund(b, 2), take(b, 1)},
			[]sluice.Result{ok(1, 1, 0), ok(1, 0, 60*sec)}},
		{"reset then take", []sluice.Op{reset(c), take(c, 5)},
			[]sluice.Result{ok(5, 5, 0), ok(5, 0, 60*sec)}},
		// The last take sees the reset, the take of 3 and the refund:
		// TAT 666668, and 2 more would need 333334µs more room.
		{"a denied sequence on one key", []sluice.Op{reset(a), take(a, 3), refund(a, 1), take(a, 2)},
			[]sluice.Result{ok(3, 1, 666668), ok(3, 1, 666668), ok(3, 1, 666668), limited(3, 1, 666668, 333334)}},
		{"a untouched", []sluice.Op{take(a, 0)},
			[]sluice.Result{ok(3, 1, 666668)}},
		{"log refund, take and charge, denied by b", []sluice.Op{refund(c, 2), take(c, 1), charge(c, 3), take(b, 1)},
			[]sluice.Result{ok(5, 0, 60*sec), ok(5, 0, 60*sec), ok(5, 0, 60*sec), limited(1, 0, 60*sec, 60*sec)}},
		{"c untouched", []sluice.Op{take(c, 0)},
			[]sluice.Result{ok(5, 0, 60*sec)}},
		{"log refund, take, refund", []sluice.Op{refund(c, 2), take(c, 1), refund(c, 1), take(d, 0)},
			[]sluice.Result{ok(5, 2, 60*sec), ok(5, 1, 60*sec), ok(5, 2, 60*sec), ok(1, 1, 0)}},
		{"resets across keys", []sluice.Op{reset(a), reset(b), reset(c), reset(d)},
			[]sluice.Result{ok(3, 3, 0), ok(1, 1, 0), ok(5, 5, 0), ok(1, 1, 0)}},
		{"actions across slots", []sluice.Op{charge(untagged(a), 1), charge(untagged(b), 1), charge(untagged(c), 7), reset(untagged(d)), refund(untagged(a), 1)},
			[]sluice.Result{ok(3, 2, 333334), ok(1, 0, 60*sec), ok(5, 0, 60*sec), ok(1, 1, 0), ok(3, 3, 0)}},
	})
}

// settleLimits are the limits the concurrent properties run with (the
// concurrent takes too, with a concurrency limit added): every algorithm
// that charges and refunds.
func settleLimits() []sluice.Limit {
	return []sluice.Limit{
		{Algorithm: sluice.TokenBucket, Quota: 100, Window: time.Second},
		{Algorithm: sluice.GCRA, Quota: 100, Window: time.Second, Burst: 150},
		{Algorithm: sluice.LeakyBucket, Quota: 100, Window: time.Second},
		{Algorithm: sluice.FixedWindow, Quota: 137, Window: time.Minute},
		{Algorithm: sluice.SlidingWindow, Quota: 137, Window: time.Minute},
		{Algorithm: sluice.SlidingLog, Quota: 137, Window: time.Minute},
	}
}

// runSettleConcurrency: with the clock frozen, many goroutines charging and
// refunding equal amounts leave a key fresh; concurrent charges add up
// exactly, to the cap of 2 × capacity and no further.
func runSettleConcurrency(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	const goroutines = 16
	for _, l := range settleLimits() {
		c := stack.Capacity(l)
		hammer := func(key string, perG int, ops func(g, i int) []sluice.Op) {
			t.Helper()
			err := hammer(goroutines, perG, func(g, i int) error {
				for _, op := range ops(g, i) {
					op.Key, op.Limit = key, l
					if _, err := take1(s, op); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%v: %v", l, err)
			}
		}
		expect := func(what string, op sluice.Op, want sluice.Result) {
			t.Helper()
			op.Limit = l
			got, err := take1(s, op)
			if err != nil {
				t.Fatalf("%v: %s: %v", l, what, err)
			}
			if got.Remaining != want.Remaining || (want.ResetAfter == 0) != (got.ResetAfter == 0) || !got.Allowed {
				t.Errorf("%v: %s: %+v, want Remaining %d (fresh: %v)", l, what, got, want.Remaining, want.ResetAfter == 0)
			}
		}

		key := "settle:" + l.Algorithm.String()
		hammer(key, 20, func(g, i int) []sluice.Op {
			cost := int64(1 + (g+i)%5)
			return []sluice.Op{{Cost: cost, Action: sluice.Charge}, {Cost: cost, Action: sluice.Refund}}
		})
		expect("after equal charges and refunds", sluice.Op{Key: key}, sluice.Result{Remaining: c})

		for _, total := range []int64{3 * c / 2, 3 * c} { // under the cap of 2c, and over it
			key := fmt.Sprintf("charges:%v:%d", l.Algorithm, total)
			perG := int((total + goroutines - 1) / goroutines)
			hammer(key, perG, func(int, int) []sluice.Op { return []sluice.Op{{Cost: 1, Action: sluice.Charge}} })
			held := min(int64(perG*goroutines), 2*c)
			expect(fmt.Sprintf("%d charges of 1, then a refund of %d", perG*goroutines, held-c),
				sluice.Op{Key: key, Cost: held - c, Action: sluice.Refund}, sluice.Result{Remaining: 0, ResetAfter: 1})
			expect("and a refund of 1 more", sluice.Op{Key: key, Cost: 1, Action: sluice.Refund}, sluice.Result{Remaining: 1, ResetAfter: 1})
		}
	}
}

// runKeys checks stack.KeyLister, for stores that implement it: keys are
// listed as Op.Key names them, once whatever their algorithms, filtered by
// prefix (taken literally, glob characters and braces too), bounded by max,
// and a reset key is gone.
func runKeys(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	kl, isLister := s.(stack.KeyLister)
	if !isLister {
		t.Skipf("%T does not list keys", s)
	}
	ctx := context.Background()
	lim := func(a sluice.Algorithm) sluice.Limit {
		return sluice.Limit{Algorithm: a, Quota: 5, Window: time.Minute}
	}
	held := []sluice.Op{
		{Key: "kl:a", Limit: lim(sluice.GCRA)},
		{Key: "kl:a", Limit: lim(sluice.FixedWindow)}, // the same key twice
		{Key: "kl:b", Limit: lim(sluice.TokenBucket)},
		{Key: "kl:{t}:c", Limit: lim(sluice.SlidingLog)}, // its own hash tag
		{Key: `kl:*?[x]\`, Limit: lim(sluice.SlidingWindow)},
		{Key: "kl:{", Limit: lim(sluice.LeakyBucket)},
		{Key: "kl:}{}", Limit: lim(sluice.Concurrency)},
		{Key: "other:kl:a", Limit: lim(sluice.GCRA)},
	}
	for i := range held {
		held[i].Cost = 1
	}
	for _, op := range held {
		if _, err := take1(s, op); err != nil {
			t.Fatal(err)
		}
	}
	list := func(prefix string, max int, want []string, wantMore bool) {
		t.Helper()
		got, more, err := kl.Keys(ctx, prefix, max)
		if err != nil {
			t.Fatalf("Keys(%q, %d): %v", prefix, max, err)
		}
		slices.Sort(got)
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) || more != wantMore {
			t.Errorf("Keys(%q, %d) = %q, more %v\nwant %q, more %v", prefix, max, got, more, want, wantMore)
		}
	}
	all := []string{"kl:a", "kl:b", "kl:{t}:c", `kl:*?[x]\`, "kl:{", "kl:}{}"}
	list("kl:", 100, all, false)
	list("", 100, append(slices.Clone(all), "other:kl:a"), false)
	list("kl:*", 100, []string{`kl:*?[x]\`}, false)
	list(`kl:*?[x]\`, 100, []string{`kl:*?[x]\`}, false)
	list("kl:{", 100, []string{"kl:{t}:c", "kl:{"}, false)
	list("kl:{t}", 100, []string{"kl:{t}:c"}, false)
	list("kl:}", 100, []string{"kl:}{}"}, false)
	list("nothing", 100, nil, false)

	got, more, err := kl.Keys(ctx, "kl:", 2)
	if err != nil || len(got) != 2 || !more {
		t.Errorf("Keys(kl:, 2) = %q, more %v, %v; want 2 keys and more", got, more, err)
	}
	for _, k := range got {
		if !slices.Contains(all, k) {
			t.Errorf("Keys(kl:, 2) listed %q, not a kl: key", k)
		}
	}
	if _, _, err := kl.Keys(ctx, "kl:", 0); err == nil {
		t.Errorf("Keys with max 0: no error, want one")
	}

	// A key reset under every algorithm it was used with is gone.
	for _, op := range held[:2] {
		op.Action = sluice.Reset
		if _, err := take1(s, op); err != nil {
			t.Fatal(err)
		}
	}
	list("kl:", 100, all[1:], false)

	// Many keys: the listing pages through the store.
	const many = 2500
	batch := make([]sluice.Op, 0, 250)
	for i := range many {
		batch = append(batch, sluice.Op{Key: fmt.Sprint("many:", i), Limit: lim(sluice.FixedWindow), Cost: 1, Action: sluice.Charge})
		if len(batch) == cap(batch) {
			if err := s.Take(ctx, batch, make([]sluice.Result, len(batch))); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	got, more, err = kl.Keys(ctx, "many:", 2*many)
	if err != nil || len(got) != many || more {
		t.Errorf("Keys(many:, %d) = %d keys, more %v, %v; want %d, no more", 2*many, len(got), more, err, many)
	}
	slices.Sort(got)
	if n := len(slices.Compact(got)); n != len(got) {
		t.Errorf("Keys(many:) listed %d keys, %d distinct", len(got), n)
	}
	got, more, err = kl.Keys(ctx, "many:", 1000)
	if err != nil || len(got) != 1000 || !more {
		t.Errorf("Keys(many:, 1000) = %d keys, more %v, %v; want 1000 and more", len(got), more, err)
	}
}
