package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// TestQuotaDomainFlags: each --override belongs to the --domain before it;
// one before any --domain is refused, naming the flag to give.
func TestQuotaDomainFlags(t *testing.T) {
	parse := func(args ...string) (quotaOverrides, error) {
		var ovs quotaOverrides
		fs := flag.NewFlagSet("quota set", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Var(domainFlag{&ovs}, "domain", "")
		fs.Var(&ovs, "override", "")
		return ovs, fs.Parse(args)
	}
	ovs, err := parse("--domain", "api", "--override", "=7/minute", "--override", "endpoint:POST /a=b=5/90s",
		"--domain", "billing", "--override", "=5000/month", "--override", "=50000")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ domain, desc, unit, window string }{
		{"api", "", "minute", ""}, {"api", "endpoint:POST /a=b", "", "90s"}, {"billing", "", "month", ""},
		{"billing", "", "", ""}, // N alone: the rule's own period (a calendar stays a calendar)
	}
	if len(ovs.list) != len(want) {
		t.Fatalf("got %d overrides, want %d", len(ovs.list), len(want))
	}
	for i, w := range want {
		o := ovs.list[i]
		if o.Domain != w.domain || o.Descriptor != w.desc || o.Unit != w.unit || o.Window != w.window {
			t.Errorf("override %d = %+v, want %+v", i, o, w)
		}
	}
	if _, err := parse("--override", "=7/minute"); err == nil || !strings.Contains(err.Error(), "--domain") {
		t.Errorf("an override before any --domain: %v, want an error naming --domain", err)
	}
	for _, bad := range []string{"=7/", "=x", "=-1/minute"} {
		if _, err := parse("--domain", "api", "--override", bad); err == nil {
			t.Errorf("--override %q was accepted", bad)
		}
	}
	if _, err := parse("--domain", ""); err == nil {
		t.Error("an empty --domain was accepted")
	}
}
