package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// runBatch checks that a batch is all-or-nothing: when one op is denied, no op
// of the batch is charged, and ops that would have been allowed report their
// uncharged state.
func runBatch(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	a := sluice.Op{Key: "batch:a", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 3, Window: time.Second}, Cost: 1}
	b := sluice.Op{Key: "batch:b", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute}, Cost: 1}
	c := sluice.Op{Key: "batch:c", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Minute}, Cost: 1}
	d := sluice.Op{Key: "batch:d", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Minute}, Cost: 1}

	runBatchSteps(t, s, []batchStep{
		{"all allowed", []sluice.Op{a, b, c},
			[]sluice.Result{ok(3, 2, 333334), ok(1, 0, 60*sec), ok(5, 4, 60*sec)}},
		{"b denied: a and c not charged", []sluice.Op{a, c, b},
			[]sluice.Result{ok(3, 2, 333334), ok(5, 4, 60*sec), limited(1, 0, 60*sec, 60*sec)}},
		{"a alone shows it was not charged", []sluice.Op{a},
			[]sluice.Result{ok(3, 1, 666668)}},
		{"denied first, allowed after", []sluice.Op{b, d},
			[]sluice.Result{limited(1, 0, 60*sec, 60*sec), ok(1, 1, 0)}},
		{"the concurrency slot was not taken", []sluice.Op{d},
			[]sluice.Result{leased(1, 0, 60*sec)}},
		{"same key twice counts twice", []sluice.Op{withCost(a, 1), withCost(a, 1)},
			[]sluice.Result{ok(3, 1, 666668), limited(3, 0, 1000002, 333334)}}, // the first reports its uncharged state
		{"cost too high denies the batch", []sluice.Op{withCost(c, 1), withCost(a, 9)},
			[]sluice.Result{ok(5, 4, 60*sec), tooHigh(3, 1, 666668)}},
		{"c was charged once in all", []sluice.Op{withCost(c, 0)},
			[]sluice.Result{ok(5, 4, 60*sec)}},
	})
}

// batchStep is one batch of a batch table and the Results it must give.
type batchStep struct {
	name string
	ops  []sluice.Op
	want []sluice.Result
}

// runBatchSteps applies each batch to s in order and compares the Results.
func runBatchSteps(t *testing.T, s sluice.Store, steps []batchStep) {
	t.Helper()
	for i, st := range steps {
		res := make([]sluice.Result, len(st.ops))
		if err := s.Take(context.Background(), st.ops, res); err != nil {
			t.Fatalf("batch %d (%s): %v", i+1, st.name, err)
		}
		for j := range res {
			if msg := diff(res[j], st.want[j]); msg != "" {
				t.Errorf("batch %d (%s): op %d (%v %s) = %+v\nwant %+v", i+1, st.name, j, st.ops[j].Action, st.ops[j].Key, res[j], st.want[j])
			}
		}
	}
}

func withCost(op sluice.Op, cost int64) sluice.Op {
	op.Cost = cost
	return op
}

// runErrors checks that bad input is an error, never a panic or a decision.
func runErrors(t *testing.T, newStore NewStore) {
	s := newStore(t, NewClock())
	good := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second}
	bad := []struct {
		name string
		op   sluice.Op
	}{
		{"negative cost", sluice.Op{Key: "e", Limit: good, Cost: -1}},
		{"zero window", sluice.Op{Key: "e", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 1}, Cost: 1}},
		{"no algorithm", sluice.Op{Key: "e", Limit: sluice.Limit{Quota: 1, Window: time.Second}, Cost: 1}},
		{"release on gcra", sluice.Op{Key: "e", Limit: good, Release: true, Lease: 1}},
		{"charge on concurrency", sluice.Op{Key: "e", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Second}, Cost: 1, Action: sluice.Charge}},
		{"refund on concurrency", sluice.Op{Key: "e", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Second}, Cost: 1, Action: sluice.Refund}},
		{"release and reset", sluice.Op{Key: "e", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Second}, Release: true, Lease: 1, Action: sluice.Reset}},
		{"unknown action", sluice.Op{Key: "e", Limit: good, Cost: 1, Action: 9}},
		{"negative charge", sluice.Op{Key: "e", Limit: good, Cost: -1, Action: sluice.Charge}},
		{"burst on fixed_window", sluice.Op{Key: "e", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Second, Burst: 2}, Cost: 1}},
		{"reservation without settle within", sluice.Op{Key: "e", Limit: good, Cost: 1, Lease: 7}},
		{"reservation settle within 1.5ms", sluice.Op{Key: "e", Limit: good, Cost: 1, Lease: 7, SettleWithin: 1500 * time.Microsecond}},
		{"reservation settle within past the longest window", sluice.Op{Key: "e", Limit: good, Cost: 1, Lease: 7, SettleWithin: 4000 * 24 * time.Hour}},
		{"reservation of a negative reserve", sluice.Op{Key: "e", Limit: good, Lease: 7, Reserve: -1, SettleWithin: time.Second}},
	}
	for _, tt := range bad {
		res := make([]sluice.Result, 1)
		if err := s.Take(context.Background(), []sluice.Op{tt.op}, res); err == nil {
			t.Errorf("%s: Take = %+v, nil error; want an error", tt.name, res[0])
		}
	}
	if err := s.Take(context.Background(), []sluice.Op{{Key: "e", Limit: good, Cost: 1}}, nil); err == nil {
		t.Errorf("Take with a short results slice: nil error, want one")
	}
}
