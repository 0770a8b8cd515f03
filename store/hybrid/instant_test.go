package hybrid

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestLocalSpendInstant: a local spend of a fixed window reports an instant
// on the store's clock (Result.At): the grant's instant plus the local time
// since it arrived. The global store and the instance read one test clock
// that stands still while a lease is taken, so that is exactly the clock's
// reading at the spend; the hits cross many windows. A bucket's local
// spend reports none.
func TestLocalSpendInstant(t *testing.T) {
	for _, tc := range []struct {
		l       sluice.Limit
		instant bool
	}{
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Second}, true},
		{sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: 10 * time.Second, Burst: 500}, false},
	} {
		t.Run(tc.l.Algorithm.String(), func(t *testing.T) {
			clock := storetest.NewClock()
			mem := memory.New(memory.Options{Now: clock.Now})
			t.Cleanup(func() { mem.Close() })
			h, err := New(mem, Options{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			ops := []sluice.Op{{Key: "k", Limit: tc.l, Cost: 1}}
			res := make([]sluice.Result, 1)
			local := 0
			for i := range 400 {
				before := h.Stats().Local
				if err := h.Take(context.Background(), ops, res); err != nil || !res[0].Allowed {
					t.Fatalf("hit %d: Take = %v, %+v; want allowed", i, err, res[0])
				}
				h.wg.Wait()
				now := clock.Now().UnixMicro()
				if h.Stats().Local == before {
					clock.Advance(7 * time.Millisecond)
					continue // decided by the global store: its own instant
				}
				local++
				if !tc.instant {
					if res[0].At != 0 {
						t.Fatalf("hit %d: a bucket's local spend At = %d, want 0", i, res[0].At)
					}
				} else if res[0].At != now {
					t.Fatalf("hit %d: a local spend's At = %d, want %d (the clock's reading)", i, res[0].At, now)
				}
				clock.Advance(7 * time.Millisecond)
			}
			if local < 100 {
				t.Fatalf("%d of 400 hits spent locally, want most (the test proves nothing otherwise)", local)
			}
		})
	}
}

// TestLocalAt: a local spend's instant is the host's clock when it lies in
// the interval the grant's timing allows, else that interval's nearer end
// (so a host clock off from the store's still places the spend in its
// grant's window).
func TestLocalAt(t *testing.T) {
	// Granted at the store's 1,000,000 µs; the lease was sent at local 100
	// and its reply arrived at local 300: at local now 1,100 the spend's
	// true instant is in [1,000,800, 1,001,000].
	e := entry{atLo: 1_000_000 - 300, atHi: 1_000_000 - 100, atSet: true}
	for _, tc := range []struct{ wall, want int64 }{
		{1_000_900, 1_000_900}, // the host's clock agrees: exact
		{999_000, 1_000_800},   // behind: the earliest possible
		{1_005_000, 1_001_000}, // ahead: the latest possible
	} {
		if got := e.localAt(1_100, tc.wall); got != tc.want {
			t.Errorf("localAt(1100, wall %d) = %d, want %d", tc.wall, got, tc.want)
		}
	}
	if got := (&entry{}).localAt(1_100, 5); got != 0 {
		t.Errorf("no fixed_window grant: localAt = %d, want 0", got)
	}
}
