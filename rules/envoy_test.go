package rules

import (
	"reflect"
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
