package pg

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/tenant"
)

// BenchmarkLoadAll1M measures a registry's full load of 10^6 tenant
// records (one in 16 with an override) from a real PostgreSQL: the time of
// one load (ns/op) and the heap the snapshot keeps (MiB-kept). Filling the
// database takes a while and is not timed.
//
//	go test ./tenant/pg -run XXX -bench LoadAll1M -benchtime 3x
func BenchmarkLoadAll1M(b *testing.B) {
	srv := pgtest.Start(b)
	url := srv.NewDatabase(b)
	s, err := Open(Options{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	const n = 1_000_000
	tiers := []string{"free", "pro", "enterprise"}
	now := time.Now()
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"sluice_tenants"}, []string{"tenant", "tier", "effective_at"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			return []any{"tenant-" + strconv.Itoa(i), tiers[i%3], now}, nil
		})); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"sluice_overrides"},
		[]string{"tenant", "descriptor", "requests_per_unit", "unit", "window_us", "algorithm", "effective_at"},
		pgx.CopyFromSlice(n/16, func(i int) ([]any, error) {
			return []any{"tenant-" + strconv.Itoa(16*i), "endpoint:POST /api/v1/orders", int64(500), "minute", int64(60_000_000), "fixed_window", now}, nil
		})); err != nil {
		b.Fatal(err)
	}
	load := func() *tenant.Snapshot {
		reg := tenant.NewRegistry(s, tenant.Options{})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = reg.Run(rctx); close(done) }()
		<-reg.Synced()
		cancel()
		<-done
		return reg.Snapshot()
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	one := load()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	if one.Len() != n {
		b.Fatalf("loaded %d tenants, want %d", one.Len(), n)
	}
	runtime.KeepAlive(one)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		load()
	}
	b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/(1<<20), "MiB-kept")
}
