package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/service"
)

func init() {
	register("diff", "preview rule changes against a server's recent traffic: sluice diff --against URL --rules DIR", runDiff)
}

func runDiff(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("diff", stderr)
	var ac adminClient
	ac.flags(fs)
	against := fs.String("against", "", "base URL of the running server whose sample to replay (wins over --admin-url)")
	dir := fs.String("rules", "", "directory of the new rule files (required)")
	defAlg := fs.String("default-algorithm", sluice.FixedWindow.String(), "algorithm of rules that name none (as the server's)")
	output := fs.String("output", "table", "table or json")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice diff --against URL --rules DIR [--output table|json]")
		fmt.Fprintln(stderr, "\nFetches the server's sample of recent checks (GET /admin/v1/sample, a read-only admin token")
		fmt.Fprintln(stderr, "in SLUICE_ADMIN_TOKEN or --token-file) and matches each descriptor against the rules in DIR,")
		fmt.Fprintln(stderr, "offline: nothing is charged. Prints, per domain, how many descriptors would be newly limited,")
		fmt.Fprintln(stderr, "newly unlimited, limited differently, or matched by another rule, and which rules move.")
		fmt.Fprintln(stderr, "Tenant overrides, kill switches and replaces are not replayed.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := parseOptions(fs, args, getenv); done || err != nil {
		return err
	}
	if *against != "" {
		ac.base = *against
	}
	if *dir == "" {
		return fmt.Errorf("diff: --rules: required: %w", errUsage)
	}
	if *output != "table" && *output != "json" {
		return fmt.Errorf("diff: --output: %q (want table or json): %w", *output, errUsage)
	}
	alg, err := sluice.ParseAlgorithm(*defAlg)
	if err != nil {
		return fmt.Errorf("diff: --default-algorithm: %w", err)
	}
	next, err := rules.LoadDir(*dir, rules.Options{DefaultAlgorithm: alg})
	if err != nil {
		return fmt.Errorf("diff: --rules: %w", err)
	}
	out, _, err := ac.do(ctx, getenv, "diff", http.MethodGet, "sample", nil)
	if err != nil {
		return err
	}
	var sj admin.SampleJSON
	if err := json.Unmarshal(out, &sj); err != nil {
		return fmt.Errorf("diff: the sample is not what this version expects: %w", err)
	}
	sample, err := sj.Sampled()
	if err != nil {
		return fmt.Errorf("diff: sample: %w", err)
	}
	rep := service.Preview(sample, next)
	if *output == "json" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("diff: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	fmt.Fprintf(stdout, "replayed %d sampled requests (%d descriptors; the server records one check in %d, keeps %d)\n\n",
		rep.Requests, rep.Descriptors, sj.Every, sj.Size)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tDESCRIPTORS\tUNCHANGED\tNEWLY LIMITED\tNEWLY UNLIMITED\tLIMIT CHANGED\tRULE CHANGED\tDENIED, NOW UNLIMITED")
	for _, d := range rep.Domains {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", d.Domain, d.Descriptors, d.Unchanged, d.NewlyLimited, d.NewlyUnlimited,
			d.LimitChanged, d.RuleChanged, d.DeniedNowUnlimited)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range rep.Domains {
		if len(d.Moves) == 0 {
			continue
		}
		fmt.Fprintf(stdout, "\n%s:\n", d.Domain)
		for _, m := range d.Moves {
			fmt.Fprintf(stdout, "  %6d  %s → %s  (%s)\n", m.Count, ruleAndLimit(m.From, m.FromLimit), ruleAndLimit(m.To, m.ToLimit), m.Change)
		}
	}
	return nil
}

// ruleAndLimit spells one side of a move.
func ruleAndLimit(rule, limit string) string {
	if rule == "" {
		return "no rule"
	}
	return rule + " [" + limit + "]"
}
