package storetest

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// runDecisionInstant checks sluice.Result.At: a store's answer to an op it
// decided carries its clock's reading at the decision, in µs since the Unix
// epoch, for every algorithm, allowed and denied, alone and in a batch.
func runDecisionInstant(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second},
		{Algorithm: sluice.TokenBucket, Quota: 1, Window: time.Second, Burst: 1},
		{Algorithm: sluice.LeakyBucket, Quota: 1, Window: time.Second},
		{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Second},
		{Algorithm: sluice.SlidingWindow, Quota: 1, Window: time.Second},
		{Algorithm: sluice.SlidingLog, Quota: 1, Window: time.Second},
		{Algorithm: sluice.Concurrency, Quota: 1, Window: time.Second},
	}
	for i, l := range limits {
		clock.Set(Epoch.Add(time.Duration(i)*time.Hour + 1234*time.Microsecond))
		want := clock.Now().UnixMicro()
		op := sluice.Op{Key: "instant:" + l.Algorithm.String(), Limit: l, Cost: 1}
		for _, wantAllowed := range []bool{true, false} {
			got, err := take1(s, op)
			if err != nil {
				t.Fatalf("%v: Take: %v", l.Algorithm, err)
			}
			if got.Allowed != wantAllowed || got.At != want {
				t.Errorf("%v: Take at %d = allowed %v, At %d; want allowed %v, At %d", l.Algorithm, want, got.Allowed, got.At, wantAllowed, want)
			}
		}
	}
	clock.Set(Epoch.Add(48 * time.Hour))
	want := clock.Now().UnixMicro()
	ops := make([]sluice.Op, len(limits))
	for i, l := range limits {
		ops[i] = sluice.Op{Key: "instant/batch:" + l.Algorithm.String(), Limit: l, Cost: 1}
	}
	res := make([]sluice.Result, len(ops))
	if err := s.Take(t.Context(), ops, res); err != nil {
		t.Fatalf("batch Take: %v", err)
	}
	for i, r := range res {
		if !r.Allowed || r.At != want {
			t.Errorf("batch op %d (%v) = allowed %v, At %d; want allowed, At %d", i, ops[i].Limit.Algorithm, r.Allowed, r.At, want)
		}
	}
}
