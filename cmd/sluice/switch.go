package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

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
		fmt.Fprintln(w, "\nset and clear return once the change is in force on the instance that took it (its")
		fmt.Fprintln(w, "/debug/rules shows what the database holds), waiting up to --wait; the other instances")
		fmt.Fprintln(w, "sharing the database follow on PostgreSQL's notification, at the latest at their next")
		fmt.Fprintln(w, "full reload (--tenants-resync, 1m by default).")
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
	var wait time.Duration
	switch action {
	case "set", "clear":
		fs.BoolVar(&global, "global", false, "the switch over every rule")
		fs.StringVar(&domain, "domain", "", "the domain (alone: the switch over every rule of the domain)")
		fs.StringVar(&rule, "rule", "", "the rule ID, as /debug/rules lists it (with --domain)")
		if action == "set" {
			fs.StringVar(&state, "state", "", "off (enforce nothing) or shadow (count, never deny); required")
		}
		fs.DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the change to be in force on the instance that took it (0: return once the database has it)")
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
	what := "switch " + action
	out, _, err := ac.do(ctx, getenv, what, http.MethodPut, "switches", body)
	if err != nil {
		return err
	}
	if err := printAnswer(stdout, what, *output, out, func(w io.Writer, got admin.SwitchJSON) error {
		return switchTable(w, []admin.SwitchJSON{got})
	}); err != nil {
		return err
	}
	note := stdout
	if *output == "json" {
		note = stderr // stdout is the answer, for scripts
	}
	if wait <= 0 {
		fmt.Fprintln(note, "stored; in force on each instance once it has PostgreSQL's notification (at the latest at its next --tenants-resync, 1m by default)")
		return nil
	}
	if err := waitSwitchesInForce(ctx, &ac, getenv, what, wait, 50*time.Millisecond); err != nil {
		return err
	}
	fmt.Fprintln(note, "in force on this instance; other instances follow on PostgreSQL's notification (at the latest at their next --tenants-resync, 1m by default)")
	return nil
}

// switchRank orders switch states by strength: the strongest switch over a
// rule applies (off, then shadow).
var switchRank = map[string]int{"": 0, "on": 0, "shadow": 1, "off": 2}

// waitSwitchesInForce polls, every poll and for up to wait, until the
// rules of the instance behind ac (/debug/rules: the switch in force over
// each rule) show what the database holds (GET /admin/v1/switches: each
// rule's strongest switch, global, its domain's or its own). Both are read
// again each round, so a concurrent change does not make it wait for a
// state that no longer is.
func waitSwitchesInForce(ctx context.Context, ac *adminClient, getenv env, what string, wait, poll time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var differ string
	for {
		ok, d, err := switchesInForce(ctx, ac, getenv, what)
		switch {
		case ok:
			return nil
		case err != nil && ctx.Err() == nil:
			return err
		}
		if d != "" {
			differ = d
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: stored, but not yet in force on the instance at --admin-url after --wait %s (%s); it follows on PostgreSQL's notification or its next --tenants-resync", what, wait, differ)
		case <-time.After(poll):
		}
	}
}

// switchesInForce reads the database's switches and the instance's rules
// once; differ names the first rule whose switch differs.
func switchesInForce(ctx context.Context, ac *adminClient, getenv env, what string) (ok bool, differ string, err error) {
	out, _, err := ac.do(ctx, getenv, what, http.MethodGet, "switches", nil)
	if err != nil {
		return false, "", err
	}
	var list struct{ Switches []admin.SwitchJSON }
	if err := decodeAnswer(out, &list); err != nil {
		return false, "", fmt.Errorf("%s: the switches are not what this version expects: %w", what, err)
	}
	stored := map[[2]string]string{}
	for _, s := range list.Switches {
		stored[[2]string{s.Domain, s.Rule}] = s.State
	}
	out, _, err = ac.send(ctx, getenv, what, http.MethodGet, "/debug/rules", nil)
	if err != nil {
		return false, "", err
	}
	var rs struct{ Rules []ruleInForce }
	if err := decodeAnswer(out, &rs); err != nil {
		return false, "", fmt.Errorf("%s: /debug/rules is not what this version expects: %w", what, err)
	}
	for _, r := range rs.Rules {
		want := "on"
		for _, k := range [][2]string{{"", ""}, {r.Domain, ""}, {r.Domain, r.ID}} {
			if s, ok := stored[k]; ok && switchRank[s] > switchRank[want] {
				want = s
			}
		}
		if got := cmp.Or(r.Switch, "on"); got != want {
			return false, fmt.Sprintf("rule %s/%s is %s, the database says %s", r.Domain, r.ID, got, want), nil
		}
	}
	return true, "", nil
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
