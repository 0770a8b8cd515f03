package sluice_test

import (
	"context"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
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
