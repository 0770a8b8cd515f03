package rules

import (
	"testing"
)

func TestPlacement(t *testing.T) {
	src := []byte(`domain: placed
descriptors:
  - key: g
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: h
    rate_limit: {unit: minute, requests_per_unit: 600, placement: hybrid, algorithm: gcra}
  - key: l
    rate_limit: {unit: second, requests_per_unit: 5, placement: LOCAL}
  - key: s
    rate_limit: {unit: second, requests_per_unit: 1000, sub_counters: 8, placement: global}
`)
	snap, err := Parse("placed.yaml", src, Options{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		id   string
		want Placement
		sub  int
	}{
		{"g", PlacementGlobal, 0},
		{"h", PlacementHybrid, 0},
		{"l", PlacementLocal, 0},
		{"s", PlacementGlobal, 8},
	}
	for _, tc := range tests {
		var r *Rule
		for _, x := range snap.Rules() {
			if x.ID == tc.id {
				r = x
			}
		}
		if r == nil {
			t.Fatalf("no rule %s", tc.id)
		}
		if r.Placement != tc.want || r.SubCounters != tc.sub {
			t.Errorf("rule %s: placement %v, sub_counters %d; want %v, %d", tc.id, r.Placement, r.SubCounters, tc.want, tc.sub)
		}
	}
}
