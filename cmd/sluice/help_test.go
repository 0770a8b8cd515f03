package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestHelpShowsEveryFlag: `sluice CMD -h`, and `sluice CMD ACTION -h` for
// every action a command's help names, lists every flag defined on the
// FlagSets the command made (as PrintDefaults does: a line starting with
// -name), so no flag is hidden from --help. Every registered command makes a
// FlagSet (itself or through its actions), or the test cannot check it and
// fails.
func TestHelpShowsEveryFlag(t *testing.T) {
	var made []*flag.FlagSet
	flagSetMade = func(fs *flag.FlagSet) { made = append(made, fs) }
	t.Cleanup(func() { flagSetMade = nil })
	noEnv := func(string) string { return "" }
	help := func(t *testing.T, args ...string) (string, []*flag.FlagSet) {
		t.Helper()
		made = nil
		var stderr bytes.Buffer
		if err := run(context.Background(), append(args, "-h"), noEnv, &bytes.Buffer{}, &stderr); err != nil {
			t.Errorf("sluice %v -h: %v", args, err)
		}
		return stderr.String(), made
	}
	check := func(t *testing.T, text string, sets []*flag.FlagSet) {
		t.Helper()
		for _, fs := range sets {
			fs.VisitAll(func(f *flag.Flag) {
				if !regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(f.Name) + `\b`).MatchString(text) {
					t.Errorf("help of %q does not list -%s:\n%s", fs.Name(), f.Name, text)
				}
			})
		}
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			text, sets := help(t, name)
			check(t, text, sets)
			checked := len(sets)
			seen := map[string]bool{}
			for _, m := range regexp.MustCompile(`sluice `+regexp.QuoteMeta(name)+` ([a-z]+)\b`).FindAllStringSubmatch(text, -1) {
				action := m[1]
				if seen[action] {
					continue
				}
				seen[action] = true
				atext, asets := help(t, name, action)
				if len(asets) == 0 {
					t.Errorf("sluice %s %s -h made no FlagSet", name, action)
				}
				check(t, atext, asets)
				checked += len(asets)
			}
			if checked == 0 {
				t.Errorf("sluice %s -h made no FlagSet and names no action: its flags cannot be checked", name)
			}
			t.Logf("checked %d FlagSet(s); actions %v", checked, seen)
		})
	}
}

// TestServeFlagTable: docs/service.md's table of serve's flags and serve's
// FlagSet agree both ways: every flag has a row, and every flag a row names
// exists.
func TestServeFlagTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs/service.md"))
	if err != nil {
		t.Fatal(err)
	}
	const head = "| flag | default | meaning |\n|---|---|---|\n"
	doc := string(data)
	i := strings.Index(doc, head)
	if i < 0 {
		t.Fatalf("docs/service.md has no table headed %q", head)
	}
	table, _, _ := strings.Cut(doc[i+len(head):], "\n\n")
	inTable := map[string]bool{}
	name := regexp.MustCompile("`--([a-z0-9-]+)")
	for _, row := range strings.Split(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(row, "| "), " | ")
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			inTable[m[1]] = true
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg := defaultServeConfig()
	cfg.flags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !inTable[f.Name] {
			t.Errorf("docs/service.md's table of serve's flags has no row for --%s (%s)", f.Name, f.Usage)
		}
	})
	for fl := range inTable {
		if fs.Lookup(fl) == nil {
			t.Errorf("docs/service.md's table of serve's flags names --%s, which sluice serve does not have", fl)
		}
	}
	if len(inTable) != n {
		t.Errorf("the table names %d flags, serve has %d", len(inTable), n)
	}
}
