package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestBindMatchesTake: a bound take decides exactly as Take of the same op,
// hit for hit, on a random history of costs (looks, hits, costs above the
// capacity) and clock steps; and it shares the keys' state with Take (the
// history alternates the two on one store, and a second store sees Take
// only).
func TestBindMatchesTake(t *testing.T) {
	ctx := context.Background()
	for _, l := range storetest.PropLimits() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			clock := storetest.NewClock()
			bound := memory.New(memory.Options{Now: clock.Now})
			defer bound.Close()
			plain := memory.New(memory.Options{Now: clock.Now})
			defer plain.Close()
			take, err := bound.Bind(l)
			if err != nil {
				t.Fatalf("Bind(%v): %v", l, err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(l.Algorithm)))
			denied := 0
			for i := range 400 {
				key := fmt.Sprintf("k%d", rng.IntN(3))
				cost := rng.Int64N(4) // 0 looks, 1..3 hits
				if rng.IntN(20) == 0 {
					cost = stack.Capacity(l) + 1
				}
				var got sluice.Result
				if i%3 == 2 { // the bound store through Take too: one state
					got = take1(t, bound, key, l, cost)
				} else if got, err = take(ctx, key, cost); err != nil {
					t.Fatalf("hit %d: bound take(%q, %d): %v", i, key, cost, err)
				}
				want := take1(t, plain, key, l, cost)
				if got != want {
					t.Fatalf("hit %d: take(%q, %d) = %+v, Take of the same op = %+v", i, key, cost, got, want)
				}
				if !got.Allowed {
					denied++
				}
				clock.Advance(time.Duration(rng.Int64N(int64(l.Window / 8))))
			}
			if denied == 0 {
				t.Errorf("no hit of 400 was denied; the history does not test denial")
			}
		})
	}
}

func take1(t *testing.T, s sluice.Store, key string, l sluice.Limit, cost int64) sluice.Result {
	t.Helper()
	res := make([]sluice.Result, 1)
	if err := s.Take(context.Background(), []sluice.Op{{Key: key, Limit: l, Cost: cost}}, res); err != nil {
		t.Fatalf("Take(%q, %d): %v", key, cost, err)
	}
	return res[0]
}

// TestBindErrors: Bind refuses an invalid limit, and a bound take refuses a
// cost Take refuses, with the same error.
func TestBindErrors(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	if _, err := s.Bind(sluice.Limit{Algorithm: sluice.GCRA, Quota: 1}); err == nil {
		t.Errorf("Bind of a limit with no window: nil error, want one")
	}
	ctx := context.Background()
	for _, l := range storetest.PropLimits() {
		take, err := s.Bind(l)
		if err != nil {
			t.Fatalf("Bind(%v): %v", l, err)
		}
		for _, cost := range []int64{-1, algorithm.MaxExact + 1} {
			_, got := take(ctx, "k", cost)
			want := s.Take(ctx, []sluice.Op{{Key: "k", Limit: l, Cost: cost}}, make([]sluice.Result, 1))
			if got == nil || want == nil || got.Error() != want.Error() {
				t.Errorf("%v: take(cost %d) error %v, Take's %v; want the same, not nil", l.Algorithm, cost, got, want)
			}
		}
	}
}

// TestBindMaxKeys: new keys taken through Bind count against MaxKeys as
// Take's do.
func TestBindMaxKeys(t *testing.T) {
	s := memory.New(memory.Options{Shards: 1, MaxKeys: 50})
	defer s.Close()
	take, err := s.Bind(sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := take(context.Background(), fmt.Sprint("key", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Keys != 50 || st.Evictions != 150 {
		t.Errorf("after 200 hour-long keys into a store of 50: Keys %d, Evictions %d; want 50 and 150", st.Keys, st.Evictions)
	}
}

// TestBindZeroAllocs: a bound take on a live key allocates nothing (the
// log algorithms' logs grow, amortized, as Take's do).
func TestBindZeroAllocs(t *testing.T) {
	s := memory.New(memory.Options{})
	defer s.Close()
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingWindow} {
		take, err := s.Bind(sluice.Limit{Algorithm: a, Quota: 1_000_000, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = take(ctx, "alloc", 1) // create the key
		if n := testing.AllocsPerRun(100, func() { _, _ = take(ctx, "alloc", 1) }); n != 0 {
			t.Errorf("%v: %.1f allocs per bound take, want 0", a, n)
		}
	}
}
