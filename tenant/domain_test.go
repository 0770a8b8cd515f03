package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Two rule files whose tenant rules have the same path ("" : the rule at
// the tenant key): a per-minute API limit and a monthly calendar quota.
const twoDomains = `
domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: endpoint
        value: POST /orders
        rate_limit: {unit: minute, requests_per_unit: 20}
---
domain: billing
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {calendar: month, requests_per_unit: 1000}
`

func twoDomainRules(t *testing.T) *rules.Snapshot {
	t.Helper()
	dir := t.TempDir()
	for i, doc := range strings.Split(twoDomains, "---\n") {
		if err := os.WriteFile(filepath.Join(dir, []string{"api.yaml", "billing.yaml"}[i]), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := rules.LoadDir(dir, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOverrideScopedToDomain(t *testing.T) {
	rs := twoDomainRules(t)
	rec := Record{Tenant: "acme", Tier: rules.TierCustom, Overrides: []Override{
		{Domain: "api", Descriptor: "", Limit: sluice.Limit{Quota: 7, Window: time.Minute}, RequestsPerUnit: 7, Unit: "minute"},
	}}
	if err := Prepare(&rec, rs); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	snap := NewSnapshot([]Record{rec}, nil, time.Now())
	entries := []rules.Entry{{Key: "api_key", Value: "acme"}}
	api, billing := rs.Match("api", entries), rs.Match("billing", entries)
	if api == nil || billing == nil || api.TenantPath != billing.TenantPath {
		t.Fatalf("rules: api %v, billing %v; want two rules with one path", api, billing)
	}
	if tl, _ := snap.Resolve(api, entries, time.Now); tl == nil || tl.Limit.Quota != 7 {
		t.Errorf("api rule resolves to %+v, want the override of 7", tl)
	}
	if tl, _ := snap.Resolve(billing, entries, time.Now); tl != billing.Tiers[rules.TierCustom] {
		t.Errorf("billing rule resolves to %+v, want its own (custom tier) limit, untouched by api's override", tl)
	}
}

// TestOverrideAnyDomain: an override of every domain (a row kept from
// before domains, or the zero Domain) applies to the rules of its path in
// each domain, and an override naming the rule's domain beats it.
func TestOverrideAnyDomain(t *testing.T) {
	rs := twoDomainRules(t)
	entries := []rules.Entry{{Key: "api_key", Value: "acme"}}
	api, billing := rs.Match("api", entries), rs.Match("billing", entries)
	perMin := func(n int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Quota: n, Window: time.Minute}
	}
	for _, legacy := range []string{AnyDomain, ""} {
		snap := NewSnapshot([]Record{{Tenant: "acme", Tier: rules.TierCustom, Overrides: []Override{
			{Domain: legacy, Descriptor: "", Limit: perMin(3), RequestsPerUnit: 3, Unit: "minute"},
			{Domain: "api", Descriptor: "", Limit: perMin(9), RequestsPerUnit: 9, Unit: "minute"},
		}}}, nil, time.Now())
		if tl, _ := snap.Resolve(api, entries, time.Now); tl == nil || tl.Limit.Quota != 9 {
			t.Errorf("domain %q: api rule resolves to %+v, want its own domain's override of 9", legacy, tl)
		}
		if tl, _ := snap.Resolve(billing, entries, time.Now); tl == nil || tl.Limit.Quota != 3 {
			t.Errorf("domain %q: billing rule resolves to %+v, want the every-domain override of 3", legacy, tl)
		}
	}
}

func TestPrepareDomain(t *testing.T) {
	rs := twoDomainRules(t)
	perMin := sluice.Limit{Quota: 5, Window: time.Minute}
	for _, tc := range []struct {
		name  string
		ovs   []Override
		field string // the invalid field; "": valid
		msg   string
	}{
		{"same path in two domains", []Override{
			{Domain: "api", Descriptor: "", Limit: perMin, Unit: "minute"},
			{Domain: "billing", Descriptor: "", Limit: sluice.Limit{Quota: 5}}}, "", ""},
		{"no domain", []Override{{Descriptor: "", Limit: perMin, Unit: "minute"}}, "overrides[0].domain", "required"},
		{"every domain", []Override{{Domain: AnyDomain, Descriptor: "", Limit: perMin, Unit: "minute"}}, "overrides[0].domain", "name one domain"},
		{"unknown domain", []Override{{Domain: "nope", Descriptor: "", Limit: perMin, Unit: "minute"}}, "overrides[0].domain", `no domain "nope"`},
		{"long domain", []Override{{Domain: strings.Repeat("d", MaxDomainLen+1), Descriptor: "", Limit: perMin, Unit: "minute"}}, "overrides[0].domain", "longer than"},
		{"path of another domain", []Override{{Domain: "billing", Descriptor: "endpoint:POST /orders", Limit: perMin, Unit: "minute"}},
			"overrides[0].descriptor", `domain "billing" has no rule below its tenant key with the path "endpoint:POST /orders"`},
		{"duplicate in one domain", []Override{
			{Domain: "api", Descriptor: "", Limit: perMin, Unit: "minute"},
			{Domain: "api", Descriptor: "", Limit: perMin, Unit: "minute"}}, "overrides[1].descriptor", "is also overrides[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := Record{Tenant: "acme", Overrides: tc.ovs}
			err := Prepare(&rec, rs)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Prepare: %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("Prepare: %v; want field %s with %q", err, tc.field, tc.msg)
			}
		})
	}
}
