package rules

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

const tieredFile = `domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 100
      tiers:
        pro: {requests_per_unit: 1000}
        enterprise: {requests_per_unit: 50, unit: second, algorithm: gcra, burst: 80}
    descriptors:
      - key: endpoint
        value: POST /api/v1/orders
        rate_limit: {unit: minute, requests_per_unit: 20, tiers: {free: {requests_per_unit: 5, window: 90s}}}
      - key: endpoint
        rate_limit: {unit: hour, requests_per_unit: 7}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`

func TestTiers(t *testing.T) {
	snap, err := Parse("api.yaml", []byte(tieredFile), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.TenantKey("api"); got != "api_key" {
		t.Errorf("TenantKey(api) = %q, want api_key", got)
	}
	if got := snap.TenantKey("edge"); got != "" {
		t.Errorf("TenantKey(edge) = %q, want empty", got)
	}
	top := snap.Match("api", []Entry{{"api_key", "k1"}})
	orders := snap.Match("api", []Entry{{"api_key", "k1"}, {"endpoint", "POST /api/v1/orders"}})
	other := snap.Match("api", []Entry{{"api_key", "k1"}, {"endpoint", "GET /"}})
	addr := snap.Match("api", []Entry{{"remote_address", "1.2.3.4"}})
	for _, tc := range []struct {
		name  string
		r     *Rule
		depth int
		path  string
		tiers [NumTiers]*sluice.Limit
	}{
		{"top", top, 1, "", [NumTiers]*sluice.Limit{
			TierPro:        {Algorithm: sluice.FixedWindow, Quota: 1000, Window: time.Minute},
			TierEnterprise: {Algorithm: sluice.GCRA, Quota: 50, Window: time.Second, Burst: 80},
		}},
		{"orders", orders, 1, "endpoint:POST /api/v1/orders", [NumTiers]*sluice.Limit{
			TierFree: {Algorithm: sluice.FixedWindow, Quota: 5, Window: 90 * time.Second},
		}},
		{"other", other, 1, "endpoint", [NumTiers]*sluice.Limit{}},
		{"addr", addr, 0, "", [NumTiers]*sluice.Limit{}},
	} {
		if tc.r == nil {
			t.Fatalf("%s: no rule matched", tc.name)
		}
		if tc.r.TenantDepth != tc.depth || tc.r.TenantPath != tc.path {
			t.Errorf("%s: TenantDepth, TenantPath = %d, %q; want %d, %q", tc.name, tc.r.TenantDepth, tc.r.TenantPath, tc.depth, tc.path)
		}
		for tier := range NumTiers {
			got, want := tc.r.Tiers[tier], tc.tiers[tier]
			switch {
			case got == nil && want == nil:
			case got == nil || want == nil:
				t.Errorf("%s: tier %v = %v, want %v", tc.name, tier, got, want)
			case got.Limit != *want:
				t.Errorf("%s: tier %v limit = %v, want %v", tc.name, tier, got.Limit, *want)
			}
		}
	}
	if u := top.Tiers[TierPro].Unit; u != "minute" {
		t.Errorf("pro tier inherits unit: got %q, want minute", u)
	}
	if u := orders.Tiers[TierFree].Unit; u != "" {
		t.Errorf("a tier with window has no envoy unit: got %q, want empty", u)
	}
}

func TestParseTier(t *testing.T) {
	for tier := range NumTiers {
		got, err := ParseTier(tier.String())
		if err != nil || got != tier {
			t.Errorf("ParseTier(%q) = %v, %v; want %v, nil", tier.String(), got, err, tier)
		}
	}
	if _, err := ParseTier("gold"); err == nil {
		t.Error(`ParseTier("gold") = nil error, want one`)
	}
}
