package tenant

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

func TestPrepare(t *testing.T) {
	rs, err := rules.Parse("api.yaml", []byte(testRules+`
  - key: api_key
    value: cal
    rate_limit: {calendar: month, requests_per_unit: 1000}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	perMin := func(n int64) sluice.Limit { return sluice.Limit{Quota: n, Window: time.Minute} }
	for _, tc := range []struct {
		name   string
		rec    Record
		fields []string // the invalid fields, in order; none: valid
		check  func(t *testing.T, rec Record)
	}{
		{name: "algorithm from the rule", rec: Record{Tenant: "a", Tier: rules.TierPro, EffectiveAt: t0,
			Overrides: []Override{{Domain: "api", Descriptor: "endpoint:POST /orders", Limit: perMin(5), Unit: "minute"}}},
			check: func(t *testing.T, rec Record) {
				if o := rec.Overrides[0]; o.Limit.Algorithm != sluice.FixedWindow || !o.EffectiveAt.Equal(t0) {
					t.Errorf("override %+v, want fixed_window effective at the record's time", o)
				}
			}},
		{name: "no unit for a rule without a calendar", rec: Record{Tenant: "a", Overrides: []Override{{Domain: "api", Descriptor: "", Limit: sluice.Limit{Quota: 5}}}},
			fields: []string{"overrides[0].unit"}},
		{name: "unknown descriptor", rec: Record{Tenant: "a", Overrides: []Override{{Domain: "api", Descriptor: "nope", Limit: perMin(1), Unit: "minute"}}},
			fields: []string{"overrides[0].descriptor"}},
		{name: "concurrency rule", rec: Record{Tenant: "a", Overrides: []Override{{Domain: "api", Descriptor: "lease", Limit: perMin(1), Unit: "minute"}}},
			fields: []string{"overrides[0].descriptor"}},
		{name: "duplicate and bad limit", rec: Record{Tenant: "a", Overrides: []Override{
			{Domain: "api", Descriptor: "", Limit: perMin(1), Unit: "minute"},
			{Domain: "api", Descriptor: "", Limit: perMin(2), Unit: "minute"},
			{Domain: "api", Descriptor: "endpoint:POST /orders", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute, Burst: 3}, Unit: "minute"},
		}}, fields: []string{"overrides[1].descriptor", "overrides[2].burst"}},
		{name: "expiry before effect", rec: Record{Tenant: "a", EffectiveAt: t0, ExpiresAt: t0}, fields: []string{"expires_at"}},
		{name: "bad tenant", rec: Record{Tenant: "a\x00b"}, fields: []string{"tenant"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.rec
			err := Prepare(&rec, rs)
			var got []string
			for _, e := range unjoin(err) {
				var fe *FieldError
				if errors.As(e, &fe) {
					got = append(got, fe.Field)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.fields, ",") {
				t.Fatalf("Prepare: invalid fields %v (%v), want %v", got, err, tc.fields)
			}
			if err == nil && tc.check != nil {
				tc.check(t, rec)
			}
		})
	}
}

func TestPrepareCalendar(t *testing.T) {
	rs, err := rules.Parse("api.yaml", []byte(`domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {calendar: month, requests_per_unit: 1000}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := Record{Tenant: "a", Overrides: []Override{{Domain: "api", Descriptor: "", Limit: sluice.Limit{Quota: 1_000_000}, RequestsPerUnit: 1_000_000}}}
	if err := Prepare(&rec, rs); err != nil {
		t.Fatal(err)
	}
	o := rec.Overrides[0]
	if !o.Calendar || o.Unit != "month" || o.Limit.Algorithm != sluice.FixedWindow {
		t.Errorf("override %+v, want the rule's calendar", o)
	}
	r := rs.Match("api", []rules.Entry{{Key: "api_key", Value: "a"}})
	tl, _ := NewSnapshot([]Record{rec}, nil, time.Now()).Resolve(r, []rules.Entry{{Key: "api_key", Value: "a"}}, time.Now)
	if tl == nil || !tl.Calendar || tl.Limit.Quota != 1_000_000 {
		t.Errorf("resolved %+v, want a calendar limit of 10^6", tl)
	}
}
