package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/sim"
)

func init() {
	register("simulate", "replay workloads against every algorithm and placement; report accuracy (and plots)", runSimulate)
}

// runSimulate runs sim.DefaultSuite (optionally with a recorded trace) and
// prints the results as a table or JSON on stdout, progress on stderr.
func runSimulate(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", stderr)
	var (
		seed     = fs.Uint64("seed", 1, "seed of every workload; the same seed gives the same results")
		format   = fs.String("format", "table", "output: table or json")
		plots    = fs.String("plots", "", "write plots into this directory")
		plotFmt  = fs.String("plot-format", "png", "plot file format: png or svg")
		scale    = fs.Float64("scale", 1, "multiply every scenario's duration (0.1 quick look, 10 tighter figures)")
		quota    = fs.Int64("quota", sim.DefaultLimit.Quota, "quota of the simulated limit")
		window   = fs.Duration("window", sim.DefaultLimit.Window, "window of the simulated limit")
		burst    = fs.Int64("burst", 0, "burst of the bucket algorithms (0: quota)")
		algs     = fs.String("algorithms", "", "comma-separated algorithms to run (default: all but concurrency)")
		trace    = fs.String("trace", "", "also replay a recorded trace: CSV time,key[,cost] or JSON lines {\"time\",\"key\",\"cost\"}")
		quiet    = fs.Bool("quiet", false, "no progress on stderr")
		workers  = fs.Int("workers", 0, "scenarios run at once (0: GOMAXPROCS)")
		onlyList = fs.String("groups", "", "comma-separated groups to run: load, workload, placement, sync, countall (default: all)")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice simulate [flags]")
		fmt.Fprintln(stderr, "\nReplays workloads (Poisson at several loads, on/off bursts, a boundary attack, a burst and")
		fmt.Fprintln(stderr, "recovery, Zipf keys, a diurnal ramp, and optionally your own trace) against every algorithm")
		fmt.Fprintln(stderr, "and placement on a simulated clock, and reports each one's decisions against the exact")
		fmt.Fprintln(stderr, "sliding-window answer. Deterministic for a seed. See docs/accuracy.md.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := parseOptions(fs, args, getenv); done || err != nil {
		return err
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("simulate: --format %q: want table or json: %w", *format, errUsage)
	}
	if *plotFmt != "png" && *plotFmt != "svg" {
		return fmt.Errorf("simulate: --plot-format %q: want png or svg: %w", *plotFmt, errUsage)
	}
	if *scale <= 0 || *scale > 100 {
		return fmt.Errorf("simulate: --scale %v: want a number in (0, 100]: %w", *scale, errUsage)
	}
	if *quota < 1 {
		return fmt.Errorf("simulate: --quota %d: want at least 1: %w", *quota, errUsage)
	}
	opts := sim.SuiteOptions{Limit: sluice.Limit{Quota: *quota, Window: *window, Burst: *burst}, Scale: *scale}
	if *algs != "" {
		for _, name := range strings.Split(*algs, ",") {
			a, err := sluice.ParseAlgorithm(strings.TrimSpace(name))
			if err != nil {
				return fmt.Errorf("simulate: --algorithms: %w: %w", err, errUsage)
			}
			opts.Algorithms = append(opts.Algorithms, a)
		}
	}
	if *trace != "" {
		f, err := os.Open(*trace)
		if err != nil {
			return fmt.Errorf("simulate: --trace: %w", err)
		}
		opts.Trace, err = sim.ParseTrace(*trace, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("simulate: --trace: %w", err)
		}
	}
	scenarios := sim.DefaultSuite(opts)
	if *onlyList != "" {
		want := map[string]bool{}
		for _, g := range strings.Split(*onlyList, ",") {
			want[strings.TrimSpace(g)] = true
		}
		var kept []sim.Scenario
		for _, s := range scenarios {
			if want[s.Group] {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			return fmt.Errorf("simulate: --groups %q matches no scenario: %w", *onlyList, errUsage)
		}
		scenarios = kept
	}
	start := time.Now()
	progress := func(done, total int, decisions int64) {
		fmt.Fprintf(stderr, "\rsimulate: %d/%d scenarios, %.1fM decisions, %.1fs", done, total,
			float64(decisions)/1e6, time.Since(start).Seconds())
		if done == total {
			fmt.Fprintln(stderr)
		}
	}
	if *quiet {
		progress = nil
	}
	results, err := sim.Run(ctx, scenarios, sim.Options{Seed: *seed, Workers: *workers, Progress: progress})
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("simulate: interrupted: %w", ctx.Err())
	case err != nil:
		// Run fails only on scenarios it cannot run: here, a bad flag.
		return fmt.Errorf("simulate: %w: %w", err, errUsage)
	}
	rep := sim.Report{
		Command:  "sluice simulate " + strings.Join(args, " "),
		Seed:     *seed,
		ElapsedS: time.Since(start).Seconds(),
		Results:  results,
	}
	rep.Command = strings.TrimSpace(rep.Command)
	for _, r := range results {
		rep.Decisions += r.Decisions
	}
	if *plots != "" {
		files, err := sim.WritePlots(*plots, *plotFmt, results)
		if err != nil {
			return fmt.Errorf("simulate: --plots: %w", err)
		}
		if !*quiet {
			fmt.Fprintf(stderr, "simulate: wrote %s\n", strings.Join(files, ", "))
		}
	}
	if *format == "json" {
		return rep.WriteJSON(stdout)
	}
	for i := range rep.Results {
		rep.Results[i].Series = nil
	}
	return rep.WriteTable(stdout)
}
