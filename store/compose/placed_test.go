package compose

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// All-or-nothing across placements: requests whose ops go to different
// stores (global, hybrid, local) are taken by many goroutines at once; a
// request denied by any placement must leave every counter as it found
// it, so each counter ends charged exactly once per admitted request. The
// clock is frozen (one window for the whole test), so the totals are
// exact.
func TestPlacedAllOrNothingConcurrent(t *testing.T) {
	srv := sharedRedis(t)
	const goroutines, perG = 16, 12
	fw := func(q int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Quota: q, Window: time.Hour}
	}
	type counter struct {
		place byte // 'g', stack.KeyHybrid or stack.KeyLocal
		quota int64
	}
	for _, tc := range []struct {
		name     string
		counters []counter
		// want is the admissions expected: the tightest quota, when the
		// others have room for it plus every request in flight (a denied
		// request's charges are visible until given back).
		want int64
		// exact: the admissions must equal want (false where hybrid may
		// admit fewer: units on their way in an allotment).
		exact bool
	}{
		{"global denies, local undone", []counter{{'g', 20}, {stack.KeyLocal, 20 + goroutines + 4}}, 20, true},
		{"local denies first", []counter{{'g', 100}, {stack.KeyLocal, 10}}, 10, true},
		{"hybrid denies, local undone", []counter{{stack.KeyHybrid, 20}, {stack.KeyLocal, 20 + goroutines + 4}}, 20, false},
		{"global denies, hybrid and local undone", []counter{{'g', 20}, {stack.KeyHybrid, 60}, {stack.KeyLocal, 20 + goroutines + 4}}, 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			s := newStack(t, stackConfig(srv.URL(), clock, DeniedAuto))
			ops := make([]sluice.Op, len(tc.counters))
			for i, c := range tc.counters {
				key := fmt.Sprintf("{aon}%d", i)
				if c.place != 'g' {
					key = string(c.place) + key
				}
				ops[i] = sluice.Op{Key: key, Limit: fw(c.quota), Cost: 1}
			}
			var admitted atomic.Int64
			var wg sync.WaitGroup
			errc := make(chan error, goroutines)
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := make([]sluice.Result, len(ops))
					for range perG {
						if err := s.Take(context.Background(), ops, res); err != nil {
							errc <- err
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
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatal(err)
			}
			got := admitted.Load()
			if got > tc.want || (tc.exact && got != tc.want) || got == 0 {
				t.Fatalf("admitted %d requests, want %d (exact: %v)", got, tc.want, tc.exact)
			}
			// Hand back the hybrid store's allotments, so that the global
			// counter of a hybrid key shows what was spent.
			if err := s.hyb.Close(); err != nil {
				t.Fatal(err)
			}
			for i, c := range tc.counters {
				look := ops[i]
				look.Cost = 0
				res := make([]sluice.Result, 1)
				var st sluice.Store = s
				if c.place == stack.KeyHybrid {
					st = s.conn // the global count, allotments given back
				}
				if err := st.Take(context.Background(), []sluice.Op{look}, res); err != nil {
					t.Fatal(err)
				}
				if used := c.quota - res[0].Remaining; used != got {
					t.Errorf("counter %q (quota %d): %d used, want %d (one per admitted request)", look.Key, c.quota, used, got)
				}
			}
			if st := s.Stats().Placed; st.UndoFailed != 0 {
				t.Errorf("Stats().Placed.UndoFailed = %d, want 0", st.UndoFailed)
			}
		})
	}
}

// A lease acquired in one placement is released when another denies; a
// charge settles with its batch.
func TestPlacedUndoLeaseAndCharge(t *testing.T) {
	srv := sharedRedis(t)
	clock := storetest.NewClock()
	s := newStack(t, stackConfig(srv.URL(), clock, DeniedOff))
	ctx := context.Background()
	conc := sluice.Limit{Algorithm: sluice.Concurrency, Quota: 2, Window: time.Minute}
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Hour}
	zero := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Hour}
	take := func(ops ...sluice.Op) []sluice.Result {
		t.Helper()
		res := make([]sluice.Result, len(ops))
		if err := s.Take(ctx, ops, res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	take(sluice.Op{Key: "{u}spent", Limit: zero, Cost: 1}) // the global counter is spent
	for i := range 5 {
		res := take(sluice.Op{Key: "l{u}lease", Limit: conc, Cost: 1}, sluice.Op{Key: "l{u}fw", Limit: fw, Cost: 2, Action: sluice.Charge},
			sluice.Op{Key: "{u}spent", Limit: zero, Cost: 1})
		if res[2].Allowed {
			t.Fatalf("round %d: the spent global counter allowed", i)
		}
		if !res[0].Allowed || res[0].Lease != 0 || res[0].Remaining != 2 {
			t.Errorf("round %d: the lease of a denied request = %+v, want allowed, no lease, 2 remaining (released)", i, res[0])
		}
		if !res[1].Allowed || res[1].Remaining != 5 {
			t.Errorf("round %d: the charge of a denied request = %+v, want 5 remaining (not charged)", i, res[1])
		}
	}
	if r := take(sluice.Op{Key: "l{u}fw", Limit: fw}); r[0].Remaining != 5 {
		t.Errorf("after 5 denied requests the charged counter has %d remaining, want 5", r[0].Remaining)
	}
	if st := s.Stats().Placed; st.Undone != 10 || st.UndoFailed != 0 {
		t.Errorf("Stats().Placed = %+v, want 10 undone (a lease and a charge per request), 0 failed", st)
	}
}

// When a later placement's store fails, what earlier placements charged
// is given back for ops with UndoIfUnknown (the caller treats the failure
// as not admitted), and kept for the others. The Redis store here is one
// that never connects (nothing listens on its port).
func TestPlacedUndoOnError(t *testing.T) {
	port, err := proctest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock()
	c := stackConfig(fmt.Sprintf("redis://127.0.0.1:%d/0", port), clock, DeniedAuto)
	c.Background = true
	s := newStack(t, c)
	ctx := context.Background()
	fw := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Hour}
	look := func() int64 {
		res := make([]sluice.Result, 1)
		if err := s.Take(ctx, []sluice.Op{{Key: "l{e}", Limit: fw}}, res); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	for _, undo := range []bool{true, false} {
		before := look()
		ops := []sluice.Op{{Key: "l{e}", Limit: fw, Cost: 1, UndoIfUnknown: undo}, {Key: "{e}", Limit: fw, Cost: 1, UndoIfUnknown: undo}}
		err := s.Take(ctx, ops, make([]sluice.Result, 2))
		if !errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("Take with Redis unreachable: %v, want ErrStoreUnavailable", err)
		}
		want := before
		if !undo {
			want-- // the local charge stays: the caller counts the request as admitted
		}
		if got := look(); got != want {
			t.Errorf("UndoIfUnknown %v: local counter %d remaining after the failure, want %d", undo, got, want)
		}
	}
	// The local limit denies first: the global store is only looked at,
	// and its failure does not turn the denial into an error (which a
	// limit failing open would admit).
	spent := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 0, Window: time.Hour}
	res := make([]sluice.Result, 2)
	if err := s.Take(ctx, []sluice.Op{{Key: "l{e}spent", Limit: spent, Cost: 1}, {Key: "{e}", Limit: fw, Cost: 1}}, res); err != nil {
		t.Fatalf("Take denied by the local store, global unreachable: %v, want the denial", err)
	}
	if res[0].Allowed || !res[1].Allowed || res[1].Remaining != 0 {
		t.Errorf("Take denied locally, global unreachable = %+v, want the local op denied, the global one allowed with 0 remaining (unknown)", res)
	}
}
