package admin

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/tenant"
)

// FuzzDecodeQuota: any body decodes to a record or to field errors, never a
// panic; a decoded record's fields are within their bounds.
func FuzzDecodeQuota(f *testing.F) {
	for _, s := range []string{
		`{"tier": "enterprise", "overrides": [{"descriptor": "endpoint:POST /api/v1/orders", "requests_per_unit": 500, "unit": "minute"}], "effective_at": "2026-01-01T00:00:00Z", "expires_at": null}`,
		`{"tier": "pro", "overrides": [{"descriptor": "", "requests_per_unit": 5, "window": "90s", "algorithm": "gcra", "burst": 10}]}`,
		`{"tier": "gold"}`, `{}`, `[]`, `{"tier": "pro"} x`, `{"tier": "pro", "overrides": [{"requests_per_unit": -1}]}`,
		strings.Repeat("[", 40), strings.Repeat(`{"a":`, 40), `{"tier":"pro","overrides":[` + strings.Repeat("[", 30) + `]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, err := DecodeQuota(body, "t")
		if err != nil {
			var fe fieldErrors
			if !errors.As(err, &fe) || len(fe) == 0 {
				t.Fatalf("error %T %v, want field errors", err, err)
			}
			return
		}
		if len(rec.Overrides) > tenant.MaxOverrides {
			t.Fatalf("%d overrides", len(rec.Overrides))
		}
		for _, o := range rec.Overrides {
			// Window 0 (neither unit nor window) is left to tenant.Prepare.
			if o.Limit.Quota < 0 || o.Limit.Burst < 0 || o.Limit.Window < 0 || (o.Limit.Window == 0 && o.Unit != "") {
				t.Fatalf("override out of bounds: %+v", o)
			}
		}
	})
}

// FuzzDecodeSwitch: never a panic; errors are field errors.
func FuzzDecodeSwitch(f *testing.F) {
	for _, s := range []string{`{"domain":"api","rule":"remote_address","state":"off"}`, `{"state":"x"}`, `null`, `{"domain":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, _, _, err := DecodeSwitch(body); err != nil {
			var fe fieldErrors
			if !errors.As(err, &fe) || len(fe) == 0 {
				t.Fatalf("error %T %v, want field errors", err, err)
			}
		}
	})
}

// FuzzDecodeReset: never a panic; errors are field errors; a decoded body
// names a valid tenant or one bounded descriptor, never both.
func FuzzDecodeReset(f *testing.F) {
	for _, s := range []string{
		`{"tenant":"acme"}`,
		`{"domain":"api","descriptor":[{"key":"api_key","value":"acme"},{"key":"endpoint","value":"POST /api/v1/orders"}]}`,
		`{"tenant":"acme","domain":"api"}`, `{"domain":"api","descriptor":[{"key":""}]}`, `{"descriptor":[]}`, `{}`, `null`, `{"tenant":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rr, req, err := DecodeReset(body)
		if err != nil {
			var fe fieldErrors
			if !errors.As(err, &fe) || len(fe) == 0 {
				t.Fatalf("error %T %v, want field errors", err, err)
			}
			return
		}
		switch {
		case req == nil:
			if tenant.ValidTenant(rr.Tenant) != nil {
				t.Fatalf("decoded an invalid tenant %q", rr.Tenant)
			}
		case rr.Tenant != "" || req.Domain == "" || len(req.Descriptors) != 1 || len(req.Descriptors[0].Entries) == 0:
			t.Fatalf("decoded %+v into %+v", rr, req)
		}
	})
}

// FuzzDecodeAuditQuery: any query string decodes to a bounded query or to
// field errors, never a panic.
func FuzzDecodeAuditQuery(f *testing.F) {
	for _, s := range []string{
		"tenant=acme&actor=ops&since=2026-11-01T00:00:00Z&until=2026-12-01T00:00:00Z&limit=100&cursor=37",
		"limit=0", "limit=1001", "cursor=-1", "since=yesterday", "tenant=a%01b", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := DecodeAuditQuery(v.Get)
		if err != nil {
			var fe fieldErrors
			if !errors.As(err, &fe) || len(fe) == 0 {
				t.Fatalf("error %T %v, want field errors", err, err)
			}
			return
		}
		if q.Limit < 1 || q.Limit > tenant.MaxAuditPage || q.Before < 0 || len(q.Actor) > maxActorLen || len(q.Tenant) > tenant.MaxTenantLen {
			t.Fatalf("query out of bounds: %+v", q)
		}
		if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
			t.Fatalf("until %v not after since %v", q.Until, q.Since)
		}
	})
}
