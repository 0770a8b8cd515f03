// Command shedbench measures the load shedder (package shed) and draws its
// figures: the overload experiment (a backend of capacity C offered
// 3 × C with 10% critical traffic, with and without shedding) and a step
// change of capacity (C halves mid-run), both on the deterministic
// simulation (cmd/shedbench/internal/shedsim) and against a real HTTP backend through
// Sluice's gateway (cmd/shedbench/internal/shedload), on loopback only.
//
//	go run ./cmd/shedbench                    # both; figures in docs/
//	go run ./cmd/shedbench -real=false        # the simulation only (seconds)
//
// It prints Markdown tables for BENCHMARKS.md and writes
// docs/shed-step-sim.png and docs/shed-step.png.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluice-rl/sluice/cmd/shedbench/internal/shedload"
	"github.com/sluice-rl/sluice/cmd/shedbench/internal/shedsim"
	"github.com/sluice-rl/sluice/shed"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shedbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("shedbench", flag.ContinueOnError)
	sim := fs.Bool("sim", true, "run the simulation")
	real := fs.Bool("real", true, "run the real-time experiments (about 2 minutes)")
	dir := fs.String("out", "docs", "directory for the figures")
	workers := fs.Int("workers", 20, "real backend: workers")
	service := fs.Duration("service", 200*time.Millisecond, "real backend: mean service time")
	dur := fs.Duration("duration", 30*time.Second, "length of each overload and step run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	if *sim {
		if err := simulate(out, *dir, *dur); err != nil {
			return err
		}
	}
	if *real {
		if err := realRuns(ctx, out, *dir, *workers, *service, *dur); err != nil {
			return err
		}
	}
	return nil
}

// mix is 10% critical, 60% default, 20% sheddable, 10% test.
var mix = shedsim.Mix10

type setup struct {
	name string
	cfg  func(workers int) *shed.Config
}

var setups = []setup{
	{"no shedding", func(int) *shed.Config { return nil }},
	{"worker (max_inflight = 1.25 × workers)", func(n int) *shed.Config {
		return &shed.Config{Worker: &shed.WorkerConfig{MaxInFlight: n * 5 / 4}}
	}},
	{"adaptive", func(int) *shed.Config { return &shed.Config{Adaptive: &shed.AdaptiveConfig{}} }},
	{"adaptive + worker (max_inflight = 2 × workers)", func(n int) *shed.Config {
		return &shed.Config{Adaptive: &shed.AdaptiveConfig{}, Worker: &shed.WorkerConfig{MaxInFlight: 2 * n}}
	}},
}

func simulate(out io.Writer, dir string, dur time.Duration) error {
	base := shedsim.Scenario{Workers: 20, Service: 20 * time.Millisecond, Offered: 3, Mix: mix,
		Duration: dur, Warmup: 2 * time.Second, Timeout: time.Second, Seed: 1}
	light := base
	light.Offered = 0.2
	lr, err := shedsim.Run(light)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "## Simulation: %d workers × %v service (C = %.0f/s), offered 3 × C for %v, client timeout %v\n\n",
		base.Workers, base.Service, base.Capacity(), base.Duration, base.Timeout)
	fmt.Fprintf(out, "Unloaded (0.2 × C): p50 %v, p99 %v.\n\n", ms(lr.P50), ms(lr.P99))
	header(out)
	var none shedsim.Result
	for i, s := range setups {
		sc := base
		sc.Shed = s.cfg(base.Workers)
		r, err := shedsim.Run(sc)
		if err != nil {
			return err
		}
		if i == 0 {
			none = r
		}
		row(out, s.name, classes(r.Classes), r.P50, r.P99, lr.P99, r.Goodput, base.Capacity())
	}
	fmt.Fprintf(out, "\nWithout shedding the backend's median answer came after %v, long after its client had left.\n", ms(none.ServerP50))
	step := base
	step.Shed = &shed.Config{Adaptive: &shed.AdaptiveConfig{}}
	step.StepAt, step.StepWorkers, step.Bucket = dur/2, base.Workers/2, 250*time.Millisecond
	sr, err := shedsim.Run(step)
	if err != nil {
		return err
	}
	var series []sample
	for _, p := range sr.Series {
		series = append(series, sample{at: p.At, limit: p.Limit, workers: int(p.Capacity * step.Service.Seconds()),
			capacity: p.Capacity, goodput: p.Goodput, p50: p.P50, p99: p.P99})
	}
	lim, follow := settle(series, step.StepAt)
	fmt.Fprintf(out, "\nStep (simulated): workers %d → %d at %v; limit %d before, settles at %d, within 10%% of it %v after the step; goodput %.3f of the capacity in force; critical success %.4f.\n",
		base.Workers, step.StepWorkers, step.StepAt, before(series, step.StepAt), lim, follow, goodRatio(series, step.StepAt), sr.Classes[shed.Critical].SuccessRatio())
	f := filepath.Join(dir, "shed-step-sim.png")
	if err := plotStep(f, fmt.Sprintf("Simulated: %d → %d workers at %v, offered 3 × C (adaptive limiter)", base.Workers, step.StepWorkers, step.StepAt),
		series, lr.P99); err != nil {
		return err
	}
	fmt.Fprintf(out, "Figure: %s\n\n", f)
	return nil
}

func realRuns(ctx context.Context, out io.Writer, dir string, workers int, service time.Duration, dur time.Duration) error {
	capacity := float64(workers) / service.Seconds()
	fmt.Fprintf(out, "## Real: HTTP backend of %d workers × %v (C = %.0f/s) behind Sluice's gateway, offered 3 × C for %v, client timeout 2s\n\n",
		workers, service, capacity, dur)
	client := shedload.Client()
	runOne := func(cfg *shed.Config, rate float64, d, warmup time.Duration, at map[time.Duration]func(), b *shedload.Backend) (shedload.Result, *shed.Shedder, error) {
		up := httptest.NewServer(b)
		defer up.Close()
		h, s, closeGW, err := shedload.Gateway(up.URL, cfg)
		if err != nil {
			return shedload.Result{}, nil, err
		}
		defer closeGW()
		gw := httptest.NewServer(h)
		defer gw.Close()
		l := shedload.Load{URL: gw.URL, Rate: rate, Duration: d, Warmup: warmup, Mix: mix, PriorityHeader: "Sluice-Priority",
			Timeout: 2 * time.Second, Bucket: 250 * time.Millisecond, At: at, Seed: 7}
		if s != nil && cfg.Adaptive != nil {
			l.Sample = func() int { return s.Stats().Adaptive.Limit }
		}
		r := shedload.Run(ctx, l, client)
		b.Close() // answer what is still queued at once
		return r, s, nil
	}
	lr, _, err := runOne(nil, 0.2*capacity, 10*time.Second, time.Second, nil, shedload.NewBackend(workers, service))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Unloaded (0.2 × C): p50 %v, p99 %v.\n\n", ms(lr.P50), ms(lr.P99))
	header(out)
	for _, s := range setups {
		r, _, err := runOne(s.cfg(workers), 3*capacity, dur, 5*time.Second, nil, shedload.NewBackend(workers, service))
		if err != nil {
			return err
		}
		var cl [shed.NumPriorities]cls
		for p, c := range r.Classes {
			cl[p] = cls{offered: c.Offered, ok: c.OK, shed: c.Shed, timedOut: c.TimedOut}
		}
		row(out, s.name, cl, r.P50, r.P99, lr.P99, r.Goodput, capacity)
	}
	b := shedload.NewBackend(workers, service)
	half := dur / 2
	r, _, err := runOne(&shed.Config{Adaptive: &shed.AdaptiveConfig{}}, 3*capacity, dur, 5*time.Second,
		map[time.Duration]func(){half: func() { b.SetWorkers(workers / 2) }}, b)
	if err != nil {
		return err
	}
	var series []sample
	for _, p := range r.Series {
		w := workers
		if p.At >= half {
			w = workers / 2
		}
		series = append(series, sample{at: p.At, limit: p.Limit, workers: w, capacity: float64(w) / service.Seconds(),
			goodput: p.Goodput, p50: p.P50, p99: p.P99})
	}
	lim, follow := settle(series, half)
	fmt.Fprintf(out, "\nStep (real): workers %d → %d at %v; limit %d before, settles at %d, within 10%% of it %v after the step; goodput %.3f of the capacity in force; critical success %.4f.\n",
		workers, workers/2, half, before(series, half), lim, follow, goodRatio(series, 5*time.Second), r.Classes[shed.Critical].SuccessRatio())
	f := filepath.Join(dir, "shed-step.png")
	if err := plotStep(f, fmt.Sprintf("Real HTTP backend behind the gateway: %d → %d workers at %v, offered 3 × C (adaptive limiter)", workers, workers/2, half),
		series, lr.P99); err != nil {
		return err
	}
	fmt.Fprintf(out, "Figure: %s\n", f)
	return nil
}

// settle returns the median limit over the last quarter of the run (where
// it settled after the step), and how long after the step the limit first
// came within 10% of it; -1 if never.
func settle(s []sample, at time.Duration) (limit int, after time.Duration) {
	var tail []int
	for _, p := range s[len(s)*3/4:] {
		if p.limit > 0 {
			tail = append(tail, p.limit)
		}
	}
	if len(tail) == 0 {
		return 0, -1
	}
	slices.Sort(tail)
	limit = tail[len(tail)/2]
	for _, p := range s {
		if p.at >= at && p.limit > 0 && float64(p.limit) <= 1.1*float64(limit) {
			return limit, p.at - at
		}
	}
	return limit, -1
}

// before returns the median limit over the quarter of the run before at.
func before(s []sample, at time.Duration) int {
	var l []int
	for _, p := range s {
		if p.at >= at*3/4 && p.at < at && p.limit > 0 {
			l = append(l, p.limit)
		}
	}
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	return l[len(l)/2]
}

// goodRatio is goodput over capacity, summed over the buckets from `from`
// on (the last bucket, cut short by the end of the run, left out).
func goodRatio(s []sample, from time.Duration) float64 {
	var g, c float64
	for _, p := range s[:len(s)-1] {
		if p.at >= from {
			g += p.goodput
			c += p.capacity
		}
	}
	if c == 0 {
		return 0
	}
	return g / c
}

type cls struct{ offered, ok, shed, timedOut int }

func classes(c [shed.NumPriorities]shedsim.Class) [shed.NumPriorities]cls {
	var r [shed.NumPriorities]cls
	for p, x := range c {
		r[p] = cls{offered: x.Offered, ok: x.OK, shed: x.Shed, timedOut: x.TimedOut}
	}
	return r
}

func header(out io.Writer) {
	fmt.Fprintln(out, "| setup | critical ok | default ok | sheddable ok | test ok | admitted p50 | admitted p99 | p99 / unloaded p99 | goodput / C |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
}

func row(out io.Writer, name string, c [shed.NumPriorities]cls, p50, p99, base time.Duration, goodput, capacity float64) {
	pct := func(x cls) string {
		if x.offered == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f%%", 100*float64(x.ok)/float64(x.offered))
	}
	ratio := "–"
	if base > 0 && p99 > 0 {
		ratio = fmt.Sprintf("%.2f×", float64(p99)/float64(base))
	}
	fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %v | %v | %s | %.3f |\n", name, pct(c[shed.Critical]), pct(c[shed.Default]),
		pct(c[shed.Sheddable]), pct(c[shed.Test]), ms(p50), ms(p99), ratio, goodput/capacity)
}

func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

var errNoData = errors.New("no data to plot")
