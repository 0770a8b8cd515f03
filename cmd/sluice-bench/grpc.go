package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// loadSpec is one load run.
type loadSpec struct {
	addr        string
	method      string // "rls" or "health"
	domain, key string
	keys        int
	concurrency int
	conns       int
	duration    time.Duration
	warmup      time.Duration
	rate        float64 // requests per second; 0: as fast as possible
	pid         int     // server process to measure CPU of; 0: none
	extraPID    int     // another process whose CPU counts (redis-server); 0: none
}

// loadResult is what a run measured.
type loadResult struct {
	requests, errors int64
	overLimit        int64
	elapsed          time.Duration
	p50, p90, p99    time.Duration // from the intended start (paced) or the send
	max              time.Duration
	sentP50, sentP99 time.Duration // from the actual send, paced runs only
	serverCPU        time.Duration // -1 when not measured
	extraCPU         time.Duration // of spec.extraPID; -1 when not measured
	clientCPU        time.Duration
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// cpuPerRequest is the server's CPU time per request, or 0 if unmeasured.
func (r loadResult) cpuPerRequest() time.Duration {
	if r.serverCPU < 0 || r.requests == 0 {
		return 0
	}
	return r.serverCPU / time.Duration(r.requests)
}

func (r loadResult) String() string {
	s := fmt.Sprintf("%8.0f req/s  p50 %v  p90 %v  p99 %v  max %v  (%d requests, %d errors, %d over limit)",
		r.rps(), r.p50.Round(time.Microsecond), r.p90.Round(time.Microsecond), r.p99.Round(time.Microsecond),
		r.max.Round(time.Microsecond), r.requests, r.errors, r.overLimit)
	if r.sentP99 > 0 {
		s += fmt.Sprintf("  [from the actual send: p50 %v  p99 %v]", r.sentP50.Round(time.Microsecond), r.sentP99.Round(time.Microsecond))
	}
	if r.serverCPU >= 0 {
		s += fmt.Sprintf("  server CPU %.1f µs/req", float64(r.cpuPerRequest())/float64(time.Microsecond))
	}
	if r.extraCPU >= 0 && r.requests > 0 {
		s += fmt.Sprintf(" (+ redis-server %.1f µs/req)", float64(r.extraCPU/time.Duration(r.requests))/float64(time.Microsecond))
	}
	s += fmt.Sprintf("  load generator CPU %.1f µs/req", float64(r.clientCPU/time.Duration(max(r.requests, 1)))/float64(time.Microsecond))
	return s
}

// extraPerRequest is the extra process's CPU time per request, or 0.
func (r loadResult) extraPerRequest() time.Duration {
	if r.extraCPU < 0 || r.requests == 0 {
		return 0
	}
	return r.extraCPU / time.Duration(r.requests)
}

// procCPU returns the user+system CPU time of process pid from
// /proc/<pid>/stat (Linux; clock ticks of 1/100 s, the kernel's USER_HZ).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// drive runs one load against spec.addr and measures it.
// progress prints, every 5 seconds of a run longer than 10, how far it is
// and how many requests it has measured, on stderr. stop ends it.
func progress(total time.Duration, requests func() int64) (stop func()) {
	if total <= 10*time.Second {
		return func() {}
	}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				el := time.Since(start)
				fmt.Fprintf(os.Stderr, "  … %v of %v, %d requests (%.0f/s)\n", el.Round(time.Second), total, requests(), float64(requests())/el.Seconds())
			}
		}
	}()
	return func() { close(done) }
}

// callFunc sends request i (of the spec's keys, round robin) on conn and
// reports whether the answer was OVER_LIMIT.
type callFunc func(ctx context.Context, conn *grpc.ClientConn, i int) (bool, error)

// dial opens spec.conns connections to spec.addr and returns them with the
// call spec.method makes.
func dial(spec loadSpec) ([]*grpc.ClientConn, callFunc, error) {
	conns := make([]*grpc.ClientConn, max(spec.conns, 1))
	for i := range conns {
		c, err := grpc.NewClient(spec.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, nil, fmt.Errorf("bench: %s: %w", spec.addr, err)
		}
		conns[i] = c
	}
	reqs := make([]*rlsv3.RateLimitRequest, max(spec.keys, 1))
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: spec.domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: spec.key, Value: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)}},
		}}}
	}
	call := func(ctx context.Context, conn *grpc.ClientConn, i int) (bool, error) {
		if spec.method == "health" {
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			return false, err
		}
		resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, reqs[i%len(reqs)])
		return resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT, err
	}
	return conns, call, nil
}

func drive(ctx context.Context, spec loadSpec) (loadResult, error) {
	conns, call, err := dial(spec)
	if err != nil {
		return loadResult{}, err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Every connection answers once before the clock starts.
	for _, c := range conns {
		if _, err := call(ctx, c, 0); err != nil {
			return loadResult{}, fmt.Errorf("bench: first call to %s: %w", spec.addr, err)
		}
	}

	var (
		measuring atomic.Bool
		stop      atomic.Bool
		next      atomic.Int64
		requests  atomic.Int64
		errs      atomic.Int64
		over      atomic.Int64
		lat       = make([][]time.Duration, spec.concurrency)
		sentLat   = make([][]time.Duration, spec.concurrency)
		wg        sync.WaitGroup
		firstErr  atomic.Pointer[error]
	)
	// Paced load: the schedule is fixed in advance, request k at
	// t0 + k/rate, and caller w takes requests w, w+C, w+2C, … (C callers),
	// sleeping until each one's time. Latency counts from the intended
	// start, so a server (or generator) that falls behind is charged for the
	// queueing: no coordinated omission.
	paced := spec.rate > 0
	t0 := time.Now()
	intended := func(k int64) time.Time {
		return t0.Add(time.Duration(float64(k) / spec.rate * float64(time.Second)))
	}
	for w := range spec.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := conns[w%len(conns)]
			mine := make([]time.Duration, 0, 1<<14)
			var sent []time.Duration
			for k := int64(w); !stop.Load(); k += int64(spec.concurrency) {
				start := time.Time{}
				if paced {
					start = intended(k)
					if d := time.Until(start); d > 0 {
						time.Sleep(d)
					}
				}
				i := int(next.Add(1))
				send := time.Now()
				if start.IsZero() {
					start = send
				}
				isOver, err := call(ctx, conn, i)
				end := time.Now()
				d := end.Sub(start)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					errs.Add(1)
					if firstErr.Load() == nil {
						firstErr.Store(&err)
					}
					continue
				}
				requests.Add(1)
				if isOver {
					over.Add(1)
				}
				mine = append(mine, d)
				if paced {
					sent = append(sent, end.Sub(send))
				}
			}
			lat[w] = mine
			sentLat[w] = sent
		}()
	}
	sleep(ctx, spec.warmup)
	cpu0, cpuErr := time.Duration(0), error(nil)
	if spec.pid > 0 {
		cpu0, cpuErr = procCPU(spec.pid)
	}
	x0, xErr := time.Duration(0), error(nil)
	if spec.extraPID > 0 {
		x0, xErr = procCPU(spec.extraPID)
	}
	self0 := selfCPU()
	tm := time.Now()
	measuring.Store(true)
	stopProgress := progress(spec.duration, func() int64 { return requests.Load() })
	sleep(ctx, spec.duration)
	stopProgress()
	measuring.Store(false)
	elapsed := time.Since(tm)
	self1 := selfCPU()
	res := loadResult{serverCPU: -1, extraCPU: -1}
	if spec.pid > 0 && cpuErr == nil {
		if cpu1, err := procCPU(spec.pid); err == nil {
			res.serverCPU = cpu1 - cpu0
		}
	}
	if spec.extraPID > 0 && xErr == nil {
		if x1, err := procCPU(spec.extraPID); err == nil {
			res.extraCPU = x1 - x0
		}
	}
	stop.Store(true)
	wg.Wait()
	if ctx.Err() != nil {
		return loadResult{}, ctx.Err()
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	sentAll := slices.Concat(sentLat...)
	slices.Sort(sentAll)
	quantile := func(xs []time.Duration, p float64) time.Duration {
		if len(xs) == 0 {
			return 0
		}
		return xs[min(int(p*float64(len(xs))), len(xs)-1)]
	}
	q := func(p float64) time.Duration { return quantile(all, p) }
	res.requests, res.errors, res.overLimit, res.elapsed = requests.Load(), errs.Load(), over.Load(), elapsed
	res.p50, res.p90, res.p99 = q(0.50), q(0.90), q(0.99)
	res.sentP50, res.sentP99 = quantile(sentAll, 0.50), quantile(sentAll, 0.99)
	if len(all) > 0 {
		res.max = all[len(all)-1]
	}
	res.clientCPU = self1 - self0
	if res.requests == 0 {
		if e := firstErr.Load(); e != nil {
			return res, fmt.Errorf("bench: no call succeeded: %w", *e)
		}
		return res, errors.New("bench: no call completed")
	}
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func runBench(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	spec := loadSpec{}
	var compare bool
	var rulesDir, redisOpt string
	fs := flag.NewFlagSet("grpc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&spec.addr, "addr", "127.0.0.1:8081", "gRPC address to drive (ignored with --compare)")
	fs.StringVar(&spec.method, "method", "rls", "what to call: rls (ShouldRateLimit) or health (grpc.health.v1 Check)")
	fs.StringVar(&spec.domain, "domain", "bench", "rule domain of the requests")
	fs.StringVar(&spec.key, "key", "remote_address", "descriptor key of the requests")
	fs.IntVar(&spec.keys, "keys", 10_000, "distinct descriptor values, used round robin")
	fs.IntVar(&spec.concurrency, "concurrency", 50, "concurrent callers")
	fs.IntVar(&spec.conns, "conns", 1, "gRPC connections the callers share")
	fs.DurationVar(&spec.duration, "duration", 10*time.Second, "measured time per point")
	fs.DurationVar(&spec.warmup, "warmup", time.Second, "unmeasured time before each point")
	fs.Float64Var(&spec.rate, "rate", 0, "requests per second (0: as fast as possible)")
	fs.IntVar(&spec.pid, "pid", 0, "server process whose CPU time to measure (Linux /proc)")
	fs.BoolVar(&compare, "compare", false, "start a bare grpc-go health server and `sluice serve` (memory, and Redis when available) as child processes and compare them")
	var sluiceBin string
	fs.StringVar(&sluiceBin, "sluice", "sluice", "with --compare: the sluice binary to run (a path, or a name looked up on PATH)")
	fs.StringVar(&rulesDir, "rules", "testdata/rules/bench", "rules for the servers --compare starts")
	var redisTimeout time.Duration
	var rounds int
	var lightRate float64
	fs.Float64Var(&lightRate, "light-rate", 1000, "with --compare: also drive each sluice server at this fixed rate (0: skip)")
	fs.IntVar(&rounds, "rounds", 3, "with --compare: interleaved rounds at full speed (medians are reported)")
	fs.DurationVar(&redisTimeout, "redis-timeout", 250*time.Millisecond, "with --compare: --redis-timeout of the Redis-backed server (above the default 50ms, so a loaded shared machine does not trip the breaker mid-run)")
	fs.StringVar(&redisOpt, "redis", "auto", "with --compare: auto (start redis-server if on PATH), off, or a redis:// URL to use")
	var cs countSpec
	fs.IntVar(&cs.requests, "requests", 0, "send exactly this many measured requests instead of running for --duration (for scripts/instr.sh)")
	fs.IntVar(&cs.warmup, "warmup-requests", 2000, "with --requests: unmeasured requests first")
	fs.StringVar(&cs.before, "before", "", "with --requests: shell command run after the warm-up, before the measured requests, none in flight")
	fs.StringVar(&cs.after, "after", "", "with --requests: shell command run after the measured requests, none in flight")
	fs.DurationVar(&cs.wait, "wait", 15*time.Second, "with --requests: how long the server may take to answer gRPC health first")
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	if spec.concurrency < 1 || spec.keys < 1 || spec.duration <= 0 || spec.warmup < 0 || spec.rate < 0 || (spec.method != "rls" && spec.method != "health") {
		return fmt.Errorf("bench: --concurrency, --keys and --duration must be positive, --rate not negative, --method rls or health: %w", errUsage)
	}
	if cs.requests < 0 || cs.warmup < 0 {
		return fmt.Errorf("bench: --requests and --warmup-requests must not be negative: %w", errUsage)
	}
	if cs.requests > 0 {
		if compare {
			return fmt.Errorf("bench: --requests and --compare do not go together: %w", errUsage)
		}
		return driveCount(ctx, spec, cs, stdout)
	}
	if !compare {
		fmt.Fprintf(stdout, "driving %s %s: %d callers, %d keys, %v\n", spec.method, spec.addr, spec.concurrency, spec.keys, spec.duration)
		res, err := drive(ctx, spec)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, res)
		return nil
	}
	if rounds < 1 {
		return fmt.Errorf("bench: --rounds must be at least 1: %w", errUsage)
	}
	bin, err := exec.LookPath(sluiceBin)
	if err != nil {
		return fmt.Errorf("bench: --sluice: %w (build it: go build -o /tmp/sluice ./cmd/sluice)", err)
	}
	return benchCompare(ctx, spec, bin, rulesDir, redisOpt, redisTimeout, rounds, lightRate, stdout)
}

// child is a server process started by --compare.
type child struct {
	cmd  *exec.Cmd
	addr string
}

func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startChild runs exe with args (addr substituted for {addr}) and waits
// until its gRPC health answers.
func startChild(ctx context.Context, exe string, args []string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "{addr}", addr)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, addr: addr}
	if err := waitHealthy(ctx, addr); err != nil {
		c.stop()
		return nil, fmt.Errorf("bench: %s %s: %w", filepath.Base(exe), strings.Join(args, " "), err)
	}
	return c, nil
}

func waitHealthy(ctx context.Context, addr string) error {
	return waitHealthyFor(ctx, addr, 15*time.Second)
}

// waitHealthyFor waits up to d until addr answers gRPC health.
func waitHealthyFor(ctx context.Context, addr string, d time.Duration) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(d)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not healthy after %v: %w", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// benchCompare measures, in one run: a bare grpc-go health server (the
// baseline), and sluice serve on the memory store and, when Redis is
// available, on Redis. All servers run side by side as child processes and
// are driven in turn, round after round (baseline, memory, Redis, baseline,
// …), so that load from other processes on a shared machine falls on all of
// them alike; ratios are taken within each round and the median reported.
// Then each sluice server is driven at half of its median maximum, and at a
// fixed light rate, for the latency below saturation.
func benchCompare(ctx context.Context, spec loadSpec, sluiceBin, rulesDir, redisOpt string, redisTimeout time.Duration, rounds int, lightRate float64, out io.Writer) error {
	if _, err := os.Stat(rulesDir); err != nil {
		return fmt.Errorf("bench: --rules: %w", err)
	}
	type target struct {
		name   string
		c      *child
		method string
		extra  int // pid of redis-server, whose CPU counts too
		full   []loadResult
		half   loadResult
		light  loadResult
	}
	var targets []*target
	defer func() {
		for _, t := range targets {
			t.c.stop()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	add := func(name, method string, extra int, exe string, args ...string) error {
		c, err := startChild(ctx, exe, args)
		if err != nil {
			return err
		}
		targets = append(targets, &target{name: name, c: c, method: method, extra: extra})
		return nil
	}
	measure := func(t *target, rate float64) (loadResult, error) {
		s := spec
		s.addr, s.method, s.rate, s.pid, s.extraPID = t.c.addr, t.method, rate, t.c.cmd.Process.Pid, t.extra
		fmt.Fprintf(out, "--- %s: %s, %d callers, %d keys, %v", t.name, t.method, s.concurrency, s.keys, s.duration)
		if rate > 0 {
			fmt.Fprintf(out, ", paced at %.0f req/s", rate)
		}
		fmt.Fprintln(out)
		res, err := drive(ctx, s)
		if err == nil {
			fmt.Fprintln(out, "   ", res)
		}
		return res, err
	}

	if err := add("baseline: bare grpc-go health", "health", 0, self, "baseline", "--addr", "{addr}"); err != nil {
		return err
	}
	serveArgs := func(store ...string) []string {
		return append([]string{"serve", "--rules", rulesDir, "--grpc-addr", "{addr}", "--http-addr", "127.0.0.1:0",
			"--debug-addr", "", "--log-level", "warn"}, store...)
	}
	if err := add("sluice --store memory", "rls", 0, sluiceBin, serveArgs("--store", "memory")...); err != nil {
		return err
	}
	redisURL, redisPID := "", 0
	switch redisOpt {
	case "off":
	case "auto":
		srv, stop, err := redistest.StartProcess()
		if err != nil {
			fmt.Fprintf(out, "--- Redis store skipped: %v\n", err)
			break
		}
		defer stop()
		redisURL, redisPID = srv.URL(), srv.PID()
	default:
		redisURL = redisOpt
	}
	if redisURL != "" {
		if err := add("sluice --store redis", "rls", redisPID, sluiceBin, serveArgs("--store", "redis", "--redis-url", redisURL, "--redis-timeout", redisTimeout.String())...); err != nil {
			return err
		}
	}

	for r := range rounds {
		fmt.Fprintf(out, "=== round %d of %d, full speed\n", r+1, rounds)
		for _, t := range targets {
			res, err := measure(t, 0)
			if err != nil {
				return err
			}
			t.full = append(t.full, res)
		}
	}
	fmt.Fprintln(out, "=== half of each server's median maximum")
	for _, t := range targets[1:] {
		res, err := measure(t, medianRPS(t.full)/2)
		if err != nil {
			return err
		}
		t.half = res
	}
	if lightRate > 0 {
		fmt.Fprintf(out, "=== light load: %.0f req/s\n", lightRate)
		for _, t := range targets[1:] {
			res, err := measure(t, lightRate)
			if err != nil {
				return err
			}
			t.light = res
		}
	}

	base := targets[0]
	fmt.Fprintf(out, "\n=== summary: %d rounds of %v per server at full speed, interleaved\n", rounds, spec.duration)
	fmt.Fprintf(out, "%-30s %9s %11s %9s %9s %11s %11s %11s\n", "server", "req/s", "ratio", "p50", "p99", "server µs", "CPU ratio", "+redis µs")
	for _, t := range targets {
		var rps, rr, cpu, cr, p50, p99, extra []float64
		for i, r := range t.full {
			b := base.full[i]
			rps = append(rps, r.rps())
			rr = append(rr, r.rps()/b.rps())
			cpu = append(cpu, us(r.cpuPerRequest()))
			cr = append(cr, us(r.cpuPerRequest())/us(b.cpuPerRequest()))
			p50 = append(p50, us(r.p50))
			p99 = append(p99, us(r.p99))
			extra = append(extra, us(r.extraPerRequest()))
		}
		fmt.Fprintf(out, "%-30s %9.0f %10.2fx %8.2fms %8.2fms %11.1f %10.2fx %11.1f\n", t.name, median(rps), median(rr),
			median(p50)/1000, median(p99)/1000, median(cpu), median(cr), median(extra))
		fmt.Fprintf(out, "%-30s %s\n", "", fmt.Sprintf("per round: req/s ratio %s; CPU ratio %s", fmtList(rr, "%.2f"), fmtList(cr, "%.2f")))
	}
	fmt.Fprintln(out, "\nmedians over rounds; ratios are taken within each round against the baseline. server µs: CPU of the serving")
	fmt.Fprintln(out, "process per request (/proc, 10ms ticks); +redis µs: redis-server's CPU per request on top.")
	fmt.Fprintf(out, "\n%-40s %9s %9s %9s %11s %11s %11s\n", "paced", "req/s", "p50", "p99", "p99 sent", "server µs", "+redis µs")
	for _, t := range targets[1:] {
		for _, h := range []struct {
			label string
			r     loadResult
		}{{"half of its max", t.half}, {"light load", t.light}} {
			if h.r.requests == 0 {
				continue
			}
			fmt.Fprintf(out, "%-40s %9.0f %8.2fms %8.2fms %9.2fms %11.1f %11.1f\n", t.name+", "+h.label, h.r.rps(), us(h.r.p50)/1000, us(h.r.p99)/1000,
				us(h.r.sentP99)/1000, us(h.r.cpuPerRequest()), us(h.r.extraPerRequest()))
		}
	}
	fmt.Fprintln(out, "p50/p99 count from each request's intended start (generator queueing included); p99 sent: from the actual send.")
	return nil
}

// us is d in microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// medianRPS is the median of the rounds' requests per second.
func medianRPS(rounds []loadResult) float64 {
	xs := make([]float64, len(rounds))
	for i, r := range rounds {
		xs[i] = r.rps()
	}
	return median(xs)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtList(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " ")
}

// runBenchBaseline serves a bare grpc-go server: grpc-go's own health
// server (--service health, the floor any gRPC service pays per call), or
// also a bare RateLimitService (--service rls: a real handler that decodes
// each RateLimitRequest with grpc-go's proto codec and answers a
// RateLimitResponse of the statuses sluice serve gives the bench rules),
// optionally with grpc.NumStreamWorkers as sluice serve sets it.
func runBenchBaseline(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8091", "listen address")
	svc := fs.String("service", "health", "what to serve: health (grpc.health.v1 only) or rls (health and a bare RateLimitService)")
	workers := fs.Int("stream-workers", 0, "grpc.NumStreamWorkers (0: grpc-go's default, none)")
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	if (*svc != "health" && *svc != "rls") || *workers < 0 {
		return fmt.Errorf("baseline: --service health or rls, --stream-workers not negative: %w", errUsage)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	// sluice serve's bounds on a message and its metadata.
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(bareMaxBytes), grpc.MaxHeaderListSize(bareMaxBytes)}
	if *workers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(*workers)))
	}
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	if *svc == "rls" {
		rlsv3.RegisterRateLimitServiceServer(g, bareRLS{})
	}
	go func() { <-ctx.Done(); g.GracefulStop() }()
	if err := g.Serve(ln); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return nil
}
