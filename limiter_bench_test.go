package sluice_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The library's front door against its baseline, in one run:
//
//	go test -run '^$' -bench 'LimiterAllow|XTimeRateAllow' -benchmem .
//
// Both decide one key with a limit that never denies, so every call does
// the full update.

// BenchmarkXTimeRateAllow is the baseline: golang.org/x/time/rate's Allow
// on one unkeyed limiter.
func BenchmarkXTimeRateAllow(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1e9), 1e9)
	b.ReportAllocs()
	for b.Loop() {
		l.Allow()
	}
}

// BenchmarkLimiterAllow is sluice.Limiter.Allow on the memory store, one
// live key, gcra.
func BenchmarkLimiterAllow(b *testing.B) {
	l, st := allowLimiter(b)
	defer st.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.Allow(ctx, "key")
	}
}

func allowLimiter(tb testing.TB) (*sluice.Limiter, *memory.Store) {
	tb.Helper()
	st := memory.New(memory.Options{})
	l, err := sluice.NewLimiter(st, sluice.Limit{Algorithm: sluice.GCRA, Quota: 1_000_000, Window: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := l.Allow(context.Background(), "key"); err != nil {
		tb.Fatal(err)
	}
	return l, st
}

// TestLimiterAllowAllocs: Limiter.Allow and AllowN on the memory store
// allocate nothing on a live key (a new key is copied once, by the store).
func TestLimiterAllowAllocs(t *testing.T) {
	l, st := allowLimiter(t)
	defer st.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		call func() (sluice.Result, error)
	}{
		{"Allow", func() (sluice.Result, error) { return l.Allow(ctx, "key") }},
		{"AllowN", func() (sluice.Result, error) { return l.AllowN(ctx, "key", 3) }},
	} {
		got := testing.AllocsPerRun(1000, func() {
			if _, err := tc.call(); err != nil {
				t.Fatal(err)
			}
		})
		if got != 0 {
			t.Errorf("%s allocates %v times per call, want 0", tc.name, got)
		}
	}
}

// takeOnly hides every method of a store but Take.
type takeOnly struct{ s sluice.Store }

func (t takeOnly) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	return t.s.Take(ctx, ops, res)
}

// takeOneOnly hides every method of the memory store but Take and TakeOne.
type takeOneOnly struct{ takeOnly }

func (t takeOneOnly) TakeOne(ctx context.Context, o sluice.Op) (sluice.Result, error) {
	return t.s.(*memory.Store).TakeOne(ctx, o)
}

// TestLimiterPathsAgree: a Limiter decides alike whichever way it reaches
// the store: the memory store's Bind (what NewLimiter picks for it), its
// TakeOne, or Take; hit for hit, with the same clock.
func TestLimiterPathsAgree(t *testing.T) {
	ctx := context.Background()
	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Quota: 7, Window: 3 * time.Second, Burst: 10},
		{Algorithm: sluice.LeakyBucket, Quota: 5, Window: 700 * time.Millisecond, Burst: 4},
		{Algorithm: sluice.TokenBucket, Quota: 7, Window: 3 * time.Second},
		{Algorithm: sluice.FixedWindow, Quota: 9, Window: 1500 * time.Millisecond},
		{Algorithm: sluice.SlidingLog, Quota: 6, Window: 900 * time.Millisecond},
		{Algorithm: sluice.Concurrency, Quota: 4, Window: 2 * time.Second},
	}
	for _, lim := range limits {
		clock := storetest.NewClock()
		var ls [3]*sluice.Limiter
		for i, wrap := range []func(*memory.Store) sluice.Store{
			func(s *memory.Store) sluice.Store { return s },
			func(s *memory.Store) sluice.Store { return takeOneOnly{takeOnly{s}} },
			func(s *memory.Store) sluice.Store { return takeOnly{s} },
		} {
			st := memory.New(memory.Options{Now: clock.Now})
			defer st.Close()
			l, err := sluice.NewLimiter(wrap(st), lim)
			if err != nil {
				t.Fatal(err)
			}
			ls[i] = l
		}
		denied := 0
		for i := range 200 {
			key := fmt.Sprint("k", i%3)
			n := int64(i % 4)
			var res [3]sluice.Result
			for j, l := range ls {
				r, err := l.AllowN(ctx, key, n)
				if err != nil {
					t.Fatalf("%v: AllowN(%q, %d): %v", lim, key, n, err)
				}
				res[j] = r
			}
			if res[1] != res[0] || res[2] != res[0] {
				t.Fatalf("%v: hit %d: AllowN(%q, %d) = %+v through Bind, %+v through TakeOne, %+v through Take; want all equal", lim, i, key, n, res[0], res[1], res[2])
			}
			if !res[0].Allowed {
				denied++
			}
			clock.Advance(lim.Window / 20)
		}
		if denied == 0 {
			t.Errorf("%v: no hit of 200 denied; the history does not test denial", lim)
		}
	}
}
