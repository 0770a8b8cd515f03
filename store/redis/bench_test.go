package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
)

// Benchmarks against a real Redis: the one named by SLUICE_REDIS_ADDR
// (host:port, used by store/redis/bench/run.sh so that redis-benchmark and
// these run against the same server in one run), else one started here.
//
// Every benchmark makes decisions on a token bucket over 10^4 keys from 64
// goroutines (RunParallel × SetParallelism) and reports decisions/s, the
// p50/p99 latency of one decision, and Redis CPU per decision (µs, from INFO
// cpu before and after).

const (
	benchKeys    = 10_000
	benchWorkers = 64
)

var benchLimit = sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1000, Window: time.Second}

func benchAddr(b *testing.B) string {
	b.Helper()
	if a := os.Getenv("SLUICE_REDIS_ADDR"); a != "" {
		return a
	}
	return redistest.Start(b).Addr()
}

// singleScript is the one-key token-bucket script: the baseline that
// redis-benchmark and the naive loop run.
var singleScript = compose("lib.lua", "bucket.lua", "token_bucket.lua", "single.lua")

// redisCPU returns used_cpu_sys + used_cpu_user of the server, in seconds.
func redisCPU(b *testing.B, addr string) float64 {
	b.Helper()
	r, err := redistest.Do(addr, "INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(r.(string), "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// runDecisions runs decide from 64 goroutines b.N times in all, with a
// random key of 10^4 each time, and reports the figures.
func runDecisions(b *testing.B, addr string, decide func(ctx context.Context, key string) error) {
	b.Helper()
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench:%d", i)
	}
	var mu sync.Mutex
	var lat []time.Duration
	cpu0, self0 := redisCPU(b, addr), selfCPU()
	b.ReportAllocs()
	b.SetParallelism(max(1, benchWorkers/max(1, testingProcs())))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
		local := make([]time.Duration, 0, 1024)
		ctx := context.Background()
		for pb.Next() {
			t0 := time.Now()
			if err := decide(ctx, keys[rng.IntN(len(keys))]); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	cpu, self := redisCPU(b, addr)-cpu0, selfCPU()-self0
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		b.ReportMetric(cpu*1e6/float64(len(lat)), "redis-cpu-µs/decision")
		b.ReportMetric(self*1e6/float64(len(lat)), "client-cpu-µs/decision")
	}
}

// selfCPU returns the user + system CPU time of this process, in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }

// BenchmarkStore: decisions through the Store (coalesced into multi-group
// script calls).
func BenchmarkStore(b *testing.B) { benchStore(b, false) }

// BenchmarkStoreUndoIfUnknown: BenchmarkStore with every op marked
// UndoIfUnknown, as the engine marks the Takes of closed and local limits:
// they skip the script's one-op fast path and carry undo triples.
func BenchmarkStoreUndoIfUnknown(b *testing.B) { benchStore(b, true) }

func benchStore(b *testing.B, undo bool) {
	addr := benchAddr(b)
	inflight, _ := strconv.Atoi(os.Getenv("SLUICE_BENCH_INFLIGHT"))
	batch, _ := strconv.Atoi(os.Getenv("SLUICE_BENCH_BATCH"))
	st, err := New(Options{URL: "redis://" + addr, Timeout: time.Second, Prefix: "bs:", MaxInFlight: inflight, MaxBatch: batch})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	runDecisions(b, addr, func(ctx context.Context, key string) error {
		ops := [1]sluice.Op{{Key: key, Limit: benchLimit, Cost: 1, UndoIfUnknown: undo}}
		var res [1]sluice.Result
		return st.Take(ctx, ops[:], res[:])
	})
	if s := st.Stats(); s.Calls > 0 {
		b.ReportMetric(float64(s.Groups)/float64(s.Calls), "takes/call")
	}
}

// BenchmarkRueidisEVALSHA: one EVALSHA of the single-key script per
// decision through rueidis, which pipelines concurrent commands on one
// connection by itself.
func BenchmarkRueidisEVALSHA(b *testing.B) {
	addr := benchAddr(b)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	script := rueidis.NewLuaScript(singleScript)
	spec := limitSpec(benchLimit)
	runDecisions(b, addr, func(ctx context.Context, key string) error {
		return script.Exec(ctx, c, []string{"br:" + key}, []string{spec, "1", ""}).Error()
	})
}

// BenchmarkGoRedisEVALSHA: the naive loop — one EVALSHA per decision
// through go-redis v9, whose pool gives each in-flight command its own
// connection (no pipelining).
func BenchmarkGoRedisEVALSHA(b *testing.B) {
	addr := benchAddr(b)
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: benchWorkers})
	defer c.Close()
	script := goredis.NewScript(singleScript)
	spec := limitSpec(benchLimit)
	runDecisions(b, addr, func(ctx context.Context, key string) error {
		return script.Run(ctx, c, []string{"bg:" + key}, spec, 1, "").Err()
	})
}

// BenchmarkMemoryPerKey fills a fresh server with SLUICE_BENCH_KEYS keys
// (e.g. 1000000) per algorithm through the store and reports Redis
// used_memory per key. It is skipped unless that variable is set: it takes
// a while and is run by store/redis/bench/run.sh.
func BenchmarkMemoryPerKey(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("SLUICE_BENCH_KEYS"))
	if n <= 0 {
		b.Skip("set SLUICE_BENCH_KEYS=1000000 to measure memory per key")
	}
	srv := redistest.Start(b)
	st, err := New(Options{URL: srv.URL(), Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for _, a := range stack.Algorithms() {
		b.Run(a.String(), func(b *testing.B) {
			if _, err := srv.Do("FLUSHALL"); err != nil {
				b.Fatal(err)
			}
			before := usedMemory(b, srv.Addr())
			limit := sluice.Limit{Algorithm: a, Quota: 100, Window: time.Hour}
			const batch, workers = 64, 8
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ops := make([]sluice.Op, batch)
					res := make([]sluice.Result, batch)
					for i := w * batch; i < n; i += workers * batch {
						ops = ops[:0]
						for k := i; k < min(i+batch, n); k++ {
							ops = append(ops, sluice.Op{Key: "user:" + strconv.Itoa(k), Limit: limit, Cost: 1})
						}
						if err := st.Take(context.Background(), ops, res[:len(ops)]); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			keys, _ := srv.Do("DBSIZE")
			if keys != int64(n) {
				b.Fatalf("DBSIZE = %v, want %d", keys, n)
			}
			b.ReportMetric(float64(usedMemory(b, srv.Addr())-before)/float64(n), "bytes/key")
		})
	}
}

func usedMemory(b *testing.B, addr string) int64 {
	b.Helper()
	r, err := redistest.Do(addr, "INFO", "memory")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(r.(string), "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("INFO memory has no used_memory")
	return 0
}
