package service_test

import (
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/service"
)

// TestReasons: the engine's reasons follow the stores' and have the names
// sluice.Reason gives them.
func TestReasons(t *testing.T) {
	for _, tc := range []struct {
		r    sluice.Reason
		want string
	}{
		{sluice.ReasonAllowed, "allowed"},
		{sluice.ReasonLimited, "limited"},
		{sluice.ReasonCostTooHigh, "cost_too_high"},
		{service.ReasonPenalty, "penalty"},
		{service.ReasonDenyList, "deny_list"},
		{service.ReasonUnknownModel, "unknown_model"},
		{service.ReasonUnknownModel + 1, "unknown"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("Reason(%d).String() = %q, want %q", tc.r, got, tc.want)
		}
	}
}
