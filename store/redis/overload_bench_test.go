package redis

import (
	"context"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// busyCores starts n processes that spin (as `stress --cpu n` would) and
// stops them when the benchmark ends, so that Redis, the client and the
// callers all compete for the cores.
func busyCores(tb testing.TB, n int) {
	tb.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			tb.Fatalf("start a busy process: %v", err)
		}
		tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// BenchmarkCallLatencyBusy measures what the default Options.Timeout is
// chosen from: the time of one script call, from when it is handed to the
// client to its reply, with every core busy (runtime.NumCPU() spinning
// processes), three stores (a fleet of three in one process, each with its
// own connections) and 100 goroutines taking from one key, for each
// algorithm. It reports p50, p99, p99.9, p99.99 and max of the call time.
//
//	go test ./store/redis -run '^$' -bench CallLatencyBusy -benchtime 20000x
func BenchmarkCallLatencyBusy(b *testing.B) {
	addr := benchAddr(b)
	busyCores(b, runtime.NumCPU())
	for _, alg := range stack.Algorithms() {
		b.Run(alg.String(), func(b *testing.B) {
			limit := sluice.Limit{Algorithm: alg, Quota: 500, Window: 24 * time.Hour}
			var mu sync.Mutex
			var calls []time.Duration
			var stores []*Store
			for range 3 {
				st, err := New(Options{URL: "redis://" + addr + "/0", Timeout: 10 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				st.callHook = func(d time.Duration, o callOutcome) {
					mu.Lock()
					calls = append(calls, d)
					mu.Unlock()
				}
				stores = append(stores, st)
			}
			key := "latency:" + alg.String() + ":" + time.Now().Format("150405.000")
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := (b.N + 99) / 100
			for w := range 100 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					st := stores[w%3]
					ops := []sluice.Op{{Key: key, Limit: limit, Cost: 1}}
					res := make([]sluice.Result, 1)
					for range per {
						if err := st.Take(context.Background(), ops, res); err != nil {
							b.Error(err)
							return
						}
						if alg == sluice.Concurrency && res[0].Allowed {
							rel := []sluice.Op{{Key: key, Limit: limit, Release: true, Lease: res[0].Lease}}
							if err := st.Take(context.Background(), rel, res); err != nil {
								b.Error(err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(calls)
			if n := len(calls); n > 0 {
				q := func(p float64) float64 { return float64(calls[min(n-1, int(p*float64(n)))].Microseconds()) / 1000 }
				b.ReportMetric(q(0.5), "p50-ms")
				b.ReportMetric(q(0.99), "p99-ms")
				b.ReportMetric(q(0.999), "p99.9-ms")
				b.ReportMetric(q(0.9999), "p99.99-ms")
				b.ReportMetric(float64(calls[n-1].Microseconds())/1000, "max-ms")
				b.ReportMetric(float64(n), "calls")
			}
		})
	}
}
