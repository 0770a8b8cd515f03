package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/sluice-rl/sluice/internal/proof/check"
	"github.com/sluice-rl/sluice/internal/proof/fleet"
)

// runProof runs the fault matrix (internal/proof/fleet): every schedule, or
// those --only matches, or the short ones with --short; each on a fresh
// fleet of three `sluice serve` built from this tree, with seeded traffic
// (schedule i uses seed --seed + i). It writes into --out each history
// (JSON lines), schedule.json (the faults as planned and as they ran, the
// seeds), matrix.md and matrix.svg, prints progress and the matrix, and
// fails when any bound is broken. --check FILE instead re-checks a
// recorded history and prints the checker's report.
func runProof(ctx context.Context, args []string, _ env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("proof", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 1, "seed of the clients' traffic (schedule i uses seed+i)")
	out := fs.String("out", "proof-out", "directory for the histories, schedule.json, matrix.md and matrix.svg (created)")
	short := fs.Bool("short", false, "only the short matrix (the schedules the test suite runs)")
	only := fs.String("only", "", "only schedules whose \"<store> <name>\" matches this regular expression")
	clients := fs.Int("clients", 6, "concurrent clients")
	recheck := fs.String("check", "", "re-check this recorded history (a .jsonl file of a run) and exit")
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	if *recheck != "" {
		fh, err := os.Open(*recheck)
		if err != nil {
			return fmt.Errorf("proof: %w", err)
		}
		defer fh.Close()
		h, err := check.ReadJSONL(fh)
		if err != nil {
			return fmt.Errorf("proof: %w", err)
		}
		rep := check.Check(h)
		fmt.Fprint(stdout, rep.Summary())
		if !rep.OK() {
			return fmt.Errorf("proof: %s: %d violations", *recheck, len(rep.Violations))
		}
		return nil
	}
	var match *regexp.Regexp
	if *only != "" {
		var err error
		if match, err = regexp.Compile(*only); err != nil {
			return fmt.Errorf("%w: --only: %w", errUsage, err)
		}
	}
	if *clients < 1 || *clients > 256 {
		return fmt.Errorf("%w: --clients from 1 to 256", errUsage)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("proof: %w", err)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
	tmp, err := os.MkdirTemp("", "sluice-proof-bin-")
	if err != nil {
		return fmt.Errorf("proof: %w", err)
	}
	defer os.RemoveAll(tmp)
	logf("building sluice")
	bin, err := fleet.Build(tmp)
	if err != nil {
		return fmt.Errorf("proof: %w", err)
	}
	var todo []fleet.Schedule
	var seeds []uint64
	for i, s := range fleet.Schedules() {
		if *short && !s.Short || match != nil && !match.MatchString(s.Store+" "+s.Name) {
			continue
		}
		todo, seeds = append(todo, s), append(seeds, *seed+uint64(i))
	}
	if len(todo) == 0 {
		return fmt.Errorf("%w: no schedule selected", errUsage)
	}
	var results []fleet.Result
	var failed []string
	var placed check.Placement // summed over the schedules
	for i, s := range todo {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		logf("[%d/%d] %s: %s (seed %d)", i+1, len(todo), s.Store, s.Name, seeds[i])
		var r fleet.Result
		err := fleet.Program(s.Name, logf, func(t fleet.TB) {
			r = fleet.Run(t, fleet.Options{Bin: bin, Seed: seeds[i], Clients: *clients, Logf: logf}, s)
		})
		if err != nil {
			return fmt.Errorf("proof: %s %s: %w", s.Store, s.Name, err)
		}
		pl := r.Report.Placement
		logf("  %s", placementLine(pl))
		placed.Admissions += pl.Admissions
		placed.ByInstant += pl.ByInstant
		placed.InstantUnplaced += pl.InstantUnplaced
		placed.IntervalUnplaced += pl.IntervalUnplaced
		for _, v := range r.Report.Violations {
			logf("  VIOLATION %s", v)
		}
		for _, p := range r.Problems() {
			logf("  PROBLEM %s", p)
		}
		if fleet.Verdict(r) != "PASS" {
			failed = append(failed, s.Store+" "+s.Name)
		}
		if err := fleet.WriteHistory(*out, r); err != nil {
			return err
		}
		results = append(results, r)
	}
	table := fleet.Table(results)
	files := map[string]string{"matrix.md": table, "matrix.svg": fleet.SVG(fleet.PlotCells(results))}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(*out, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("proof: %w", err)
		}
	}
	if err := fleet.WriteSchedule(*out, seeds, results); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fault matrix, seed %d (admitted / bound in the worst checked span of each rule):\n\n%s\n%s, over every schedule\nhistories, schedule.json, matrix.md and matrix.svg in %s\n", *seed, table, placementLine(placed), *out)
	if len(failed) > 0 {
		return fmt.Errorf("proof: %d schedule(s) failed: %q", len(failed), failed)
	}
	return nil
}

// placementLine says how the checker placed the admissions of window rules:
// by the store's decision instant each answer reported, and how many the
// [send, recv] interval alone could not place.
func placementLine(p check.Placement) string {
	return fmt.Sprintf("window admissions %d: placed by their decision instant %d (unplaced %d); by [send, recv] unplaced %d",
		p.Admissions, p.ByInstant, p.InstantUnplaced, p.IntervalUnplaced)
}
