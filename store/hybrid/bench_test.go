package hybrid

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
)

// Decisions for 10^4 keys far from their limits: the hybrid store over a
// real redis-server, beside the memory store and Redis itself. Reported:
// allotments and global Takes per decision.
func BenchmarkFarFromLimit(b *testing.B) {
	const keys = 10_000
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1_000_000, Window: time.Minute}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("user-%d", i)
	}
	srv := redistest.Start(b)
	rs, err := redis.New(redis.Options{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	mem := memory.New(memory.Options{})
	defer mem.Close()
	h, err := New(rs, Options{Horizon: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	for _, tc := range []struct {
		name string
		s    sluice.Store
	}{{"memory", mem}, {"hybrid", h}, {"redis", rs}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			before := h.Stats()
			b.RunParallel(func(pb *testing.PB) {
				ops := make([]sluice.Op, 1)
				res := make([]sluice.Result, 1)
				i := int(rand.Uint32N(keys))
				for pb.Next() {
					ops[0] = sluice.Op{Key: names[i%keys], Limit: l, Cost: 1}
					i += 7
					if err := tc.s.Take(context.Background(), ops, res); err != nil {
						b.Fatal(err)
					}
				}
			})
			if tc.name == "hybrid" {
				st := h.Stats()
				b.ReportMetric(float64(st.Allots-before.Allots)/float64(b.N), "allots/op")
				b.ReportMetric(float64(st.Global-before.Global)/float64(b.N), "global/op")
				b.ReportMetric(float64(b.N)/keys, "hits/key")
			}
		})
	}
}

// The local path alone: 10^4 keys whose allotments are already held.
func BenchmarkLocalDecision(b *testing.B) {
	const keys = 10_000
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1 << 40, Window: time.Hour}
	srv := redistest.Start(b)
	rs, err := redis.New(redis.Options{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	h, err := New(rs, Options{Horizon: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	names := make([]string, keys)
	ops := make([]sluice.Op, 1)
	res := make([]sluice.Result, 1)
	for i := range names {
		names[i] = fmt.Sprintf("user-%d", i)
		// Spend a few units over a while so that the observed rate sizes a
		// large allotment.
		for range 3 {
			ops[0] = sluice.Op{Key: names[i], Limit: l, Cost: 1}
			if err := h.Take(context.Background(), ops, res); err != nil {
				b.Fatal(err)
			}
		}
	}
	h.wg.Wait()
	before := h.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ops := make([]sluice.Op, 1)
		res := make([]sluice.Result, 1)
		i := int(rand.Uint32N(keys))
		for pb.Next() {
			ops[0] = sluice.Op{Key: names[i%keys], Limit: l, Cost: 1}
			i += 7
			if err := h.Take(context.Background(), ops, res); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	st := h.Stats()
	b.ReportMetric(float64(st.Allots-before.Allots)/float64(b.N), "allots/op")
}
