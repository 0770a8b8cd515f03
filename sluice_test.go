package sluice_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

func TestLimitValidate(t *testing.T) {
	tests := []struct {
		name  string
		limit sluice.Limit
		want  []string // substrings, one per expected problem; none = valid
	}{
		{"token bucket", sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 10, Window: time.Second, Burst: 20}, nil},
		{"90s fixed window", sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: 90 * time.Second}, nil},
		{"quota 0 blocks", sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 0, Window: time.Second}, nil},
		{"1ms window", sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Millisecond}, nil},
		{"no algorithm", sluice.Limit{Quota: 1, Window: time.Second}, []string{"algorithm:"}},
		{"zero window", sluice.Limit{Algorithm: sluice.GCRA, Quota: 1}, []string{"window: 0s must be positive"}},
		{"short window", sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Microsecond * 999}, []string{"shorter than the minimum"}},
		{"long window", sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: 11 * 366 * 24 * time.Hour}, []string{"longer than the maximum"}},
		{"nanosecond window", sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Second + 1}, []string{"whole number of microseconds"}},
		{"negative quota", sluice.Limit{Algorithm: sluice.GCRA, Quota: -1, Window: time.Second}, []string{"quota: -1 must not be negative"}},
		{"negative burst", sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Second, Burst: -2}, []string{"burst: -2"}},
		{"burst without bucket", sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 1, Window: time.Second, Burst: 2}, []string{"sliding_log has no burst"}},
		{"burst with quota 0", sluice.Limit{Algorithm: sluice.GCRA, Quota: 0, Window: time.Second, Burst: 2}, []string{"never refill"}},
		{"quota beyond µs", sluice.Limit{Algorithm: sluice.GCRA, Quota: 2_000_000, Window: time.Second}, []string{"more than one per microsecond"}},
		{"fixed window may count bytes", sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2_000_000_000, Window: time.Second}, nil},
		{"huge burst", sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 1, Window: 24 * time.Hour, Burst: 1 << 30}, []string{"exceeds 2^53"}},
		{"big log", sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 200_000, Window: time.Hour}, []string{"above 100000"}},
		{"everything wrong", sluice.Limit{Algorithm: 99, Quota: -5, Burst: -1}, []string{"algorithm:", "window:", "quota:", "burst:"}},
	}
	for _, tt := range tests {
		err := tt.limit.Validate()
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("%s: Validate(%v) = %v, want nil", tt.name, tt.limit, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: Validate(%v) = nil, want errors %q", tt.name, tt.limit, tt.want)
			continue
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(tt.want) {
			t.Errorf("%s: Validate(%v) gave %d problems %q, want %d", tt.name, tt.limit, len(lines), lines, len(tt.want))
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: Validate(%v) = %q, want it to mention %q", tt.name, tt.limit, err, w)
			}
		}
		// A store's fast check must refuse whatever Validate refuses.
		op := sluice.Op{Key: "k", Limit: tt.limit, Cost: 1}
		if stack.CheckOp(&op) == nil {
			t.Errorf("%s: Op.Check accepted a limit Validate refuses", tt.name)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range stack.Algorithms() {
		got, err := sluice.ParseAlgorithm(strings.ToUpper(a.String()))
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", strings.ToUpper(a.String()), got, err, a)
		}
		b, _ := a.MarshalText()
		var back sluice.Algorithm
		if err := back.UnmarshalText(b); err != nil || back != a {
			t.Errorf("text round trip of %v = %v, %v", a, back, err)
		}
	}
	if _, err := sluice.ParseAlgorithm("leaky"); err == nil || !strings.Contains(err.Error(), "token_bucket") {
		t.Errorf("ParseAlgorithm(leaky) error = %v, want one listing the valid names", err)
	}
}
