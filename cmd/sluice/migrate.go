package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/tenant/pg"
)

func init() {
	register("migrate", "apply the PostgreSQL schema of tenant quotas (--postgres-url or SLUICE_POSTGRES_URL)", runMigrate)
}

func runMigrate(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", stderr)
	url := fs.String("postgres-url", "", "PostgreSQL URL (prefer SLUICE_POSTGRES_URL: a flag's value shows in ps)")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the database")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice migrate [--postgres-url URL] [--timeout D]")
		fmt.Fprintln(stderr, "\nApplies the schema migrations the database lacks (safe to run again, and from several")
		fmt.Fprintln(stderr, "instances at once) and prints what it applied.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if done, err := parseOptions(fs, args, getenv); done || err != nil {
		return err
	}
	if *url == "" {
		return fmt.Errorf("migrate: --postgres-url (or SLUICE_POSTGRES_URL) is required: %w", errUsage)
	}
	st, err := pg.Open(pg.Options{URL: *url})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	applied, err := st.Migrate(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "schema up to date; nothing applied")
		return nil
	}
	fmt.Fprintf(stdout, "applied %s\n", strings.Join(applied, ", "))
	return nil
}
