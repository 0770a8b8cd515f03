// Command sluice-bench is Sluice's load harness, kept out of the production
// binary: it drives a gRPC rate limit service (grpc), compares `sluice serve`
// against a bare grpc-go server (grpc --compare), and drives a Redis through
// the Redis store (redis).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// env is how commands read the environment; tests pass a map's lookup.
type env = func(string) string

// command is one subcommand. run gets the arguments after the command name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error
}

// commands holds every subcommand; each file registers its own.
var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error) {
	commands[name] = command{summary: summary, run: run}
}

// errUsage marks an error caused by how the command was called (exit 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-bench:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run dispatches to a subcommand. It is main without the exits.
func run(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return fmt.Errorf("no command given: %w", errUsage)
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		usage(stderr)
		return fmt.Errorf("unknown command %q: %w", args[0], errUsage)
	}
	return c.run(ctx, args[1:], getenv, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sluice-bench <command> [flags]   (sluice-bench <command> -h for its flags)")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}

// parseFlags parses args into fs: done is true after -h, and stray
// arguments or bad flags are usage errors.
func parseFlags(fs *flag.FlagSet, args []string) (done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("%s: unexpected arguments %q: %w", fs.Name(), fs.Args(), errUsage)
	}
	return false, nil
}
