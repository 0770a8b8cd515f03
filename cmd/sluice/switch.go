package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"github.com/sluice-rl/sluice/server/admin"
)

func init() {
	register("switch", "kill switches of a rule, a domain or every rule, through the admin API: sluice switch list|set|clear", runSwitch)
}

func runSwitch(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "Usage: sluice switch list [--output table|json]")
		fmt.Fprintln(w, "       sluice switch set (--global | --domain D [--rule ID]) --state off|shadow [--output table|json]")
		fmt.Fprintln(w, "       sluice switch clear (--global | --domain D [--rule ID])")
		fmt.Fprintln(w, "\nA switch turns a rule, every rule of a domain (--domain without --rule) or every rule")
		fmt.Fprintln(w, "(--global) off (enforce nothing) or into shadow mode (count, never deny), on every instance")
		fmt.Fprintln(w, "sharing the PostgreSQL database. The strongest switch over a rule applies (off, then shadow).")
		fmt.Fprintln(w, "clear turns the switch back on. Every change is audited. Talks to a server's admin API")
		fmt.Fprintln(w, "(--admin-url, SLUICE_ADMIN_URL) with the bearer token in SLUICE_ADMIN_TOKEN or --token-file.")
	}
	action, ok, err := splitAction("switch", args, stderr, usage)
	if !ok {
		return err
	}
	fs := newFlagSet("switch "+action, stderr)
	var ac adminClient
	ac.flags(fs)
	var domain, rule, state string
	var global bool
	switch action {
	case "set", "clear":
		fs.BoolVar(&global, "global", false, "the switch over every rule")
		fs.StringVar(&domain, "domain", "", "the domain (alone: the switch over every rule of the domain)")
		fs.StringVar(&rule, "rule", "", "the rule ID, as /debug/rules lists it (with --domain)")
		if action == "set" {
			fs.StringVar(&state, "state", "", "off (enforce nothing) or shadow (count, never deny); required")
		}
	case "list":
	default:
		usage(stderr)
		return fmt.Errorf("switch: unknown action %q (want list, set or clear): %w", action, errUsage)
	}
	output := outputFlag(fs)
	fs.Usage = func() { usage(stderr); fmt.Fprintln(stderr, "\nFlags:"); fs.PrintDefaults() }
	if _, err := parseAdminCommand(fs, args[1:], getenv, 0); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := checkOutput("switch "+action, *output); err != nil {
		return err
	}
	if action == "list" {
		out, _, err := ac.do(ctx, getenv, "switch list", http.MethodGet, "switches", nil)
		if err != nil {
			return err
		}
		return printAnswer(stdout, "switch list", *output, out, func(w io.Writer, list struct{ Switches []admin.SwitchJSON }) error {
			return switchTable(w, list.Switches)
		})
	}
	req := admin.SwitchJSON{Domain: domain, Rule: rule, State: state}
	switch {
	case global && (domain != "" || rule != ""):
		return fmt.Errorf("switch %s: --global goes without --domain and --rule: %w", action, errUsage)
	case global:
		req.Scope = "global"
	case domain == "":
		return fmt.Errorf("switch %s: give --global, or --domain (with --rule for one rule): %w", action, errUsage)
	case rule == "":
		req.Scope = "domain"
	default:
		req.Scope = "rule"
	}
	if action == "clear" {
		req.State = "on"
	} else if state != "off" && state != "shadow" {
		return fmt.Errorf("switch set: --state: %q (want off or shadow; clear turns a switch back on): %w", state, errUsage)
	}
	body, _ := json.Marshal(req)
	out, _, err := ac.do(ctx, getenv, "switch "+action, http.MethodPut, "switches", body)
	if err != nil {
		return err
	}
	return printAnswer(stdout, "switch "+action, *output, out, func(w io.Writer, got admin.SwitchJSON) error {
		return switchTable(w, []admin.SwitchJSON{got})
	})
}

// switchTable prints switches as a table.
func switchTable(w io.Writer, sws []admin.SwitchJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tDOMAIN\tRULE\tSTATE\tUPDATED")
	for _, s := range sws {
		scope := s.Scope
		if scope == "" {
			scope = admin.SwitchScope(s.Domain, s.Rule)
		}
		updated := "-"
		if s.UpdatedAt != nil {
			updated = s.UpdatedAt.Format("2006-01-02T15:04:05Z07:00")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", scope, dash(s.Domain), dash(s.Rule), s.State, updated)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
