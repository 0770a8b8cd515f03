package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/stack"
)

// The Redis cost of placement hybrid against placement global (sluice-bench
// hybrid --cost): the same paced stream of decisions is sent, in process,
// to the store stack `sluice serve --store redis` builds (store/compose,
// default denied cache), its keys placed global in one stack and hybrid in
// the other, for three workloads:
//
//   - hot: one key;
//   - zipf: users drawn from a Zipf distribution (s = 1.1 by default) over
//     100,000 users;
//   - cold: users drawn uniformly from rate × period users, so that each is
//     seen about once every period.
//
// By default the harness starts two redis-servers and runs the two stacks
// at the same time, one on each, so that both see the same machine load
// (on a shared machine, Redis's CPU per call moves by 1.3x between runs a
// minute apart); with --redis, or --cost-together=false, they run one
// after the other on one redis-server, on fresh keys. After a warmup, the
// run counts every command Redis runs (INFO commandstats: script calls,
// SCRIPT LOAD, and the commands scripts run) and Redis's CPU (INFO cpu,
// used_cpu_user + used_cpu_sys) over the measured span, and divides by the
// decisions made in it. A decision whose
// store call failed would have been answered by a failure policy
// (degraded): it is counted, and a workload with any is reported without
// Redis figures.

// costOptions are the flags of hybrid --cost.
type costOptions struct {
	rate            float64
	workers         int
	warmup, measure time.Duration
	users           int
	zipfS           float64
	coldPeriod      time.Duration
	horizon         time.Duration
	timeout         time.Duration
	limit           sluice.Limit
	workloads       []string
	together        bool
	redisURL        string
	// urls are the redis-servers of the global and the hybrid stack (the
	// same one when they run one after the other).
	urls [2]string
}

// costFlags registers the --cost flags on fs.
func costFlags(fs *flag.FlagSet) (*costOptions, *bool, *string, *int64, *time.Duration) {
	o := &costOptions{}
	on := fs.Bool("cost", false, "instead of the server figures: Redis CPU and commands per decision of hybrid vs global, in process, on the hot, zipf and cold workloads")
	fs.Float64Var(&o.rate, "cost-rate", 4000, "--cost: decisions per second sent to each store")
	fs.IntVar(&o.workers, "cost-workers", 64, "--cost: concurrent callers")
	fs.DurationVar(&o.warmup, "cost-warmup", 5*time.Second, "--cost: unmeasured time before each measurement")
	fs.DurationVar(&o.measure, "cost-duration", 15*time.Second, "--cost: measured time per workload and store")
	fs.IntVar(&o.users, "cost-users", 100_000, "--cost: users of the zipf workload")
	fs.Float64Var(&o.zipfS, "cost-zipf-s", 1.1, "--cost: exponent s of the zipf workload (> 1)")
	fs.DurationVar(&o.coldPeriod, "cost-cold-period", 5*time.Second, "--cost: each user of the cold workload is seen about once per period")
	fs.DurationVar(&o.horizon, "cost-horizon", hybrid.DefaultHorizon, "--cost: Options.Horizon of the hybrid store")
	work := fs.String("cost-workloads", "hot,zipf,cold", "--cost: workloads to run, comma-separated")
	quota := fs.Int64("cost-quota", 6_000_000, "--cost: quota per --cost-window of every key's token_bucket limit (high enough that nothing is denied)")
	window := fs.Duration("cost-window", time.Minute, "--cost: window of the limit (a bucket allotment lives at most one window and the horizon)")
	fs.DurationVar(&o.timeout, "cost-timeout", redis.DefaultTimeout, "--cost: the Redis store's timeout")
	fs.BoolVar(&o.together, "cost-together", true, "--cost: run global and hybrid at the same time, each on a redis-server of its own started by the harness (false, or --redis: one after the other on one)")
	return o, on, work, quota, window
}

// costRun is one workload on one store.
type costRun struct {
	decisions, degraded int64
	elapsed             time.Duration
	cpu                 float64          // Redis CPU seconds
	cmds                map[string]int64 // INFO commandstats deltas, "info" left out
	hybrid              hybrid.Stats     // deltas over the measured span (hybrid only)
	firstErr            error
}

func (r *costRun) total() int64 {
	n := int64(0)
	for _, v := range r.cmds {
		n += v
	}
	return n
}

func (r *costRun) perDecision(v float64) float64 { return v / float64(r.decisions) }

// runHybridCost runs the --cost comparison.
func runHybridCost(ctx context.Context, o *costOptions, stdout io.Writer) error {
	if o.rate <= 0 || o.workers < 1 || o.warmup < 0 || o.measure <= 0 || o.users < 1 || o.zipfS <= 1 || o.coldPeriod <= 0 || o.horizon <= 0 {
		return fmt.Errorf("hybrid --cost: --cost-rate, --cost-workers, --cost-duration, --cost-users, --cost-cold-period and --cost-horizon must be positive, --cost-zipf-s > 1: %w", errUsage)
	}
	together := o.together && o.redisURL == ""
	servers := 2
	if !together {
		servers = 1
	}
	for i := range o.urls {
		switch {
		case o.redisURL != "":
			o.urls[i] = o.redisURL
		case i < servers:
			srv, stop, err := redistest.StartProcess()
			if err != nil {
				return fmt.Errorf("hybrid --cost: redis-server: %w", err)
			}
			defer stop()
			o.urls[i] = srv.URL()
		default:
			o.urls[i] = o.urls[0]
		}
	}
	how := "one after the other on one redis-server"
	if together {
		how = "at the same time, each on its own redis-server"
	}
	fmt.Fprintf(stdout, "=== hybrid vs global, Redis cost per decision: %.0f decisions/s from %d callers to each, %s; warmup %v, measured %v; limit %v %d/%v per key (never denies); hybrid horizon %v; store timeout %v; stacks built by store/compose (denied cache %s)\n",
		o.rate, o.workers, how, o.warmup, o.measure, o.limit.Algorithm, o.limit.Quota, o.limit.Window, o.horizon, o.timeout, compose.DeniedAuto)
	type row struct {
		name           string
		global, hybrid *costRun
	}
	var rows []row
	for _, w := range o.workloads {
		next, desc, err := o.workload(w)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "--- %s: %s\n", w, desc)
		var rs [2]*costRun
		var errs [2]error
		placements := [2]string{"global", "hybrid"}
		if together {
			var wg sync.WaitGroup
			for i := range placements {
				wg.Go(func() { rs[i], errs[i] = o.runOne(ctx, w, placements[i], o.urls[i], next) })
			}
			wg.Wait()
		} else {
			for i := range placements {
				if rs[i], errs[i] = o.runOne(ctx, w, placements[i], o.urls[i], next); errs[i] != nil {
					break
				}
			}
		}
		if err := errors.Join(errs[:]...); err != nil {
			return err
		}
		for i, placement := range placements {
			fmt.Fprintf(stdout, "    %-6s %s\n", placement, o.describe(rs[i]))
		}
		rows = append(rows, row{w, rs[0], rs[1]})
	}
	fmt.Fprintf(stdout, "\n=== summary (Redis CPU µs and commands per decision; ratio = hybrid / global)\n")
	fmt.Fprintf(stdout, "%-6s %12s %12s %8s %12s %12s %8s %10s %10s\n", "", "global µs", "hybrid µs", "ratio", "global cmds", "hybrid cmds", "ratio", "h. local", "h. cold")
	for _, r := range rows {
		fmt.Fprintln(stdout, costRow(r.name, r.global, r.hybrid))
	}
	fmt.Fprintf(stdout, "\nh. local: hybrid decisions made from allotments; h. cold: decided by the global store's Take because the key was too cold to lease.\n")
	span := min(o.horizon, o.limit.Window)
	fmt.Fprintf(stdout, "Share of a Zipf(s=%.2f) stream over %d users too cold to lease in steady state (user's rate x %v < %d hits; a key's first 3 hits not counted):\n", o.zipfS, o.users, span, coldThreshold)
	for _, rate := range []float64{100, 1000, o.rate, 10_000, 100_000} {
		fmt.Fprintf(stdout, "    at %8.0f decisions/s: %5.1f%% of decisions, %5.1f%% of users\n", rate, 100*coldShare(o.zipfS, o.users, rate, span), 100*coldUsers(o.zipfS, o.users, rate, span))
	}
	return nil
}

// costRow is one workload's summary line: the Redis figures of both stores
// and their ratios, or, when any decision of either was degraded (answered
// by a failure policy, not by Redis), a refusal naming the counts.
func costRow(name string, g, h *costRun) string {
	if g.degraded > 0 || h.degraded > 0 {
		return fmt.Sprintf("%-6s REFUSED: %d (global) and %d (hybrid) decisions were answered by a failure policy, not by Redis (first: %v)",
			name, g.degraded, h.degraded, errors.Join(g.firstErr, h.firstErr))
	}
	gc, hc := 1e6*g.perDecision(g.cpu), 1e6*h.perDecision(h.cpu)
	gn, hn := g.perDecision(float64(g.total())), h.perDecision(float64(h.total()))
	hs := h.hybrid
	local, cold := 0.0, 0.0
	if n := hs.Local + hs.Global; n > 0 {
		local, cold = 100*float64(hs.Local)/float64(n), 100*float64(hs.Cold)/float64(n)
	}
	return fmt.Sprintf("%-6s %12.3f %12.3f %7.3fx %12.4f %12.4f %7.3fx %9.1f%% %9.1f%%", name, gc, hc, hc/gc, gn, hn, hn/gn, local, cold)
}

// workload returns a key generator for workload w (one per caller: each
// gets its own random source) and a description.
func (o *costOptions) workload(w string) (func(seed uint64) func() string, string, error) {
	switch w {
	case "hot":
		return func(uint64) func() string { return func() string { return "hot" } }, "one key", nil
	case "zipf":
		return func(seed uint64) func() string {
			z := rand.NewZipf(rand.New(rand.NewPCG(seed, 7)), o.zipfS, 1, uint64(o.users-1))
			return func() string { return "u" + strconv.FormatUint(z.Uint64(), 10) }
		}, fmt.Sprintf("Zipf(s=%.2f) over %d users", o.zipfS, o.users), nil
	case "cold":
		n := max(int(o.rate*o.coldPeriod.Seconds()), 1)
		return func(seed uint64) func() string {
			rng := rand.New(rand.NewPCG(seed, 11))
			return func() string { return "c" + strconv.Itoa(rng.IntN(n)) }
		}, fmt.Sprintf("uniform over %d users (each seen about once every %v)", n, o.coldPeriod), nil
	}
	return nil, "", fmt.Errorf("hybrid --cost: --cost-workloads: unknown workload %q (want hot, zipf, cold): %w", w, errUsage)
}

// runOne sends the paced stream of workload w to a fresh stack (on the
// redis-server at url) whose keys have the given placement, and measures
// it.
func (o *costOptions) runOne(ctx context.Context, w, placement, url string, next func(uint64) func() string) (*costRun, error) {
	c := compose.DefaultConfig()
	c.Kind = compose.KindRedis
	ropts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	ropts.Prefix = fmt.Sprintf("cost:%d:%s:%s:", time.Now().UnixNano(), w, placement)
	ropts.Timeout = o.timeout
	c.Redis = ropts
	c.Hybrid = hybrid.Options{Horizon: o.horizon}
	st, err := compose.New(c)
	if err != nil {
		return nil, fmt.Errorf("hybrid --cost: %w", err)
	}
	defer st.Close()
	// Keys shaped like the engine's: a hash tag, after the placement byte
	// of a counter placed hybrid (store/compose routes by it).
	place := "{"
	if placement == "hybrid" {
		place = string(stack.KeyHybrid) + "{"
	}
	redisAddr := strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0")
	var decisions, degraded atomic.Int64
	var firstErr atomic.Value
	measuring := atomic.Bool{}
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / o.rate * float64(o.workers))
	for c := range o.workers {
		wg.Go(func() {
			name := next(uint64(c)*7919 + uint64(start.UnixNano()))
			key := func() string { return place + name() + "}" }
			ops := []sluice.Op{{Limit: o.limit, Cost: 1}}
			res := make([]sluice.Result, 1)
			at := start.Add(time.Duration(c) * interval / time.Duration(o.workers))
			for {
				if d := time.Until(at); d > 0 {
					select {
					case <-stop:
						return
					case <-time.After(d):
					}
				} else {
					select {
					case <-stop:
						return
					default:
					}
				}
				at = at.Add(interval)
				ops[0].Key = key()
				err := st.Take(ctx, ops, res)
				if !measuring.Load() {
					continue
				}
				decisions.Add(1)
				if err != nil || !res[0].Allowed {
					if err == nil {
						err = fmt.Errorf("%s denied (the limit is meant never to deny)", ops[0].Key)
					}
					degraded.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}()
	sleep(ctx, o.warmup)
	cmd0, cpu0, err := redisInfo(redisAddr)
	if err != nil {
		return nil, err
	}
	hs0 := st.Stats().Hybrid
	t0 := time.Now()
	measuring.Store(true)
	sleep(ctx, o.measure)
	measuring.Store(false)
	elapsed := time.Since(t0)
	cmd1, cpu1, err := redisInfo(redisAddr)
	if err != nil {
		return nil, err
	}
	close(stop)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &costRun{decisions: decisions.Load(), degraded: degraded.Load(), elapsed: elapsed, cpu: cpu1 - cpu0, cmds: map[string]int64{}}
	if e, ok := firstErr.Load().(error); ok {
		r.firstErr = e
	}
	for k, v := range cmd1 {
		if d := v - cmd0[k]; d != 0 && k != "info" {
			r.cmds[k] = d
		}
	}
	if placement == "hybrid" {
		hs := st.Stats().Hybrid
		r.hybrid = hybrid.Stats{Local: hs.Local - hs0.Local, Global: hs.Global - hs0.Global, Cold: hs.Cold - hs0.Cold,
			Allots: hs.Allots - hs0.Allots, Granted: hs.Granted - hs0.Granted}
	}
	if r.decisions == 0 {
		return nil, fmt.Errorf("hybrid --cost: %s on %s: no decision in %v", w, placement, o.measure)
	}
	return r, nil
}

// describe is one measured run, in a line.
func (o *costOptions) describe(r *costRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d decisions (%.0f/s), %d degraded", r.decisions, float64(r.decisions)/r.elapsed.Seconds(), r.degraded)
	if r.degraded == 0 {
		calls := r.cmds["evalsha"] + r.cmds["eval"]
		fmt.Fprintf(&b, "; Redis CPU %.3f µs/decision, %.1f µs/script call; commands/decision %.4f; script calls/decision %.4f (%.2f decisions each)",
			1e6*r.perDecision(r.cpu), 1e6*r.cpu/float64(max(calls, 1)), r.perDecision(float64(r.total())), r.perDecision(float64(calls)),
			float64(r.decisions)/float64(max(calls, 1)))
		names := make([]string, 0, len(r.cmds))
		for k := range r.cmds {
			names = append(names, k)
		}
		slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(r.cmds[b], r.cmds[a]), cmp.Compare(a, b)) })
		b.WriteString("; per decision:")
		for _, k := range names {
			fmt.Fprintf(&b, " %s %.4f", k, r.perDecision(float64(r.cmds[k])))
		}
	}
	if hs := r.hybrid; hs.Local+hs.Global > 0 {
		fmt.Fprintf(&b, "; local %d, global %d (cold %d), leases %d granting %d", hs.Local, hs.Global, hs.Cold, hs.Allots, hs.Granted)
	}
	return b.String()
}

// redisInfo returns the calls of every command (INFO commandstats, by
// name: "evalsha", "script|load", "get" ...) and Redis's CPU seconds (INFO
// cpu: used_cpu_user + used_cpu_sys, every thread).
func redisInfo(addr string) (map[string]int64, float64, error) {
	body, err := redisINFO(addr, "commandstats")
	if err != nil {
		return nil, 0, err
	}
	calls := map[string]int64{}
	for _, line := range strings.Split(body, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("redis INFO: %q: %w", line, err)
		}
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	body, err = redisINFO(addr, "cpu")
	if err != nil {
		return nil, 0, err
	}
	cpu, found := 0.0, 0
	for _, line := range strings.Split(body, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, 0, fmt.Errorf("redis INFO cpu: %q: %w", line, err)
			}
			cpu += f
			found++
		}
	}
	if found != 2 {
		return nil, 0, fmt.Errorf("redis INFO cpu: used_cpu_user and used_cpu_sys not found")
	}
	return calls, cpu, nil
}

// redisINFO returns the body of INFO section from the Redis at addr.
func redisINFO(addr, section string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO " + section + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("redis INFO: %q: %v", head, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return "", fmt.Errorf("redis INFO: %q: bad length", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", fmt.Errorf("redis INFO: %w", err)
	}
	return string(body), nil
}

// coldThreshold is store/hybrid's: a key expected to be hit fewer than 2
// times over an allotment's span (the horizon, at most the limit's window
// for a bucket) is too cold to lease (see its "Cold keys").
const coldThreshold = 2

// zipfWeights returns the probabilities of users 1..n under Zipf(s).
func zipfWeights(s float64, n int) []float64 {
	w := make([]float64, n)
	sum := 0.0
	for k := range n {
		w[k] = math.Pow(float64(k+1), -s)
		sum += w[k]
	}
	for k := range w {
		w[k] /= sum
	}
	return w
}

// coldShare is the share of a Zipf(s) stream over n users at rate
// decisions/s whose users are hit fewer than coldThreshold times per
// span: decided by the global store once rates are known.
func coldShare(s float64, n int, rate float64, horizon time.Duration) float64 {
	share := 0.0
	for _, p := range zipfWeights(s, n) {
		if p*rate*horizon.Seconds() < coldThreshold {
			share += p
		}
	}
	return share
}

// coldUsers is the share of the users that are too cold.
func coldUsers(s float64, n int, rate float64, horizon time.Duration) float64 {
	cold := 0
	for _, p := range zipfWeights(s, n) {
		if p*rate*horizon.Seconds() < coldThreshold {
			cold++
		}
	}
	return float64(cold) / float64(n)
}
