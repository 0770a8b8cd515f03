package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// runBenchHybrid starts redis-server and three `sluice serve` children —
// memory store, Redis with the rule placed global, Redis with it placed
// hybrid — and drives them in interleaved rounds with the same load: server
// CPU per request, redis-server CPU and commands per decision, p99 at half
// of each one's maximum, and each one's idle CPU afterwards. With --pin the
// servers run on CPU 1 and the generator and redis-server on CPU 0
// (taskset), so latency and CPU are the server's own.
func runBenchHybrid(ctx context.Context, args []string, _ env, stdout, stderr io.Writer) error {
	spec := loadSpec{method: "rls", domain: "bench", key: "remote_address"}
	var rounds int
	var pin bool
	var horizon, idle time.Duration
	fs := flag.NewFlagSet("hybrid", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&spec.keys, "keys", 10_000, "distinct client addresses, used round robin")
	fs.IntVar(&spec.concurrency, "concurrency", 50, "concurrent callers")
	fs.DurationVar(&spec.duration, "duration", 10*time.Second, "measured time per point")
	fs.DurationVar(&spec.warmup, "warmup", 2*time.Second, "unmeasured time before each point")
	fs.IntVar(&rounds, "rounds", 3, "interleaved rounds at full speed (medians are reported)")
	fs.BoolVar(&pin, "pin", true, "pin servers to CPU 1, this generator and redis-server to CPU 0 (taskset)")
	fs.DurationVar(&horizon, "hybrid-horizon", time.Minute, "--hybrid-horizon of the hybrid server")
	fs.DurationVar(&idle, "idle", 10*time.Second, "idle time over which each server's idle CPU is measured (0: skip)")
	var redisURL, other string
	var redisPID int
	fs.StringVar(&redisURL, "redis", "", "redis:// URL of a running redis-server to use instead of starting one (give --redis-pid too)")
	fs.IntVar(&redisPID, "redis-pid", 0, "with --redis: its process, whose CPU counts")
	fs.StringVar(&other, "other", "", "NAME,HOST:PORT,PID: also drive this running RLS server (e.g. envoyproxy/ratelimit on the same Redis)")
	var sluiceBin string
	fs.StringVar(&sluiceBin, "sluice", "sluice", "the sluice binary to run (a path, or a name looked up on PATH)")
	cost, costOn, costWork, costQuota, costWindow := costFlags(fs)
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	if *costOn {
		cost.redisURL = redisURL
		cost.workloads = strings.Split(*costWork, ",")
		cost.limit = sluice.Limit{Algorithm: sluice.TokenBucket, Quota: *costQuota, Window: *costWindow}
		if err := cost.limit.Validate(); err != nil {
			return fmt.Errorf("hybrid: --cost-quota, --cost-window: %w: %w", err, errUsage)
		}
		return runHybridCost(ctx, cost, stdout)
	}
	bin, err := exec.LookPath(sluiceBin)
	if err != nil {
		return fmt.Errorf("hybrid: --sluice: %w (build it: go build -o /tmp/sluice ./cmd/sluice)", err)
	}
	if spec.concurrency < 1 || spec.keys < 1 || spec.duration <= 0 || rounds < 1 {
		return fmt.Errorf("hybrid: --concurrency, --keys, --duration and --rounds must be positive: %w", errUsage)
	}
	url := redisURL
	if url == "" {
		srv, stopRedis, err := redistest.StartProcess()
		if err != nil {
			return fmt.Errorf("hybrid: redis-server: %w", err)
		}
		defer stopRedis()
		url, redisPID = srv.URL(), srv.PID()
	}
	redisAddr := strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0")

	type target struct {
		name  string
		c     *child
		redis bool
		full  []loadResult
		cmds  []float64 // Redis commands per decision, per round
		half  loadResult
		idle  float64 // ms of CPU per second, idle
		// foreign: started by the caller (--other); not stopped here.
		foreign bool
	}
	var targets []*target
	defer func() {
		for _, t := range targets {
			if !t.foreign {
				t.c.stop()
			}
		}
	}()
	serve := func(name, rules string, store ...string) error {
		a := append([]string{"serve", "--rules", rules, "--grpc-addr", "{addr}", "--http-addr", "127.0.0.1:0",
			"--debug-addr", "", "--log-level", "warn"}, store...)
		c, err := startChild(ctx, bin, a)
		if err != nil {
			return err
		}
		targets = append(targets, &target{name: name, c: c, redis: len(store) > 2})
		return nil
	}
	if err := serve("memory", "testdata/rules/bench-global", "--store", "memory"); err != nil {
		return err
	}
	rflags := []string{"--store", "redis", "--redis-url", url, "--redis-timeout", "250ms"}
	if err := serve("redis, placement global", "testdata/rules/bench-global", rflags...); err != nil {
		return err
	}
	if err := serve("redis, placement hybrid", "testdata/rules/bench-hybrid", append(rflags, "--hybrid-horizon", horizon.String())...); err != nil {
		return err
	}
	if other != "" {
		f := strings.Split(other, ",")
		pid, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 3 || err != nil {
			return fmt.Errorf("hybrid: --other %q: want NAME,HOST:PORT,PID: %w", other, errUsage)
		}
		targets = append(targets, &target{name: f[0], c: &child{cmd: &exec.Cmd{Process: &os.Process{Pid: pid}}, addr: f[1]}, redis: true, foreign: true})
	}
	if pin {
		for _, t := range targets {
			if err := taskset("1", t.c.cmd.Process.Pid); err != nil {
				return err
			}
		}
		if redisPID != 0 {
			if err := taskset("0", redisPID); err != nil {
				return err
			}
		}
		if err := taskset("0", os.Getpid()); err != nil {
			return err
		}
	}
	measure := func(t *target, rate float64) (loadResult, float64, error) {
		s := spec
		s.addr, s.rate, s.pid = t.c.addr, rate, t.c.cmd.Process.Pid
		s.extraPID = 0
		if t.redis {
			s.extraPID = redisPID
		}
		fmt.Fprintf(stdout, "--- %s", t.name)
		if rate > 0 {
			fmt.Fprintf(stdout, ", paced at %.0f req/s", rate)
		}
		fmt.Fprintln(stdout)
		// The warmup runs inside drive; count Redis commands around the
		// whole call and scale by the measured share of requests.
		c0, err := redisCommands(redisAddr)
		if err != nil {
			return loadResult{}, 0, err
		}
		res, err := drive(ctx, s)
		if err != nil {
			return res, 0, err
		}
		c1, err := redisCommands(redisAddr)
		if err != nil {
			return res, 0, err
		}
		total := float64(res.requests) * float64(s.duration+s.warmup) / float64(s.duration)
		perDecision := float64(c1-c0) / total
		fmt.Fprintf(stdout, "    %v\n    redis commands per decision %.4f\n", res, perDecision)
		return res, perDecision, nil
	}
	for r := range rounds {
		fmt.Fprintf(stdout, "=== round %d of %d, full speed\n", r+1, rounds)
		for _, t := range targets {
			res, cmds, err := measure(t, 0)
			if err != nil {
				return err
			}
			t.full = append(t.full, res)
			t.cmds = append(t.cmds, cmds)
		}
	}
	fmt.Fprintln(stdout, "=== half of each server's median maximum")
	for _, t := range targets {
		res, _, err := measure(t, medianRPS(t.full)/2)
		if err != nil {
			return err
		}
		t.half = res
	}
	if idle > 0 {
		fmt.Fprintf(stdout, "=== idle, %v\n", idle)
		var before []time.Duration
		for _, t := range targets {
			c, err := procCPU(t.c.cmd.Process.Pid)
			if err != nil {
				return err
			}
			before = append(before, c)
		}
		sleep(ctx, idle)
		for i, t := range targets {
			c, err := procCPU(t.c.cmd.Process.Pid)
			if err != nil {
				return err
			}
			t.idle = float64(c-before[i]) / float64(time.Millisecond) / idle.Seconds()
		}
	}

	mem := targets[0]
	fmt.Fprintf(stdout, "\n=== summary: %d rounds of %v per server at full speed, interleaved; %d keys, %d callers, pinned %v\n",
		rounds, spec.duration, spec.keys, spec.concurrency, pin)
	fmt.Fprintf(stdout, "%-26s %9s %10s %10s %11s %12s %10s %10s %10s\n", "server", "req/s", "server µs", "vs memory", "+redis µs", "redis ops/dec", "p99 @half", "p50 @half", "idle ms/s")
	for _, t := range targets {
		var cpu, ratio, extra []float64
		for i, r := range t.full {
			cpu = append(cpu, us(r.cpuPerRequest()))
			ratio = append(ratio, us(r.cpuPerRequest())/us(mem.full[i].cpuPerRequest()))
			extra = append(extra, us(r.extraPerRequest()))
		}
		fmt.Fprintf(stdout, "%-26s %9.0f %10.1f %9.2fx %11.2f %12.4f %8.2fms %8.2fms %10.2f\n", t.name, medianRPS(t.full), median(cpu), median(ratio),
			median(extra), median(t.cmds), us(t.half.p99)/1000, us(t.half.p50)/1000, t.idle)
		fmt.Fprintf(stdout, "%-26s per round: CPU vs memory %s; redis ops/dec %s\n", "", fmtList(ratio, "%.2f"), fmtList(t.cmds, "%.4f"))
	}
	fmt.Fprintln(stdout, "\nserver µs: CPU of the serving process per request (/proc, 10ms ticks); +redis µs: redis-server's CPU per request;")
	fmt.Fprintln(stdout, "redis ops/dec: commands clients sent redis-server per decision (EVALSHA, EVAL, SCRIPT LOAD, INCRBY, EXPIRE from INFO commandstats; warmup included);")
	fmt.Fprintln(stdout, "p99/p50 @half: paced at half of the server's median maximum, from each request's intended start.")
	return nil
}

// taskset pins every thread of pid to cpus.
func taskset(cpus string, pid int) error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hybrid: taskset %s %d: %v: %s", cpus, pid, err, out)
	}
	return nil
}

// redisCommands returns how many commands the Redis at addr has served
// that a rate limiter's client sends: script calls and loads (EVALSHA,
// EVAL, SCRIPT LOAD; Sluice) and INCRBY, EXPIRE (envoyproxy/ratelimit's
// pipeline), from INFO
// commandstats. (total_commands_processed would also count the GETs and
// SETs inside each script.)
func redisCommands(addr string) (int64, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("INFO commandstats\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("redis INFO: %q: %v", head, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, fmt.Errorf("redis INFO: %q: %w", head, err)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, fmt.Errorf("redis INFO: %w", err)
	}
	total := int64(0)
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval" && name != "cmdstat_script|load" && name != "cmdstat_incrby" && name != "cmdstat_expire") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("redis INFO: %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}
