package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestCheckSemantics: what /v1/check says means what it says. A top-level
// "hits": 0 looks without charging, as a descriptor's own 0 does; an
// unlimited rule has no "remaining"; a cost no limit can ever admit is
// refused with reason cost_too_high and no Retry-After anywhere.
func TestCheckSemantics(t *testing.T) {
	h, err := New(Options{Checker: newEngine(t, nil), ResponseHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	check := func(body string) (CheckResponse, map[string]any, http.Header) {
		t.Helper()
		code, hdr, out := do(t, h, "POST", "/v1/check", body)
		if code != 200 {
			t.Fatalf("POST /v1/check %s: status %d, body %s", body, code, out)
		}
		var cr CheckResponse
		var raw map[string]any
		if err := json.Unmarshal([]byte(out), &cr); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatal(err)
		}
		return cr, raw, hdr
	}
	addr := `{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}`

	// Looks, at the top level and per descriptor, charge nothing.
	for i := 0; i < 3; i++ {
		cr, _, _ := check(`{"domain":"edge","hits":0,"descriptors":[` + addr + `]}`)
		if !cr.Allowed || cr.Statuses[0].Remaining != 2 {
			t.Fatalf("look %d: allowed %v remaining %d, want true and 2 (a look charges nothing)", i, cr.Allowed, cr.Statuses[0].Remaining)
		}
	}
	cr, _, _ := check(`{"domain":"edge","descriptors":[` + addr + `]}`)
	if cr.Statuses[0].Remaining != 1 {
		t.Errorf("absent hits: remaining %d, want 1 (charged 1)", cr.Statuses[0].Remaining)
	}

	// Unlimited: no remaining, no reset; a limited status shows remaining 0.
	_, raw, _ := check(`{"domain":"edge","descriptors":[{"entries":[{"key":"ldap","value":"x"}]},{"entries":[{"key":"nothing"}]}]}`)
	for i, s := range raw["statuses"].([]any) {
		st := s.(map[string]any)
		if _, has := st["remaining"]; has {
			t.Errorf("status %d (%v): has remaining, want none without a limit", i, st)
		}
	}
	cr, raw, _ = check(`{"domain":"edge","hits":1,"descriptors":[` + addr + `]}`)
	if st := raw["statuses"].([]any)[0].(map[string]any); st["remaining"] != 0.0 || cr.Allowed != true {
		t.Errorf("last hit: status %v, want remaining 0 present", st)
	}

	// Cost too high: reason everywhere, no Retry-After, no retry_after_ms.
	cr, raw, hdr := check(`{"domain":"edge","hits":3,"descriptors":[{"entries":[{"key":"remote_address","value":"5.6.7.8"}]}]}`)
	st := raw["statuses"].([]any)[0].(map[string]any)
	if cr.Allowed || cr.Reason != "cost_too_high" || cr.Statuses[0].Reason != "cost_too_high" || st["retry_after_ms"] != nil {
		t.Errorf("cost 3 of quota 2: %+v, want refused with reason cost_too_high and no retry_after_ms", cr)
	}
	if ra := hdr.Get("Retry-After"); ra != "" {
		t.Errorf("cost too high: Retry-After %q, want none", ra)
	}
	if rl := hdr.Get("RateLimit"); !strings.Contains(rl, "r=2") {
		t.Errorf("cost too high: RateLimit %q, want r=2 (what is left, as the body says)", rl)
	}

	// Limited: reason limited, Retry-After and retry_after_ms agree.
	for i := 0; i < 3; i++ {
		cr, _, hdr = check(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"9.9.9.9"}]}]}`)
	}
	if cr.Allowed || cr.Reason != "limited" || cr.Statuses[0].Reason != "limited" || cr.Statuses[0].RetryAfterMs <= 0 || hdr.Get("Retry-After") == "" {
		t.Errorf("third hit of 2: %+v, Retry-After %q; want refused, reason limited, with retry times", cr, hdr.Get("Retry-After"))
	}
}
