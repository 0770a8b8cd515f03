package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// NewAllotter returns a new, empty stack.Allotter whose time is read from
// clock.Now, as NewStore does for a store.
type NewAllotter func(t *testing.T, clock *Clock) stack.Allotter

// RunAllot is the conformance suite of stack.Allotter, the contract
// store/hybrid and server/rlqs lease by: each request is one atomic step;
// Granted ≤ Want, never below Keep, at most 1/Split of what stands above
// it; a fixed window's grant is a reservation in the current window (TTL
// to its end, Epoch its index ⌊now / Window⌋) and a give-back counts only
// in its own window; gcra's grant is tokens taken now; Takes of the same
// Key and Limit see grants as spent; an invalid request fails the call
// with nothing granted; concurrent allotments and Takes never hand out more
// than the limit.
func RunAllot(t *testing.T, newAllotter NewAllotter) {
	t.Helper()
	for _, p := range []struct {
		name string
		run  func(*testing.T, NewAllotter)
	}{
		{"Steps", allotSteps},
		{"FixedWindow", allotFixedWindow},
		{"GCRA", allotGCRA},
		{"Batch", allotBatch},
		{"Refused", allotRefused},
		{"Concurrency", allotConcurrency},
	} {
		t.Run(p.name, func(t *testing.T) { p.run(t, newAllotter) })
	}
}

func allot(t *testing.T, a stack.Allotter, r stack.AllotRequest) stack.Allotment {
	t.Helper()
	out := make([]stack.Allotment, 1)
	if err := a.Allot(context.Background(), []stack.AllotRequest{r}, out); err != nil {
		t.Fatalf("Allot(%+v): %v", r, err)
	}
	return out[0]
}

// look returns a Take look's Remaining for key.
func look(t *testing.T, s sluice.Store, key string, l sluice.Limit) int64 {
	t.Helper()
	res := make([]sluice.Result, 1)
	if err := s.Take(context.Background(), []sluice.Op{{Key: key, Limit: l}}, res); err != nil {
		t.Fatalf("Take look %q: %v", key, err)
	}
	return res[0].Remaining
}

// allotSteps: Keep, Split and Give on both algorithms, as exact numbers.
func allotSteps(t *testing.T, n NewAllotter) {
	clock := NewClock()
	a := n(t, clock)
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Second}
	gc := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second, Burst: 10}
	steps := []struct {
		name          string
		req           stack.AllotRequest
		granted, left int64
	}{
		{"fixed window: want fits", stack.AllotRequest{Key: "f", Limit: fw, Want: 30, Keep: 10, Split: 1}, 30, 70},
		{"split caps at 1/2 above keep", stack.AllotRequest{Key: "f", Limit: fw, Want: 100, Keep: 10, Split: 2}, 30, 40},
		{"split < 1 means 1", stack.AllotRequest{Key: "f", Limit: fw, Want: 5, Keep: 10, Split: 0}, 5, 35},
		{"give back of another epoch: ignored", stack.AllotRequest{Key: "f", Limit: fw, Give: 20, Epoch: -1, Keep: 10}, 0, 35},
		{"nothing below keep", stack.AllotRequest{Key: "f", Limit: fw, Want: 50, Keep: 35, Split: 1}, 0, 35},
		{"want 0 only reports", stack.AllotRequest{Key: "f", Limit: fw, Split: 1}, 0, 35},
		{"gcra: burst 10, keep 2, split 2", stack.AllotRequest{Key: "g", Limit: gc, Want: 10, Keep: 2, Split: 2}, 4, 6},
		{"gcra: give back 3", stack.AllotRequest{Key: "g", Limit: gc, Give: 3}, 0, 9},
		{"gcra: want fits", stack.AllotRequest{Key: "g", Limit: gc, Want: 9, Split: 1}, 9, 0},
		{"gcra: empty", stack.AllotRequest{Key: "g", Limit: gc, Want: 1, Split: 1}, 0, 0},
	}
	for _, st := range steps {
		got := allot(t, a, st.req)
		if got.Granted != st.granted || got.Remaining != st.left {
			t.Errorf("%s: granted %d remaining %d, want %d %d", st.name, got.Granted, got.Remaining, st.granted, st.left)
		}
	}
	if got := look(t, a, "f", fw); got != 35 {
		t.Errorf("fixed window: Take look after allotments: remaining %d, want 35 (grants are spent quota)", got)
	}
	if got := look(t, a, "g", gc); got != 0 {
		t.Errorf("gcra: Take look after allotments: remaining %d, want 0", got)
	}
}

// allotFixedWindow: TTL, ResetAfter and Epoch of a fixed window's grant;
// a give-back frees units only in its own window; a Take of more than
// remains is denied.
func allotFixedWindow(t *testing.T, n NewAllotter) {
	clock := NewClock()
	a := n(t, clock)
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: 10 * time.Second}
	clock.Advance(3 * time.Second) // 7 s left in the window
	wantEpoch := clock.Now().UnixMicro() / fw.Window.Microseconds()
	g := allot(t, a, stack.AllotRequest{Key: "w", Limit: fw, Want: 60, Split: 1})
	if g.Granted != 60 || g.Remaining != 40 || g.TTL != 7*time.Second || g.ResetAfter != 7*time.Second || g.Epoch != wantEpoch {
		t.Errorf("grant: %+v, want granted 60, remaining 40, TTL 7s, reset 7s, epoch %d", g, wantEpoch)
	}
	res := make([]sluice.Result, 1)
	if err := a.Take(context.Background(), []sluice.Op{{Key: "w", Limit: fw, Cost: 41}}, res); err != nil || res[0].Allowed {
		t.Errorf("Take of 41 after a grant of 60 of 100: %+v, %v; want denied", res[0], err)
	}
	if err := a.Take(context.Background(), []sluice.Op{{Key: "w", Limit: fw, Cost: 10}}, res); err != nil || !res[0].Allowed {
		t.Errorf("Take of 10: %+v, %v; want allowed", res[0], err)
	}
	if got := allot(t, a, stack.AllotRequest{Key: "w", Limit: fw, Give: 20, Epoch: g.Epoch}); got.Remaining != 50 || got.Granted != 0 {
		t.Errorf("give back 20 in its window: %+v, want remaining 50, nothing granted", got)
	}
	if got := allot(t, a, stack.AllotRequest{Key: "w", Limit: fw, Give: 1000, Epoch: g.Epoch}); got.Remaining != 100 {
		t.Errorf("give back more than was taken: remaining %d, want 100 (the count never goes below 0)", got.Remaining)
	}
	allot(t, a, stack.AllotRequest{Key: "w", Limit: fw, Want: 100, Split: 1})
	clock.Advance(7 * time.Second) // the next window
	got := allot(t, a, stack.AllotRequest{Key: "w", Limit: fw, Give: 50, Epoch: g.Epoch, Want: 1, Split: 1})
	if got.Granted != 1 || got.Remaining != 99 || got.Epoch != g.Epoch+1 || got.TTL != fw.Window {
		t.Errorf("next window, give back of the last: %+v; want 1 granted, 99 remaining (nothing freed twice), epoch %d, TTL %v", got, g.Epoch+1, fw.Window)
	}
}

// allotGCRA: tokens taken now refill one per interval; the lease is at
// most the window; ResetAfter is when the bucket is full again.
func allotGCRA(t *testing.T, n NewAllotter) {
	clock := NewClock()
	a := n(t, clock)
	gc := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second} // interval 100 ms, burst 10
	g := allot(t, a, stack.AllotRequest{Key: "b", Limit: gc, Want: 8, Split: 1})
	if g.Granted != 8 || g.Remaining != 2 || g.TTL <= 0 || g.TTL > gc.Window || g.ResetAfter != 800*time.Millisecond {
		t.Errorf("grant: %+v, want 8 granted, 2 remaining, 0 < TTL ≤ 1s, reset 800ms", g)
	}
	clock.Advance(300 * time.Millisecond)
	if got := look(t, a, "b", gc); got != 5 {
		t.Errorf("Take look 300ms later: remaining %d, want 5 (3 refilled)", got)
	}
	if got := allot(t, a, stack.AllotRequest{Key: "b", Limit: gc, Want: 100, Split: 1}); got.Granted != 5 || got.Remaining != 0 {
		t.Errorf("want above what is left: %+v, want 5 granted (Granted ≤ what the bucket holds), 0 remaining", got)
	}
	res := make([]sluice.Result, 1)
	if err := a.Take(context.Background(), []sluice.Op{{Key: "b", Limit: gc, Cost: 1}}, res); err != nil || res[0].Allowed {
		t.Errorf("Take of 1 from an emptied bucket: %+v, %v; want denied", res[0], err)
	}
}

// allotBatch: the requests of one call are applied in order (two for one
// key see each other), each result in its place.
func allotBatch(t *testing.T, n NewAllotter) {
	a := n(t, NewClock())
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}
	gc := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Minute}
	reqs := []stack.AllotRequest{
		{Key: "x", Limit: fw, Want: 6, Split: 1},
		{Key: "y", Limit: gc, Want: 3, Split: 1},
		{Key: "x", Limit: fw, Want: 6, Split: 1},
		{Key: "z{x}", Limit: fw, Want: 20, Split: 1},
	}
	out := make([]stack.Allotment, len(reqs))
	if err := a.Allot(context.Background(), reqs, out); err != nil {
		t.Fatalf("Allot: %v", err)
	}
	for i, want := range []int64{6, 3, 4, 10} {
		if out[i].Granted != want {
			t.Errorf("request %d (%s, want %d): granted %d, want %d", i, reqs[i].Key, reqs[i].Want, out[i].Granted, want)
		}
	}
	if err := a.Allot(context.Background(), nil, nil); err != nil {
		t.Errorf("Allot of no requests: %v, want nil", err)
	}
}

// allotRefused: the algorithms that cannot be allotted, bad requests and a
// wrong result length fail the call, and nothing is granted: a valid
// request beside an invalid one takes nothing.
func allotRefused(t *testing.T, n NewAllotter) {
	a := n(t, NewClock())
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}
	valid := stack.AllotRequest{Key: "v", Limit: fw, Want: 5, Split: 1}
	for _, tc := range []struct {
		name string
		req  stack.AllotRequest
	}{
		{"token_bucket", stack.AllotRequest{Key: "v", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 10, Window: time.Minute}, Want: 1}},
		{"sliding_window", stack.AllotRequest{Key: "v", Limit: sluice.Limit{Algorithm: sluice.SlidingWindow, Quota: 10, Window: time.Minute}, Want: 1}},
		{"sliding_log", stack.AllotRequest{Key: "v", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 10, Window: time.Minute}, Want: 1}},
		{"leaky_bucket", stack.AllotRequest{Key: "v", Limit: sluice.Limit{Algorithm: sluice.LeakyBucket, Quota: 10, Window: time.Minute}, Want: 1}},
		{"concurrency", stack.AllotRequest{Key: "v", Limit: sluice.Limit{Algorithm: sluice.Concurrency, Quota: 10, Window: time.Minute}, Want: 1}},
		{"negative keep", stack.AllotRequest{Key: "v", Limit: fw, Want: 1, Keep: -1}},
		{"negative give", stack.AllotRequest{Key: "v", Limit: fw, Give: -1}},
		{"negative want", stack.AllotRequest{Key: "v", Limit: fw, Want: -1}},
		{"invalid limit", stack.AllotRequest{Key: "v", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10}, Want: 1}},
	} {
		out := make([]stack.Allotment, 2)
		err := a.Allot(context.Background(), []stack.AllotRequest{valid, tc.req}, out)
		if err == nil {
			t.Errorf("%s: nil error, want refused", tc.name)
		}
	}
	if err := a.Allot(context.Background(), []stack.AllotRequest{valid}, nil); err == nil {
		t.Error("results shorter than requests: nil error, want refused")
	}
	if got := look(t, a, "v", fw); got != 10 {
		t.Errorf("after refused calls: remaining %d, want 10 (nothing granted on error)", got)
	}
}

// allotConcurrency: allotments and Takes racing on one fixed window and
// one gcra key hand out exactly the limit, never more.
func allotConcurrency(t *testing.T, n NewAllotter) {
	a := n(t, NewClock())
	for _, l := range []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Hour},
		{Algorithm: sluice.GCRA, Quota: 1000, Window: time.Hour},
	} {
		const workers, rounds = 8, 40
		var mu sync.Mutex
		var granted, taken int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := make([]stack.Allotment, 1)
				res := make([]sluice.Result, 1)
				for range rounds {
					var g, k int64
					if err := a.Allot(context.Background(), []stack.AllotRequest{{Key: "c", Limit: l, Want: int64(w + 1), Split: 1}}, out); err == nil {
						g = out[0].Granted
					} else {
						t.Errorf("%v: Allot: %v", l.Algorithm, err)
					}
					if err := a.Take(context.Background(), []sluice.Op{{Key: "c", Limit: l, Cost: 1}}, res); err == nil && res[0].Allowed {
						k = 1
					}
					mu.Lock()
					granted, taken = granted+g, taken+k
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// Demand: 8 × 40 × (4.5 + 1) = 1760 units, above the limit.
		if got := granted + taken; got != l.Quota {
			t.Errorf("%v: granted %d + taken %d = %d, want exactly the limit %d", l.Algorithm, granted, taken, got, l.Quota)
		}
		if got := look(t, a, "c", l); got != 0 {
			t.Errorf("%v: remaining %d after the race, want 0", l.Algorithm, got)
		}
	}
}
