package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/stack"
)

func init() {
	register("validate", "check rule files and print every problem: sluice validate DIR|FILE…", runValidate)
}

// runValidate loads each argument (a rule directory, as `sluice serve
// --rules` reads it, or a single rule file) and prints every problem as
// file:line: field: message, one a line, on stdout. It returns an error (exit
// status 1) if any argument has a problem, and a usage error (exit status 2)
// when called wrongly.
func runValidate(_ context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("validate", stderr)
	alg := fs.String("default-algorithm", sluice.FixedWindow.String(),
		"algorithm of rules that name none, as for sluice serve (env SLUICE_DEFAULT_ALGORITHM): "+algorithmNames())
	merge := fs.Bool("merge-domains", false, "let rule files share a domain, as sluice serve --merge-domains (env SLUICE_MERGE_DOMAINS)")
	prices := fs.String("prices", "", "price table file of money budgets, as sluice serve --prices (env SLUICE_PRICES)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice validate [--default-algorithm A] [--merge-domains] [--prices FILE] DIR|FILE…")
		fmt.Fprintln(stderr, "\nLoads rule directories (every *.yaml and *.yml, as `sluice serve --rules` does) or single")
		fmt.Fprintln(stderr, "rule files and prints every problem as file:line: field: message. Exit status 0 when all are")
		fmt.Fprintln(stderr, "valid, 1 when any problem is found, 2 on a usage error.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseArgs(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	algSet, mergeSet, pricesSet := false, false, false
	fs.Visit(func(f *flag.Flag) {
		algSet = algSet || f.Name == "default-algorithm"
		mergeSet = mergeSet || f.Name == "merge-domains"
		pricesSet = pricesSet || f.Name == "prices"
	})
	if v := getenv("SLUICE_PRICES"); v != "" && !pricesSet {
		*prices = v
	}
	if v := getenv("SLUICE_MERGE_DOMAINS"); v != "" && !mergeSet {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("validate: SLUICE_MERGE_DOMAINS=%q: want true or false: %w", v, errUsage)
		}
		*merge = b
	}
	if v := getenv("SLUICE_DEFAULT_ALGORITHM"); v != "" && !algSet {
		*alg = v
	}
	a, err := sluice.ParseAlgorithm(*alg)
	if err != nil {
		return fmt.Errorf("validate: --default-algorithm: %w: %w", err, errUsage)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fmt.Errorf("validate: no rule directory or file given: %w", errUsage)
	}
	opts := rules.Options{DefaultAlgorithm: a, MergeDomains: *merge, PricesFile: *prices}
	problems := 0
	for _, path := range fs.Args() {
		snap, err := load(path, opts)
		var errs rules.Errors
		switch {
		case errors.As(err, &errs):
			for _, p := range errs {
				fmt.Fprintln(stdout, p.Error())
			}
			problems += len(errs)
		case err != nil:
			fmt.Fprintf(stdout, "%s: %v\n", path, err)
			problems++
		default:
			fmt.Fprintf(stdout, "%s: ok: %d domain(s), %d rule(s)\n", path, len(snap.Domains()), len(snap.Rules()))
		}
	}
	if problems > 0 {
		return fmt.Errorf("validate: %d problem(s) found", problems)
	}
	return nil
}

// load reads a rule directory or a single rule file.
func load(path string, opts rules.Options) (*rules.Snapshot, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return rules.LoadDir(path, opts)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return rules.Parse(path, data, opts)
}

func algorithmNames() string {
	s := ""
	for i, a := range stack.Algorithms() {
		if i > 0 {
			s += ", "
		}
		s += a.String()
	}
	return s
}
