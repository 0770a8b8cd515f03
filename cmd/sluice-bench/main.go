// Command sluice-bench is Sluice's load harness, kept out of the production
// binary: it drives a gRPC rate limit service (grpc), compares `sluice serve`
// against a bare grpc-go server (grpc --compare), drives a Redis through the
// Redis store (redis), and measures the memory store's RSS at its key cap
// (memory).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// env is how commands read the environment; tests pass a map's lookup.
type env = func(string) string

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
	name := ""
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	switch name {
	case "grpc":
		return runBench(ctx, args, getenv, stdout, stderr)
	case "redis":
		return runBenchRedis(ctx, args, getenv, stdout, stderr)
	case "baseline":
		return runBenchBaseline(ctx, args, getenv, stdout, stderr)
	case "baseline-http":
		return runBaselineHTTP(ctx, args, getenv, stdout, stderr)
	case "http":
		return runBenchHTTP(ctx, args, getenv, stdout, stderr)
	case "memory":
		return runBenchMemory(ctx, args, getenv, stdout, stderr)
	case "hybrid":
		return runBenchHybrid(ctx, args, getenv, stdout, stderr)
	case "proof":
		return runProof(ctx, args, getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q: %w", name, errUsage)
}

const usage = `usage: sluice-bench <command> [flags]   (sluice-bench <command> -h for its flags)
  grpc       gRPC load generator: drive a server, or --compare sluice against a bare grpc-go server
  redis      drive a Redis with the Redis store: decisions/s and latency from many goroutines
  baseline   serve a bare grpc-go health server (the baseline grpc --compare drives), or
             with --service rls also a bare RateLimitService (scripts/instr-transport.sh)
  baseline-http  serve a bare net/http POST /v1/check that decodes the same JSON (encoding/json
             or go-json-experiment/json) and answers the same JSON (scripts/instr-transport.sh)
  http       drive POST /v1/check with a fixed count of requests (scripts/instr-transport.sh)
  hybrid     load figures of placement hybrid beside the memory store and Redis (global);
             --cost: Redis CPU and commands per decision, hybrid vs global (hot, Zipf, cold users)
  memory     fill the memory store to its key cap and report the process's memory (RSS)
  proof      the fault matrix: a fleet on real Redis/PostgreSQL under faults, histories checked offline
`

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
