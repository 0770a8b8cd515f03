package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/redis"
)

// runBenchRedis measures the Redis store against a real Redis: goroutines
// take from random keys as fast as they can for the duration, then the
// command prints decisions/s, latency percentiles and how many Takes each
// script call carried.
func runBenchRedis(ctx context.Context, args []string, _ env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redis", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("redis-url", "redis://127.0.0.1:6379/0", "Redis URL (see store/redis.ParseURL: single node, Sentinel or Cluster)")
	workers := fs.Int("goroutines", 64, "concurrent callers")
	keys := fs.Int("keys", 10_000, "distinct keys")
	dur := fs.Duration("duration", 5*time.Second, "how long to run")
	alg := fs.String("algorithm", "token_bucket", "algorithm of the limit")
	quota := fs.Int64("quota", 1000, "quota of the limit, per window")
	window := fs.Duration("window", time.Second, "window of the limit")
	prefix := fs.String("prefix", "sluice-bench:", "key prefix (keys expire by themselves)")
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	a, err := sluice.ParseAlgorithm(*alg)
	if err != nil {
		return fmt.Errorf("%w: --algorithm: %w", errUsage, err)
	}
	limit := sluice.Limit{Algorithm: a, Quota: *quota, Window: *window}
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("%w: limit: %w", errUsage, err)
	}
	if *workers < 1 || *keys < 1 || *dur <= 0 {
		return fmt.Errorf("%w: --goroutines, --keys and --duration must be positive", errUsage)
	}
	opts, err := redis.ParseURL(*url)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if opts.Prefix == "" {
		opts.Prefix = *prefix
	}
	opts.Timeout = max(opts.Timeout, time.Second)
	st, err := redis.New(opts)
	if err != nil {
		return err
	}
	defer st.Close()

	names := make([]string, *keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		denied   int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
			var local []time.Duration
			var nDenied int
			ops := make([]sluice.Op, 1)
			res := make([]sluice.Result, 1)
			for ctx.Err() == nil {
				ops[0] = sluice.Op{Key: names[rng.IntN(len(names))], Limit: limit, Cost: 1}
				t0 := time.Now()
				err := st.Take(context.Background(), ops, res)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				local = append(local, time.Since(t0))
				if !res[0].Allowed {
					nDenied++
				}
				if res[0].Lease != 0 {
					ops[0].Release, ops[0].Lease = true, res[0].Lease
					if err := st.Take(context.Background(), ops, res); err != nil {
						return
					}
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			denied += nDenied
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return fmt.Errorf("redis: %w", firstErr)
	}
	if len(lat) == 0 {
		return errors.New("redis: no decision completed")
	}
	slices.Sort(lat)
	pct := func(p int) time.Duration { return lat[(len(lat)-1)*p/100].Round(time.Microsecond) }
	s := st.Stats()
	fmt.Fprintf(stdout, "%s over %d keys, %d goroutines, %v (cluster: %v)\n", limit, *keys, *workers, elapsed.Round(time.Millisecond), st.Cluster())
	fmt.Fprintf(stdout, "%.0f decisions/s  p50 %v  p99 %v  max %v  denied %d of %d  takes/script call %.1f\n",
		float64(len(lat))/elapsed.Seconds(), pct(50), pct(99), lat[len(lat)-1].Round(time.Microsecond),
		denied, len(lat), float64(s.Groups)/float64(max(s.Calls, 1)))
	return nil
}
