package service

import (
	"testing"
)

// TestDenyList: a request naming a deny-listed entry is refused with
// reason deny_list, and none of its counters is charged.
func TestDenyList(t *testing.T) {
	h := newHarness(t, `domain: edge
deny:
  - {key: ip, cidr: 10.0.0.0/8}
descriptors:
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`, DefaultConfig())
	resp := h.check(t, Request{Domain: "edge", Descriptors: []Descriptor{desc("user", "u"), desc("ip", "10.2.3.4")}})
	if resp.OverallCode != CodeOverLimit || resp.Statuses[0].Code != CodeOK || resp.Statuses[1].Code != CodeOverLimit ||
		resp.Statuses[1].Result.Reason != ReasonDenyList {
		t.Fatalf("deny-listed address: %+v, want OVER_LIMIT with reason deny_list on descriptor 1", resp)
	}
	// user's counter was not charged: two more fit.
	allowed := 0
	for range 3 {
		if h.check(t, Request{Domain: "edge", Descriptors: []Descriptor{desc("user", "u")}}).OverallCode == CodeOK {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("user after the deny-listed request: %d of 3 allowed, want 2 (nothing charged)", allowed)
	}
	if got := h.check(t, Request{Domain: "edge", Descriptors: []Descriptor{desc("ip", "11.0.0.1")}}); got.OverallCode != CodeOK {
		t.Errorf("an address outside the range: %v, want OK", got.OverallCode)
	}
}
