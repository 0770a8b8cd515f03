package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/sluice-rl/sluice/server/admin"
)

func init() {
	register("deny", "deny entries (key with a value or an address range) kept through the admin API: sluice deny list|add|rm", runDeny)
}

func runDeny(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "Usage: sluice deny list [--domain D] [--limit N] [--cursor C] [--output table|json]")
		fmt.Fprintln(w, "       sluice deny add --domain D --key K [--value V | --cidr C] [--reason R] [--output table|json]")
		fmt.Fprintln(w, "       sluice deny rm --domain D --key K [--value V | --cidr C]")
		fmt.Fprintln(w, "\nA deny entry refuses, with reason deny_list, every request of the domain naming the key with")
		fmt.Fprintln(w, "the value, with an address in the range (--cidr 10.0.0.0/8, or one address), or with any value")
		fmt.Fprintln(w, "(neither given), on every instance sharing the PostgreSQL database, beside the rule files'")
		fmt.Fprintln(w, "deny lists. Every change is audited. Talks to a server's admin API (--admin-url,")
		fmt.Fprintln(w, "SLUICE_ADMIN_URL) with the bearer token in SLUICE_ADMIN_TOKEN or --token-file.")
	}
	action, ok, err := splitAction("deny", args, stderr, usage)
	if !ok {
		return err
	}
	fs := newFlagSet("deny "+action, stderr)
	var ac adminClient
	ac.flags(fs)
	var e admin.DenyJSON
	var output, cursor string
	var limit int
	fs.StringVar(&e.Domain, "domain", "", "the rule file's domain (list: only its entries)")
	switch action {
	case "add", "rm":
		fs.StringVar(&e.Key, "key", "", "the descriptor entry's key; required")
		fs.StringVar(&e.Value, "value", "", "the exact value denied")
		fs.StringVar(&e.CIDR, "cidr", "", "the address range denied (10.0.0.0/8, 2001:db8::/32 or one address)")
		if action == "add" {
			fs.StringVar(&e.Reason, "reason", "", "free text for operators (at most 512 bytes)")
		}
	case "list":
		fs.IntVar(&limit, "limit", 100, "entries per page (1 to 1000)")
		fs.StringVar(&cursor, "cursor", "", "the next of the previous page")
	default:
		usage(stderr)
		return fmt.Errorf("deny: unknown action %q (want list, add or rm): %w", action, errUsage)
	}
	fs.StringVar(&output, "output", "table", "table or json")
	fs.Usage = func() { usage(stderr); fmt.Fprintln(stderr, "\nFlags:"); fs.PrintDefaults() }
	if _, err := parseAdminCommand(fs, args[1:], getenv, 0); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if output != "table" && output != "json" {
		return fmt.Errorf("deny %s: --output: %q (want table or json): %w", action, output, errUsage)
	}
	if action == "list" {
		q := url.Values{}
		q.Set("limit", fmt.Sprint(limit))
		if e.Domain != "" {
			q.Set("domain", e.Domain)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		out, _, err := ac.do(ctx, getenv, "deny list", http.MethodGet, "deny?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		if output == "json" {
			_, err = stdout.Write(out)
			return err
		}
		var list admin.DenyListJSON
		if err := json.Unmarshal(out, &list); err != nil {
			return fmt.Errorf("deny list: the answer is not what this version expects: %w", err)
		}
		if err := denyTable(stdout, list.Deny); err != nil {
			return err
		}
		if list.Next != "" {
			fmt.Fprintf(stdout, "more: --cursor %s\n", list.Next)
		}
		return nil
	}
	switch {
	case e.Domain == "":
		return fmt.Errorf("deny %s: --domain is required: %w", action, errUsage)
	case e.Key == "":
		return fmt.Errorf("deny %s: --key is required: %w", action, errUsage)
	case e.Value != "" && e.CIDR != "":
		return fmt.Errorf("deny %s: give --value or --cidr, not both: %w", action, errUsage)
	}
	body, _ := json.Marshal(e)
	if action == "rm" {
		_, _, err := ac.do(ctx, getenv, "deny rm", http.MethodDelete, "deny", body)
		return err
	}
	out, _, err := ac.do(ctx, getenv, "deny add", http.MethodPut, "deny", body)
	if err != nil {
		return err
	}
	if output == "json" {
		_, err = stdout.Write(out)
		return err
	}
	var got admin.DenyJSON
	if err := json.Unmarshal(out, &got); err != nil {
		return fmt.Errorf("deny add: the answer is not what this version expects: %w", err)
	}
	return denyTable(stdout, []admin.DenyJSON{got})
}

// denyTable prints deny entries as a table.
func denyTable(w io.Writer, es []admin.DenyJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tKEY\tVALUE\tCIDR\tREASON\tACTOR\tCREATED")
	for _, e := range es {
		created := "-"
		if e.CreatedAt != nil {
			created = e.CreatedAt.Format("2006-01-02T15:04:05Z07:00")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Domain, e.Key, dash(e.Value), dash(e.CIDR), dash(e.Reason), dash(e.Actor), created)
	}
	return tw.Flush()
}
