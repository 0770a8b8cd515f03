package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store/hybrid"
)

// costRow refuses Redis figures for a workload where any decision of
// either store was degraded, and otherwise reports the ratios.
func TestCostRow(t *testing.T) {
	ok := func(cpu float64, cmds int64) *costRun {
		return &costRun{decisions: 1000, cpu: cpu, cmds: map[string]int64{"evalsha": cmds}}
	}
	h := ok(0.001, 100)
	h.hybrid = hybrid.Stats{Local: 900, Global: 100, Cold: 50}
	for _, tc := range []struct {
		name       string
		g, h       *costRun
		want, deny string
	}{
		{"both decided by Redis", ok(0.01, 1000), h, "0.100x", "REFUSED"},
		{"global degraded", &costRun{decisions: 1000, degraded: 1, firstErr: errors.New("timeout")}, h, "REFUSED: 1 (global) and 0 (hybrid)", "x "},
		{"hybrid degraded", ok(0.01, 1000), &costRun{decisions: 1000, degraded: 3}, "REFUSED: 0 (global) and 3 (hybrid)", "x "},
	} {
		got := costRow("w", tc.g, tc.h)
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.deny) {
			t.Errorf("%s: got %q, want it to contain %q and not %q", tc.name, got, tc.want, tc.deny)
		}
	}
}

// The share of a Zipf stream too cold to lease falls as the rate rises,
// and stays within [0, 1].
func TestColdShare(t *testing.T) {
	prev := 2.0
	for _, rate := range []float64{10, 100, 1000, 10_000, 100_000, 1e7} {
		got := coldShare(1.1, 100_000, rate, 10*time.Second)
		if got < 0 || got > 1 || got > prev {
			t.Errorf("rate %v: cold share %v, want within [0, 1] and ≤ %v (the share at a lower rate)", rate, got, prev)
		}
		prev = got
	}
	if got := coldShare(1.1, 100_000, 1, time.Second); got < 1-1e-9 {
		t.Errorf("1 decision/s: cold share %v, want 1 (every user)", got)
	}
}
