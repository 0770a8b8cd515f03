package hybrid

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestHeld: Held sums the units of allotments that may still be spent,
// over keys and limits: more than zero while allotments are out, less by
// each unit spent locally, and zero once they are past their deadline (no
// hit needed to notice) or given back by Close; the global store counted
// every unit Held reports.
func TestHeld(t *testing.T) {
	clock := storetest.NewClock()
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	h, err := New(mem, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour}
	gc := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: time.Hour}
	hits := map[sluice.Limit]int64{}
	hit := func(key string, l sluice.Limit) {
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := h.Take(ctx, []sluice.Op{{Key: key, Limit: l, Cost: 1}}, res); err != nil || !res[0].Allowed {
			t.Fatalf("hit %s: %+v, %v", key, res[0], err)
		}
		hits[l]++
	}
	used := func(l sluice.Limit) int64 { // units the global store counts for key "a"
		t.Helper()
		res := make([]sluice.Result, 1)
		if err := mem.Take(ctx, []sluice.Op{{Key: "a", Limit: l}}, res); err != nil {
			t.Fatal(err)
		}
		return stack.Capacity(l) - res[0].Remaining
	}
	check := func(when string, wantUnits int64, wantKeys int) {
		t.Helper()
		if units, keys := h.Held(); units != wantUnits || keys != wantKeys {
			t.Errorf("%s: Held() = %d units, %d keys; want %d, %d", when, units, keys, wantUnits, wantKeys)
		}
	}

	check("before any hit", 0, 0)
	for range 20 {
		hit("a", fw)
		hit("a", gc)
	}
	h.wg.Wait()
	held := h.heldOf("a", fw) + h.heldOf("a", gc)
	if held == 0 {
		t.Fatal("no allotment after 20 hits of each limit")
	}
	check("allotments out", held, 2)
	// Every unit held was counted by the global store: what it counts is
	// the hits decided plus the units held.
	if got, want := used(fw)+used(gc), hits[fw]+hits[gc]+held; got != want {
		t.Errorf("global store counts %d units, want %d hits + %d held = %d", got, hits[fw]+hits[gc], held, want)
	}
	h.wg.Wait()
	before, grantedBefore := h.heldOf("a", fw), h.granted.Load()
	hit("a", fw) // from the allotment (no lease on its way: the last one was waited for)
	h.wg.Wait()
	// The hit may start a refill when few units are left (how few depends
	// on how the 20 hits above raced their refills): what is held after is
	// what was held, less the unit spent, plus what was granted meanwhile.
	// A hit taken from the global store instead would leave one more.
	refill := int64(h.granted.Load() - grantedBefore)
	if after := h.heldOf("a", fw); after != before-1+refill {
		t.Fatalf("a hit did not spend from the allotment: held %d, then %d with %d granted meanwhile; want %d", before, after, refill, before-1+refill)
	}
	check("after spending one unit", h.heldOf("a", fw)+h.heldOf("a", gc), 2)

	// Past every deadline (the gcra lease after Horizon, the fixed window
	// at its end), with no hit: nothing may be spent, nothing is held.
	clock.Advance(2 * time.Hour)
	check("after the allotments expired", 0, 0)

	// Out again, then given back by Close.
	for range 20 {
		hit("b", fw)
	}
	h.wg.Wait()
	if units, keys := h.Held(); units == 0 || keys != 1 {
		t.Fatalf("Held() = %d units, %d keys after 20 hits of b, want > 0 units on 1 key", units, keys)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	check("after Close gave them back", 0, 0)
}
