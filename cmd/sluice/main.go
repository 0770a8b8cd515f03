// Command sluice is the Sluice rate-limit service and its tools: serve,
// check, validate, version, help (and more as they land).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"sort"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// revision is the VCS revision stamped with -ldflags "-X main.revision=…"
// (scripts/release.sh does), for builds that record none themselves
// (-trimpath -buildvcs=false, a build outside the checkout).
var revision = ""

// env is how commands read the environment; tests pass a map's lookup.
type env = func(string) string

// command is one subcommand. run gets the arguments after the command name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error
}

// commands holds every subcommand; each lives in its own file and registers
// itself in an init function.
var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error) {
	if _, dup := commands[name]; dup {
		panic("sluice: command registered twice: " + name) // programming error, found at start
	}
	commands[name] = command{summary: summary, run: run}
}

// errUsage marks an error caused by how the command was called (exit 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "sluice:", err)
		os.Exit(1)
	}
}

// run dispatches to a subcommand. It is main without the exits.
func run(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return fmt.Errorf("no command given: %w", errUsage)
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "--help", "-help":
		if len(rest) > 0 {
			if c, ok := commands[rest[0]]; ok {
				return c.run(ctx, []string{"-h"}, getenv, stdout, stderr)
			}
		}
		usage(stdout)
		return nil
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo))
		return nil
	}
	c, ok := commands[name]
	if !ok {
		// As gh and kubectl do: a suggestion, not the whole usage.
		msg := fmt.Sprintf("unknown command %q for sluice", name)
		if s := closest(name, slices.Sorted(maps.Keys(commands))); s != "" {
			msg += fmt.Sprintf("\n\nDid you mean this?\n\t%s", s)
		}
		fmt.Fprintf(stderr, "%s\n\nRun 'sluice help' for the commands.\n", msg)
		return fmt.Errorf("unknown command %q: %w", name, errUsage)
	}
	return c.run(ctx, rest, getenv, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Sluice: a rate-limiting service and Go library.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: sluice <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "version", "print the version")
	fmt.Fprintf(w, "  %-10s %s\n", "help", "show this help, or a command's flags: sluice help <command>")
}

// versionLine says which build this is: the version stamped with -ldflags
// (else the module's version when it has one; "dev" in a checkout), the VCS revision and
// time the go command recorded (with "+dirty" for uncommitted changes), and
// the Go version.
func versionLine(info func() (*debug.BuildInfo, bool)) string {
	v := version
	bi, ok := info()
	if !ok {
		return "sluice " + v
	}
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		rev = revision
	}
	line := "sluice " + v + " (" + bi.GoVersion
	if rev != "" {
		line += ", revision " + rev + dirty
		if at != "" {
			line += " of " + at
		}
	}
	return line + ")"
}

// closest returns the candidate within edit distance 2 of s (the nearest,
// the first of equals), or "".
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
