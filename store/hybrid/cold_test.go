package hybrid

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// TestColdKeys: a key too cold to earn an allotment (seen once, or hit
// less often than coldHits times per Horizon) is decided by the global
// store's Take, never leased (the first three hits of any key too); a warm key leases allotments of at least
// coldHits units; a hot key that goes quiet is cold again. Counted with
// Stats (Allots, Granted, Cold, Global, Local), on a fake clock.
func TestColdKeys(t *testing.T) {
	// A 10s window: the span an allotment may be spent is the Horizon.
	l := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1000, Window: 10 * time.Second, Burst: 1000}
	for _, tc := range []struct {
		name     string
		gap      time.Duration
		hits     int
		leases   bool   // any allotment leased
		cold     uint64 // ops counted cold
		minLocal uint64
	}{
		{"every 20s", 20 * time.Second, 10, false, 10, 0},
		{"every 6s (1.7 per horizon)", 6 * time.Second, 10, false, 10, 0},
		{"every 4s (2.5 per horizon)", 4 * time.Second, 10, true, 3, 1},
		{"every 1s (10 per horizon)", time.Second, 20, true, 3, 1},
		{"every 10ms", 10 * time.Millisecond, 200, true, 3, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 1, Options{Horizon: 10 * time.Second})
			h := f.inst[0]
			op := []sluice.Op{{Key: "k", Limit: l, Cost: 1}}
			res := make([]sluice.Result, 1)
			for i := range tc.hits {
				if err := h.Take(context.Background(), op, res); err != nil || !res[0].Allowed {
					t.Fatalf("hit %d: Take = %v, %+v; want allowed", i, err, res[0])
				}
				h.wg.Wait() // background refills land before the clock moves
				f.clock.Advance(tc.gap)
			}
			st := h.Stats()
			if got := st.Allots > 0; got != tc.leases {
				t.Errorf("leased: got %v (%d allotment requests), want %v", got, st.Allots, tc.leases)
			}
			if st.Cold != tc.cold {
				t.Errorf("cold ops: got %d, want %d", st.Cold, tc.cold)
			}
			if st.Local < tc.minLocal {
				t.Errorf("local decisions: got %d, want ≥ %d", st.Local, tc.minLocal)
			}
			if st.Local+st.Global != uint64(tc.hits) {
				t.Errorf("local %d + global %d decisions, want %d hits", st.Local, st.Global, tc.hits)
			}
			if st.Allots > 0 && st.Granted < coldHits*st.Allots {
				t.Errorf("%d units granted in %d allotments, want ≥ %d each (never a lease of a single unit)", st.Granted, st.Allots, coldHits)
			}
		})
	}

	t.Run("hot, then quiet", func(t *testing.T) {
		f := newFleet(t, 1, Options{Horizon: 10 * time.Second})
		h := f.inst[0]
		op := []sluice.Op{{Key: "k", Limit: l, Cost: 1}}
		res := make([]sluice.Result, 1)
		take := func(what string) {
			t.Helper()
			if err := h.Take(context.Background(), op, res); err != nil || !res[0].Allowed {
				t.Fatalf("%s: Take = %v, %+v; want allowed", what, err, res[0])
			}
			h.wg.Wait()
		}
		for i := range 50 {
			take(fmt.Sprint("hot hit ", i))
			f.clock.Advance(10 * time.Millisecond)
		}
		before := h.Stats()
		f.clock.Advance(30 * time.Second) // past the lease: the allotment is void
		take("after 30s quiet")
		st := h.Stats()
		if st.Cold != before.Cold+1 || st.Allots != before.Allots {
			t.Errorf("quiet key's hit: cold %d→%d, allots %d→%d; want cold +1, no lease", before.Cold, st.Cold, before.Allots, st.Allots)
		}
	})
}
