package admin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/tenant"
)

// TestOverrideSpec: an override's limit is a rules.Spec inside
// OverrideJSON: its answer keeps the wire of before (requests_per_unit
// always, calendar a boolean), and a body giving a rate_limit field an
// override does not take is refused naming it.
func TestOverrideSpec(t *testing.T) {
	o := tenant.Override{Domain: "api", Descriptor: "d", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Window: 31 * 24 * time.Hour},
		Unit: "month", Calendar: true}
	b, err := json.Marshal(overrideJSON(o))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"domain":"api","descriptor":"d","requests_per_unit":0,"algorithm":"fixed_window","calendar":true}`; string(b) != want {
		t.Errorf("answer %s, want %s", b, want)
	}
	for _, tc := range []struct{ body, field, msg string }{
		{`{"tier":"pro","overrides":[{"domain":"api","descriptor":"","requests_per_unit":1,"unit":"minute","placement":"hybrid"}]}`,
			"overrides[0].placement", "not allowed in an override"},
		{`{"tier":"pro","overrides":[{"domain":"api","descriptor":"","requests_per_unit":1,"unit":"fortnight"}]}`,
			"overrides[0].unit", `unknown unit "fortnight"`},
		{`{"tier":"pro","overrides":[{"domain":"api","descriptor":"","requests_per_unit":1,"unit":"minute","window":"1m"}]}`,
			"overrides[0].window", "give unit or window, not both"},
		{`{"tier":"pro","overrides":[{"domain":"api","descriptor":"","requests_per_unit":1,"unit":"minute","algorithm":"concurrency"}]}`,
			"overrides[0].algorithm", "concurrency is not available for an override"},
	} {
		_, err := DecodeQuota([]byte(tc.body), "acme")
		found := false
		for _, f := range asFieldErrors(err) {
			found = found || (f.Field == tc.field && strings.Contains(f.Msg, tc.msg))
		}
		if !found {
			t.Errorf("DecodeQuota(%s) = %v, want %s: %s", tc.body, err, tc.field, tc.msg)
		}
	}
	rec, err := DecodeQuota([]byte(`{"tier":"pro","overrides":[{"domain":"api","descriptor":"","requests_per_unit":7,"window":"90s","calendar":true}]}`), "acme")
	if err != nil || len(rec.Overrides) != 1 || rec.Overrides[0].Written == nil || rec.Overrides[0].Written.Window != "90s" || rec.Overrides[0].Written.RequestsPerUnit != 7 {
		t.Errorf("DecodeQuota = %+v, %v; want one override written as 7 per 90s (calendar ignored in requests)", rec, err)
	}
}

// TestSampleLimitSpec: a sampled descriptor's own limit is a rules.Spec
// with the wire of before, and Sampled checks it with rules.RequestLimit.
func TestSampleLimitSpec(t *testing.T) {
	var s SampleJSON
	body := `{"size":1,"every":1,"requests":[{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":7,"unit":"Hour"}}]}]}`
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	got, err := s.Sampled()
	if err != nil || len(got) != 1 || got[0].Request.Descriptors[0].Limit == nil || *got[0].Request.Descriptors[0].Limit != (service.LimitOverride{RequestsPerUnit: 7, Unit: "hour"}) {
		t.Fatalf("Sampled = %+v, %v; want one descriptor limited 7 per hour", got, err)
	}
	if b, _ := json.Marshal(s.Requests[0].Descriptors[0].Limit); string(b) != `{"requests_per_unit":7,"unit":"Hour"}` {
		t.Errorf("limit encodes as %s", b)
	}
	s.Requests[0].Descriptors[0].Limit.Unit = "fortnight"
	if _, err := s.Sampled(); err == nil || !strings.Contains(err.Error(), `requests[0].descriptors[0].limit.unit: unknown unit "fortnight"`) {
		t.Errorf("Sampled with unit fortnight = %v, want the unit named", err)
	}
}
