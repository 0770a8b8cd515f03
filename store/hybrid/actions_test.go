package hybrid

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Charges, refunds and resets are decided by the global store: a charge
// or refund keeps the allotment and the global count moves; a reset drops
// the allotment and the key starts fresh everywhere. Keys asks the global
// store.
func TestActions(t *testing.T) {
	f := newFleet(t, 1, Options{})
	h, g := f.inst[0], f.global[0]
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour}
	do := func(s sluice.Store, op sluice.Op) sluice.Result {
		t.Helper()
		op.Key, op.Limit = "act", l
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{op}, res); err != nil {
			t.Fatalf("%v %d: %v", op.Action, op.Cost, err)
		}
		return res[0]
	}
	for range 20 { // enough for an allotment
		do(h, sluice.Op{Cost: 1})
	}
	h.wg.Wait() // no lease in flight
	held := h.heldOf("act", l)
	if held == 0 {
		t.Fatal("no allotment after 20 hits")
	}
	used := 1000 - do(g, sluice.Op{}).Remaining // 20 spent and the allotment taken
	global := h.Stats().Global

	steps := []struct {
		op       sluice.Op
		wantUsed int64
		wantHeld int64
	}{
		{sluice.Op{Cost: 300, Action: sluice.Charge}, used + 300, held},
		{sluice.Op{Cost: 100, Action: sluice.Refund}, used + 200, held},
		{sluice.Op{Action: sluice.Reset}, 0, 0},
	}
	for i, st := range steps {
		r := do(h, st.op)
		if !r.Allowed || 1000-r.Remaining != st.wantUsed {
			t.Errorf("step %d: %v %d through the hybrid store = %+v, want allowed with %d used", i, st.op.Action, st.op.Cost, r, st.wantUsed)
		}
		if got := 1000 - do(g, sluice.Op{}).Remaining; got != st.wantUsed {
			t.Errorf("step %d: global store has %d used, want %d", i, got, st.wantUsed)
		}
		if got := h.heldOf("act", l); got != st.wantHeld {
			t.Errorf("step %d: allotment %d, want %d", i, got, st.wantHeld)
		}
	}
	if got := h.Stats().Global - global; got != uint64(len(steps)) {
		t.Errorf("%d ops went to the global store, want %d", got, len(steps))
	}
	if v := h.Stats().Voided; v != uint64(held) {
		t.Errorf("Voided = %d, want the %d units the reset dropped", v, held)
	}
	// After the reset, the next hit leases from the fresh key.
	if r := do(h, sluice.Op{Cost: 1}); !r.Allowed {
		t.Errorf("hit after the reset: %+v, want allowed", r)
	}
	if keys, more, err := h.Keys(ctx, "ac", 10); err != nil || more || len(keys) != 1 || keys[0] != "act" {
		t.Errorf("Keys = %q, %v, %v; want [act]", keys, more, err)
	}
}

// Keys fails when the global store cannot list keys.
func TestKeysNeedsALister(t *testing.T) {
	h, err := New(allotterOnly{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Keys(context.Background(), "", 10); err == nil {
		t.Error("Keys over a global store that lists no keys: nil error, want one")
	}
}

type allotterOnly struct{ stack.Allotter }

// The denied cache passes charges, refunds and resets through, and each
// forgets the key's denial (a charge may move its RetryAfter later).
func TestDeniedCacheActions(t *testing.T) {
	d, next, _ := deniedOverMemory(t)
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 3, Window: time.Minute}
	do := func(cost int64, a sluice.Action) (sluice.Result, bool) {
		t.Helper()
		n := next.ops
		res := make([]sluice.Result, 1)
		if err := d.Take(context.Background(), []sluice.Op{{Key: "k", Limit: l, Cost: cost, Action: a}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0], next.ops == n
	}
	steps := []struct {
		cost      int64
		action    sluice.Action
		allowed   bool
		fromCache bool
	}{
		{5, sluice.Charge, true, false},
		{1, sluice.Take, false, false}, // remembered
		{1, sluice.Take, false, true},
		{1, sluice.Charge, true, false}, // a charge reaches the store
		{1, sluice.Take, false, false},  // and frees nothing, but the denial is asked again
		{1, sluice.Take, false, true},
		{5, sluice.Refund, true, false},
		{1, sluice.Take, true, false}, // the refund forgot the denial
		{3, sluice.Take, false, false},
		{0, sluice.Reset, true, false},
		{3, sluice.Take, true, false},
	}
	for i, st := range steps {
		r, cached := do(st.cost, st.action)
		if r.Allowed != st.allowed || cached != st.fromCache {
			t.Errorf("step %d: %v %d: allowed %v from cache %v, want %v %v (%+v)", i+1, st.action, st.cost, r.Allowed, cached, st.allowed, st.fromCache, r)
		}
	}
}
