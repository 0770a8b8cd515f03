package rules

import (
	"reflect"
	"strings"
	"testing"
)

// The envoyproxy/ratelimit descriptor options Sluice acts on (quota_mode,
// metadata) and Sluice's settle are read into the rule.
func TestEnvoyDescriptorOptions(t *testing.T) {
	const file = `domain: ai
descriptors:
  - key: tenant
    quota_mode: true
    metadata:
      plan: {name: gold, seats: 3}
      tags: [a, true, 1.5]
    rate_limit: {unit: day, requests_per_unit: 1000, settle: after}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10, settle: BEFORE}
`
	snap, err := Parse("ai.yaml", []byte(file), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tenant := snap.Match("ai", []Entry{{Key: "tenant", Value: "acme"}})
	user := snap.Match("ai", []Entry{{Key: "user", Value: "bob"}})
	if tenant == nil || user == nil {
		t.Fatalf("Match = %v, %v; want both rules", tenant, user)
	}
	if !tenant.QuotaMode || !tenant.SettleAfter {
		t.Errorf("tenant rule: QuotaMode %v, SettleAfter %v; want true, true", tenant.QuotaMode, tenant.SettleAfter)
	}
	want := map[string]any{"plan": map[string]any{"name": "gold", "seats": 3.0}, "tags": []any{"a", true, 1.5}}
	if !reflect.DeepEqual(tenant.Metadata, want) {
		t.Errorf("tenant metadata = %#v, want %#v", tenant.Metadata, want)
	}
	if user.QuotaMode || user.SettleAfter || user.Metadata != nil {
		t.Errorf("user rule: QuotaMode %v, SettleAfter %v, Metadata %v; want none", user.QuotaMode, user.SettleAfter, user.Metadata)
	}
}

// TestMergeDomains: with MergeDomains, files sharing a domain merge (a rule
// of one may replace a rule of the other); a top-level descriptor in two of
// them is an error at file:line; without it, a shared domain is an error.
func TestMergeDomains(t *testing.T) {
	snap, err := LoadDir("testdata/merge", Options{MergeDomains: true})
	if err != nil {
		t.Fatalf("LoadDir(merge) = %v", err)
	}
	if ip, user := snap.Match("edge", []Entry{{Key: "ip", Value: "1"}}), snap.Match("edge", []Entry{{Key: "user", Value: "u"}}); ip == nil || user == nil ||
		user.File != "testdata/merge/b.yaml" || len(user.Replaces) != 1 {
		t.Fatalf("merged rules: ip %v, user %v; want both, user from b.yaml replacing per_ip", ip, user)
	}
	if _, err := LoadDir("testdata/merge", Options{}); err == nil || !strings.Contains(err.Error(), `testdata/merge/b.yaml:1: domain: domain "edge" is already defined in testdata/merge/a.yaml:1`) {
		t.Errorf("LoadDir(merge) without MergeDomains = %v, want the duplicate domain", err)
	}
	_, err = LoadDir("testdata/mergebad", Options{MergeDomains: true})
	want := `testdata/mergebad/b.yaml:5: descriptors[1]: descriptor ip is also at the top of domain "edge" in testdata/mergebad/a.yaml:3 (merged domains)`
	if err == nil || err.Error() != want {
		t.Errorf("LoadDir(mergebad) = %v, want %s", err, want)
	}
}
