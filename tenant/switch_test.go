package tenant

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

// TestSwitchLevels: the switch in force over a rule is the strongest of
// its own, its domain's and the global one (off > shadow > on).
func TestSwitchLevels(t *testing.T) {
	on, off, shadow := rules.SwitchOn, rules.SwitchOff, rules.SwitchShadow
	tests := []struct {
		rule, domain, global rules.Switch
		want                 rules.Switch
	}{
		{on, on, on, on},
		{off, on, on, off},
		{on, off, on, off},
		{on, on, off, off},
		{shadow, on, on, shadow},
		{on, shadow, on, shadow},
		{on, on, shadow, shadow},
		{off, shadow, on, off},
		{shadow, off, on, off},
		{on, shadow, off, off},
		{shadow, on, off, off},
		{shadow, shadow, shadow, shadow},
	}
	for i, tt := range tests {
		var sws []RuleSwitch
		for _, s := range []RuleSwitch{{Domain: "d", Rule: "r", State: tt.rule}, {Domain: "d", State: tt.domain}, {State: tt.global}} {
			if s.State != on {
				sws = append(sws, s)
			}
		}
		snap := NewSnapshot(nil, sws, time.Now())
		if got := snap.Switch("d", "r"); got != tt.want {
			t.Errorf("%d: rule %v, domain %v, global %v: Switch = %v, want %v", i, tt.rule, tt.domain, tt.global, got, tt.want)
		}
		// Another domain sees only the global switch.
		if got := snap.Switch("other", "r"); got != tt.global {
			t.Errorf("%d: Switch(other, r) = %v, want the global %v", i, got, tt.global)
		}
	}
}
