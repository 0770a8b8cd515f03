package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/redis"
)

// Patterns of sluice-bench redis: what each decision sends to Redis.
const (
	// patternSluice decides through the Redis store (store/redis: one
	// script call per coalesced batch, or with --native one pipeline of
	// TIME and per-window INCRBYs).
	patternSluice = "sluice"
	// patternIncrExpire is the command pattern of envoyproxy/ratelimit's
	// Redis driver for a fixed window: per decision, INCRBY of the
	// window's counter by the hits and EXPIRE of it for the window's
	// length, pipelined together (its fixedRateLimitCacheImpl), the
	// decision being count ≤ quota. As its defaults send them
	// (REDIS_POOL_SIZE 10, REDIS_PIPELINE_WINDOW 0: each request's
	// pipeline written at once on a connection of the pool, none shared
	// with another request's), unless --envoy-pool is 0.
	patternIncrExpire = "incrby-expire"
)

// envoyPoolSize is envoyproxy/ratelimit's default REDIS_POOL_SIZE.
const envoyPoolSize = 10

// benchRedisResult is what one run of sluice-bench redis measured.
type benchRedisResult struct {
	lat      []time.Duration
	denied   int64
	degraded int64 // decisions a failure policy would have answered
	firstErr error
	elapsed  time.Duration
	stats    redis.Stats      // store/redis counters (pattern sluice)
	cmds     map[string]int64 // INFO commandstats calls deltas, INFO itself left out
	usec     map[string]int64 // INFO commandstats usec deltas
	cpu      float64          // used_cpu_user + used_cpu_sys delta, seconds
	counted  bool             // cmds, usec and cpu were read
}

// runBenchRedis measures a real Redis deciding fixed-size decisions, through
// the Redis store (its script path, or with --native its native windows:
// Options.NativeFixedWindow and NativeSlidingWindow) or with
// envoyproxy/ratelimit's
// command pattern:
// goroutines take from random keys as fast as they can (or at --rate) for
// the duration, then the command prints decisions/s, latency percentiles,
// how many Takes each script call carried, and what Redis spent per
// decision: every command it ran (INFO commandstats deltas: script calls,
// SCRIPT LOAD and the commands scripts run) and its CPU time (INFO cpu).
// A decision whose store call failed would have been answered by a
// failure policy, not by Redis: the command counts them, and if there was
// any it prints why and fails instead of printing Redis figures.
func runBenchRedis(ctx context.Context, args []string, _ env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("redis", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("redis-url", "redis://127.0.0.1:6379/0", "Redis URL (see store/redis.ParseURL: single node, Sentinel or Cluster; Redis figures need a single node)")
	pattern := fs.String("pattern", patternSluice, "what a decision sends: sluice (the Redis store) or incrby-expire (envoyproxy/ratelimit's pipelined INCRBY + EXPIRE; fixed_window only)")
	workers := fs.Int("goroutines", 64, "concurrent callers")
	keys := fs.Int("keys", 10_000, "distinct keys")
	dur := fs.Duration("duration", 5*time.Second, "how long to run")
	rate := fs.Float64("rate", 0, "decisions per second over all callers (0: as fast as they can)")
	alg := fs.String("algorithm", "token_bucket", "algorithm of the limit")
	quota := fs.Int64("quota", 1000, "quota of the limit, per window")
	window := fs.Duration("window", time.Second, "window of the limit")
	prefix := fs.String("prefix", "sluice-bench:", "key prefix (keys expire by themselves)")
	pool := fs.Int("envoy-pool", envoyPoolSize, "--pattern incrby-expire: connections, each request's INCRBY + EXPIRE written alone on one (envoyproxy/ratelimit's REDIS_POOL_SIZE, REDIS_PIPELINE_WINDOW 0); 0: one connection that pipelines every caller's commands together")
	maxBatch := fs.Int("max-batch", 0, "the store's Options.MaxBatch (0: its default); 1 sends one decision per script call, as a Redis Cluster does for keys in different slots")
	timeout := fs.Duration("timeout", time.Second, "the store's Options.Timeout (at least the URL's); a call without a reply by then fails its decisions")
	native := fs.Bool("native", false, "--pattern sluice: the store's native counters, Options.NativeFixedWindow and NativeSlidingWindow (the windows decided by INCRBY on per-window keys, pipelined, no script); fixed_window and sliding_window only")
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
	if *workers < 1 || *keys < 1 || *dur <= 0 || *rate < 0 || *timeout <= 0 || *pool < 0 || *maxBatch < 0 {
		return fmt.Errorf("%w: --goroutines, --keys, --duration and --timeout must be positive, --rate ≥ 0", errUsage)
	}
	if *pattern != patternSluice && *pattern != patternIncrExpire {
		return fmt.Errorf("%w: --pattern %q, want %s or %s", errUsage, *pattern, patternSluice, patternIncrExpire)
	}
	if *native && (*pattern != patternSluice || a != sluice.FixedWindow && a != sluice.SlidingWindow) {
		return fmt.Errorf("%w: --native is the Redis store's native windows: use --pattern %s --algorithm fixed_window or sliding_window", errUsage, patternSluice)
	}
	if *pattern == patternIncrExpire && a != sluice.FixedWindow {
		return fmt.Errorf("%w: --pattern %s is a fixed window: use --algorithm fixed_window", errUsage, patternIncrExpire)
	}
	if *pattern == patternIncrExpire && (*window < time.Second || *window%time.Second != 0) {
		return fmt.Errorf("%w: --pattern %s expires keys in whole seconds: --window must be a multiple of 1s", errUsage, patternIncrExpire)
	}
	opts, err := redis.ParseURL(*url)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if opts.Prefix == "" {
		opts.Prefix = *prefix
	}
	opts.Timeout = max(opts.Timeout, *timeout)
	opts.MaxBatch = *maxBatch
	opts.NativeFixedWindow, opts.NativeSlidingWindow = *native, *native

	names := make([]string, *keys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	var (
		decide func(rng *rand.Rand) (allowed bool, err error)
		st     *redis.Store
	)
	switch *pattern {
	case patternSluice:
		if st, err = redis.New(opts); err != nil {
			return err
		}
		defer st.Close()
		decide = sluiceDecider(st, names, limit)
	case patternIncrExpire:
		c, err := incrClient(*url, *pool)
		if err != nil {
			return err
		}
		defer c.Close()
		decide = incrExpireDecider(c, opts.Prefix, names, limit)
	}
	// INFO from a connection of its own; a cluster or Sentinel URL gets
	// no Redis figures (they would need every node's).
	info, infoErr := newInfoReader(*url)
	if info != nil {
		defer info.close()
	}
	var before redisCounters
	if infoErr == nil {
		before, infoErr = info.read(ctx)
	}

	r := driveRedis(ctx, decide, *workers, *dur, *rate)
	if st != nil {
		r.stats = st.Stats()
	}
	if infoErr == nil {
		after, err := info.read(ctx)
		if infoErr = err; err == nil {
			r.cmds, r.usec, r.cpu, r.counted = after.sub(before)
		}
	}
	if len(r.lat) == 0 {
		if r.firstErr != nil {
			return fmt.Errorf("redis: no decision completed: %w", r.firstErr)
		}
		return errors.New("redis: no decision completed")
	}
	name := *pattern
	if *native {
		name += " (native)"
	}
	fmt.Fprintf(stdout, "%s %s over %d keys, %d goroutines, %v (rate %s)\n", name, limit, *keys, *workers,
		r.elapsed.Round(time.Millisecond), rateText(*rate))
	lat := r.lat
	slices.Sort(lat)
	pct := func(p int) time.Duration { return lat[(len(lat)-1)*p/100].Round(time.Microsecond) }
	perCall, callKind := "-", "script call"
	if st != nil {
		calls := r.stats.Calls
		if *native {
			// Groups counts the native pipelines' Takes too.
			calls, callKind = r.stats.Calls+r.stats.NativeCalls, "call (script or native pipeline)"
		}
		perCall = fmt.Sprintf("%.1f", float64(r.stats.Groups)/float64(max(calls, 1)))
	}
	fmt.Fprintf(stdout, "%.0f decisions/s  p50 %v  p99 %v  max %v  denied %d of %d  takes/%s %s\n",
		float64(len(lat))/r.elapsed.Seconds(), pct(50), pct(99), lat[len(lat)-1].Round(time.Microsecond),
		r.denied, len(lat), callKind, perCall)
	fmt.Fprintf(stdout, "decisions %d  decided by Redis %d  degraded %d\n", int64(len(lat))+r.degraded, len(lat), r.degraded)
	if r.degraded > 0 {
		return fmt.Errorf("redis: REFUSED to report Redis figures: %d of %d decisions were not decided by Redis (their store call failed, so a failure policy would have answered them; first: %w)",
			r.degraded, int64(len(lat))+r.degraded, r.firstErr)
	}
	if infoErr != nil {
		fmt.Fprintf(stdout, "no Redis figures: %v\n", infoErr)
		return nil
	}
	fmt.Fprint(stdout, r.redisFigures(int64(len(lat))))
	return nil
}

func rateText(rate float64) string {
	if rate == 0 {
		return "unpaced"
	}
	return fmt.Sprintf("%.0f/s", rate)
}

// redisFigures formats what Redis spent per decision.
func (r *benchRedisResult) redisFigures(decisions int64) string {
	var b strings.Builder
	total, usec := int64(0), int64(0)
	names := make([]string, 0, len(r.cmds))
	for name, n := range r.cmds {
		total += n
		usec += r.usec[name]
		if n > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	d := float64(decisions)
	fmt.Fprintf(&b, "redis cpu %.3f µs/decision (INFO used_cpu_user+sys)  commandstats usec %.3f µs/decision  commands %.4f/decision\n",
		1e6*r.cpu/d, float64(usec)/d, float64(total)/d)
	for _, name := range names {
		fmt.Fprintf(&b, "  %-14s %10d calls  %8.4f/decision  %8.3f usec/decision\n", name, r.cmds[name], float64(r.cmds[name])/d, float64(r.usec[name])/d)
	}
	return b.String()
}

// driveRedis runs workers callers of decide for dur (each its share of
// rate per second, or as fast as it can when rate is 0).
func driveRedis(ctx context.Context, decide func(*rand.Rand) (bool, error), workers int, dur time.Duration, rate float64) *benchRedisResult {
	ctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var (
		mu       sync.Mutex
		r        benchRedisResult
		degraded atomic.Int64
		wg       sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(rand.Uint64(), uint64(w)))
			var (
				local   []time.Duration
				nDenied int64
				gap     time.Duration
				next    = start
			)
			if rate > 0 {
				gap = time.Duration(float64(workers) / rate * float64(time.Second))
				next = start.Add(time.Duration(w) * gap / time.Duration(workers))
			}
			for ctx.Err() == nil {
				if gap > 0 {
					if wait := time.Until(next); wait > 0 {
						t := time.NewTimer(wait)
						select {
						case <-ctx.Done():
						case <-t.C:
						}
						t.Stop()
						if ctx.Err() != nil {
							break
						}
					}
					next = next.Add(gap)
				}
				t0 := time.Now()
				allowed, err := decide(rng)
				if err != nil {
					degraded.Add(1)
					mu.Lock()
					if r.firstErr == nil {
						r.firstErr = err
					}
					mu.Unlock()
					continue
				}
				local = append(local, time.Since(t0))
				if !allowed {
					nDenied++
				}
			}
			mu.Lock()
			r.lat = append(r.lat, local...)
			r.denied += nDenied
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.degraded = degraded.Load()
	return &r
}

// sluiceDecider returns a decision through the Redis store on a random key
// (a concurrency acquire is released at once).
func sluiceDecider(st *redis.Store, names []string, limit sluice.Limit) func(*rand.Rand) (bool, error) {
	return func(rng *rand.Rand) (bool, error) {
		var (
			ops [1]sluice.Op
			res [1]sluice.Result
		)
		ops[0] = sluice.Op{Key: names[rng.IntN(len(names))], Limit: limit, Cost: 1}
		// Not the run's context: a Take cut short by the end of the run
		// would count as a failure.
		if err := st.Take(context.Background(), ops[:], res[:]); err != nil {
			return false, err
		}
		if res[0].Lease != 0 {
			ops[0].Release, ops[0].Lease = true, res[0].Lease
			if err := st.Take(context.Background(), ops[:], res[:]); err != nil {
				return false, err
			}
		}
		return res[0].Allowed, nil
	}
}

// incrClient connects to a single Redis node for the incrby-expire pattern:
// with pool > 0, a pool of that many connections, each call on one of its
// own (no pipelining across callers), as envoyproxy/ratelimit's radix
// client with REDIS_PIPELINE_WINDOW 0; with 0, one connection that
// pipelines concurrent callers' commands together.
func incrClient(url string, pool int) (rueidis.Client, error) {
	copt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: --pattern %s needs a single node's redis:// URL: %w", errUsage, patternIncrExpire, err)
	}
	copt.DisableCache = true
	copt.DisableRetry = true
	if pool > 0 {
		copt.DisableAutoPipelining = true
		copt.BlockingPoolSize = pool
	}
	c, err := rueidis.NewClient(copt)
	if err != nil {
		return nil, fmt.Errorf("redis: connect: %w", err)
	}
	return c, nil
}

// incrExpireDecider returns envoyproxy/ratelimit's fixed-window decision on a
// random key: the counter of the key's current window is
// "<prefix><key>_<window start, unix seconds>", and each decision pipelines
// INCRBY counter 1 and EXPIRE counter <window seconds>, allowed while the
// count is within the quota.
func incrExpireDecider(c rueidis.Client, prefix string, names []string, limit sluice.Limit) func(*rand.Rand) (bool, error) {
	secs := int64(limit.Window / time.Second)
	return func(rng *rand.Rand) (bool, error) {
		now := time.Now().Unix()
		key := prefix + names[rng.IntN(len(names))] + "_" + strconv.FormatInt(now/secs*secs, 10)
		res := c.DoMulti(context.Background(),
			c.B().Incrby().Key(key).Increment(1).Build(),
			c.B().Expire().Key(key).Seconds(secs).Build())
		n, err := res[0].AsInt64()
		if err == nil {
			err = res[1].Error()
		}
		if err != nil {
			return false, fmt.Errorf("redis: INCRBY + EXPIRE: %w", err)
		}
		return n <= limit.Quota, nil
	}
}

// redisCounters are a Redis node's INFO counters at one moment.
type redisCounters struct {
	calls, usec map[string]int64 // INFO commandstats, by command name
	cpu         float64          // used_cpu_user + used_cpu_sys, seconds
}

// sub returns the deltas c − before, the INFO commands that read them
// left out.
func (c redisCounters) sub(before redisCounters) (calls, usec map[string]int64, cpu float64, ok bool) {
	calls, usec = map[string]int64{}, map[string]int64{}
	for name, n := range c.calls {
		if name == "info" {
			continue
		}
		if d := n - before.calls[name]; d != 0 {
			calls[name] = d
			usec[name] = c.usec[name] - before.usec[name]
		}
	}
	return calls, usec, c.cpu - before.cpu, true
}

// infoReader reads a single Redis node's INFO counters.
type infoReader struct{ c rueidis.Client }

// newInfoReader connects to the node of url; it fails for URLs that are not
// one node's (Sentinel, Cluster).
func newInfoReader(url string) (*infoReader, error) {
	if strings.Contains(url, "sentinel") || strings.Contains(url, "cluster") || strings.Contains(url, "addr=") {
		return nil, errors.New("INFO counters are read from a single node's redis:// URL only")
	}
	copt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("INFO counters: %w", err)
	}
	copt.DisableCache = true
	if len(copt.InitAddress) != 1 {
		return nil, errors.New("INFO counters are read from a single node's redis:// URL only")
	}
	c, err := rueidis.NewClient(copt)
	if err != nil {
		return nil, fmt.Errorf("INFO counters: connect: %w", err)
	}
	if c.Mode() != rueidis.ClientModeStandalone {
		c.Close()
		return nil, errors.New("INFO counters are read from a single node only")
	}
	return &infoReader{c: c}, nil
}

func (r *infoReader) close() { r.c.Close() }

// read returns the node's counters now.
func (r *infoReader) read(ctx context.Context) (redisCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := r.c.Do(ctx, r.c.B().Info().Section("commandstats").Section("cpu").Build()).ToString()
	if err != nil {
		return redisCounters{}, fmt.Errorf("INFO: %w", err)
	}
	return parseInfoCounters(body)
}

// parseInfoCounters reads INFO commandstats and cpu lines:
// "cmdstat_get:calls=3,usec=5,..." and "used_cpu_user:1.5".
func parseInfoCounters(body string) (redisCounters, error) {
	c := redisCounters{calls: map[string]int64{}, usec: map[string]int64{}}
	found := 0
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if name, isCmd := strings.CutPrefix(k, "cmdstat_"); isCmd {
			for _, field := range strings.Split(v, ",") {
				f, val, _ := strings.Cut(field, "=")
				if f != "calls" && f != "usec" {
					continue
				}
				n, err := strconv.ParseInt(val, 10, 64)
				if err != nil {
					return c, fmt.Errorf("INFO: %q: %w", line, err)
				}
				if f == "calls" {
					c.calls[name] = n
				} else {
					c.usec[name] = n
				}
			}
			continue
		}
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return c, fmt.Errorf("INFO: %q: %w", line, err)
			}
			c.cpu += f
			found++
		}
	}
	if found != 2 {
		return c, errors.New("INFO: used_cpu_user and used_cpu_sys not found")
	}
	return c, nil
}
