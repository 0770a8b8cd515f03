package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
)

// Run with:
//   go test -run '^$' -bench . -benchmem ./store/memory
// The baseline, BenchmarkXTimeRate, is one unkeyed golang.org/x/time/rate
// limiter; compare Sluice's keyed decisions against it in the same run.

// keys returns n distinct 20-byte keys.
func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("key-%016d", i)
	}
	return out
}

func BenchmarkXTimeRate(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1e9), 1e9) // never denies: measure the decision
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow()
			}
		})
	})
}

func benchLimit(a sluice.Algorithm) sluice.Limit {
	l := sluice.Limit{Algorithm: a, Quota: 1_000_000, Window: time.Second}
	if a == sluice.SlidingLog || a == sluice.Concurrency {
		l.Quota = 1000 // the log keeps one entry per hit; keep it in bounds
	}
	return l
}

func benchTake(b *testing.B, s *memory.Store, ks []string, l sluice.Limit, parallel bool) {
	ctx := context.Background()
	// Create every key first: the benchmark measures decisions on live keys.
	res := make([]sluice.Result, 1)
	for _, k := range ks {
		_ = s.Take(ctx, []sluice.Op{{Key: k, Limit: l, Cost: 1}}, res)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		ops := []sluice.Op{{Limit: l, Cost: 1}}
		i := 0
		for b.Loop() {
			ops[0].Key = ks[i]
			if i++; i == len(ks) {
				i = 0
			}
			_ = s.Take(ctx, ops, res)
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		ops := []sluice.Op{{Limit: l, Cost: 1}}
		res := make([]sluice.Result, 1)
		i := rand.IntN(len(ks))
		for pb.Next() {
			ops[0].Key = ks[i]
			if i++; i == len(ks) {
				i = 0
			}
			_ = s.Take(ctx, ops, res)
		}
	})
}

// BenchmarkTake measures one decision through Store.Take over 10^4 live
// keys, for every algorithm, serial and parallel.
func BenchmarkTake(b *testing.B) {
	ks := keys(10_000)
	for _, a := range stack.Algorithms() {
		for _, par := range []bool{false, true} {
			name := fmt.Sprintf("%v/keys=1e4/serial", a)
			if par {
				name = fmt.Sprintf("%v/keys=1e4/parallel", a)
			}
			b.Run(name, func(b *testing.B) {
				s := memory.New(memory.Options{})
				defer s.Close()
				benchTake(b, s, ks, benchLimit(a), par)
			})
		}
	}
}

// BenchmarkTakeMillionKeys measures decisions spread over 10^6 live keys,
// where the state no longer fits in cache.
func BenchmarkTakeMillionKeys(b *testing.B) {
	ks := keys(1_000_000)
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA} {
		b.Run(fmt.Sprintf("%v/keys=1e6/serial", a), func(b *testing.B) {
			s := memory.New(memory.Options{MaxKeys: 2 * len(ks)}) // no eviction
			defer s.Close()
			rand.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
			benchTake(b, s, ks, benchLimit(a), false)
		})
	}
}

// BenchmarkBytesPerKey reports the heap a live key costs (20-byte keys,
// 10^6 of them), from runtime.MemStats before and after.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	ks := keys(n)
	for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow} {
		b.Run(a.String(), func(b *testing.B) {
			// One measurement whatever b.N is: it is a size, not a time.
			b.ReportMetric(bytesPerKey(b, ks, benchLimit(a)), "B/key")
		})
	}
}

func bytesPerKey(b *testing.B, ks []string, l sluice.Limit) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := memory.New(memory.Options{MaxKeys: 2 * len(ks)}) // no eviction
	ctx := context.Background()
	ops := []sluice.Op{{Limit: l, Cost: 1}}
	res := make([]sluice.Result, 1)
	for _, k := range ks {
		ops[0].Key = k
		_ = s.Take(ctx, ops, res)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := s.Stats().Keys; got != len(ks) {
		b.Fatalf("Keys = %d, want %d", got, len(ks))
	}
	runtime.KeepAlive(s)
	s.Close()
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(len(ks))
}
