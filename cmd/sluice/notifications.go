package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/sluice-rl/sluice/notify"
	"github.com/sluice-rl/sluice/server/admin"
)

func init() {
	register("notifications", "list the notify_at levels that fired, from a server's admin API: sluice notifications [--limit N]", runNotifications)
}

func runNotifications(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	fs := newFlagSet("notifications", stderr)
	var ac adminClient
	ac.flags(fs)
	page := addPageFlags(fs, "levels", notify.MaxPage)
	output := outputFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: sluice notifications [--limit N] [--cursor C] [--output table|json]")
		fmt.Fprintln(stderr, "\nPrints the levels of rules' notify_at that fired (once per period across the fleet),")
		fmt.Fprintln(stderr, "newest first, one page at a time: with PostgreSQL the fleet's, else the server's own.")
		fmt.Fprintln(stderr, "Talks to a server's admin API (--admin-url, SLUICE_ADMIN_URL) with the bearer token in")
		fmt.Fprintln(stderr, "SLUICE_ADMIN_TOKEN or --token-file; a read-only token is enough.")
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	if _, err := parseAdminCommand(fs, args, getenv, 0); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := checkOutput("notifications", *output); err != nil {
		return err
	}
	q, err := page.query("notifications")
	if err != nil {
		return err
	}
	out, _, err := ac.do(ctx, getenv, "notifications", http.MethodGet, "notifications?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	return printAnswer(stdout, "notifications", *output, out, printNotifications)
}

// printNotifications prints a page of fired levels as a table, then how
// to get the next page.
func printNotifications(w io.Writer, page admin.NotificationsJSON) error {
	if len(page.Notifications) == 0 {
		fmt.Fprintln(w, "no notifications")
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIRED AT\tDOMAIN\tRULE\tKEY\tLEVEL\tUSED\tLIMIT\tPERIOD END")
	for _, f := range page.Notifications {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d%%\t%d\t%d\t%s\n", f.FiredAt.UTC().Format(time.RFC3339), oneLine(f.Domain), oneLine(f.Rule),
			oneLine(f.Key), f.Level, f.Used, f.Limit, f.PeriodEnd.UTC().Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(w, "more: run again with --cursor %s\n", page.Next)
	}
	return nil
}
