package rules

import (
	"strings"
	"testing"
	"time"
)

func TestPenaltyField(t *testing.T) {
	tests := []struct {
		limit   string
		want    time.Duration
		wantErr string
	}{
		{limit: "{unit: second, requests_per_unit: 1, penalty: 10m}", want: 10 * time.Minute},
		{limit: "{unit: second, requests_per_unit: 1}", want: 0},
		{limit: "{unit: second, requests_per_unit: 1, penalty: fortnight}", wantErr: `p.yaml:4: descriptors[0].rate_limit.penalty: want a duration such as 10m, got "fortnight"`},
		{limit: "{unit: second, requests_per_unit: 1, penalty: 10ms}", wantErr: "p.yaml:4: descriptors[0].rate_limit.penalty: 10ms: want 1s to 168h0m0s"},
		{limit: "{unit: second, requests_per_unit: 1, penalty: 200h}", wantErr: "rate_limit.penalty: 200h0m0s: want 1s to 168h0m0s"},
		{limit: "{unlimited: true, penalty: 1m}", wantErr: "rate_limit.penalty: not allowed with unlimited: true"},
		{limit: "{unit: second, requests_per_unit: 1, algorithm: concurrency, penalty: 1m}", wantErr: "rate_limit.penalty: not allowed with algorithm concurrency"},
		{limit: "{unit: second, requests_per_unit: 4, sub_counters: 2, penalty: 1m}", wantErr: "rate_limit.penalty: not allowed with sub_counters"},
		{limit: "{unit: second, requests_per_unit: 4, placement: hybrid, penalty: 1m}", wantErr: "rate_limit.penalty: not allowed with placement hybrid"},
	}
	for _, tt := range tests {
		y := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + tt.limit + "\n"
		s, err := Parse("p.yaml", []byte(y), Options{})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tt.limit, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.limit, err)
			continue
		}
		if got := s.Rules()[0].Penalty; got != tt.want {
			t.Errorf("%s: Penalty %v, want %v", tt.limit, got, tt.want)
		}
	}
}
