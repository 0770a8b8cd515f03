package redis

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/stack"
)

// TestLuaConstants checks that the numbers the scripts name are the Go
// side's: every algorithm code, every decision code, the RetryAfter walk
// bound, the exactness cap and the group modes.
func TestLuaConstants(t *testing.T) {
	src, err := scriptFS.ReadFile("scripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = (\d+)$`).FindAllStringSubmatch(string(src), -1) {
		v, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		got[m[1]] = v
	}
	want := map[string]int64{
		"ALLOWED":   int64(algorithm.Allowed),
		"LIMITED":   int64(algorithm.Limited),
		"TOO_HIGH":  int64(algorithm.CostTooHigh),
		"LOG_WALK":  algorithm.ExactRetryUnits,
		"MAX_EXACT": algorithm.MaxExact,

		"PAIR_NONE":     algorithm.PairNone,
		"PAIR_RESERVED": algorithm.PairReserved,
		"PAIR_DENIED":   algorithm.PairDenied,
		"PAIR_SETTLED":  algorithm.PairSettled,
	}
	for _, a := range stack.Algorithms() {
		want[strings.ToUpper(a.String())] = int64(a)
	}
	// The store reads the decision code as a sluice.Reason.
	for code, r := range map[algorithm.Reason]sluice.Reason{
		algorithm.Allowed: sluice.ReasonAllowed, algorithm.Limited: sluice.ReasonLimited, algorithm.CostTooHigh: sluice.ReasonCostTooHigh,
	} {
		if int64(code) != int64(r) {
			t.Errorf("algorithm reason %d is sluice.Reason %d (%v), want equal", code, r, r)
		}
	}
	for name, w := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("lib.lua does not name %s (want local %s = %d)", name, name, w)
		} else if g != w {
			t.Errorf("lib.lua: %s = %d, want %d", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("lib.lua names %s = %d, which no Go constant checks", name, got[name])
		}
	}
	// The group modes driver.lua compares with batch.go's.
	drv, err := scriptFS.ReadFile("scripts/driver.lua")
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^local (MODE_[A-Z]+) = '(\d)'$`).FindAllStringSubmatch(string(drv), -1) {
		modes[m[1]] = m[2]
	}
	for name, w := range map[string]string{"MODE_DECIDE": modeDecide, "MODE_UNDO": modeUndo, "MODE_REFUND": modeRefund, "MODE_ALLOT": modeAllot} {
		if g := modes[name]; g != w {
			t.Errorf("driver.lua: %s = %q, want %q", name, g, w)
		}
	}
	if m := regexp.MustCompile(`mode [=~]= '`).Find(drv); m != nil {
		t.Errorf("driver.lua compares a mode with a literal (%s): name it", m)
	}
	// Every algorithm script registers itself under its name, not a number.
	for _, f := range fileOrder {
		src, _ := scriptFS.ReadFile("scripts/" + f)
		if m := regexp.MustCompile(`(?m)^A\[\d+\]`).Find(src); m != nil {
			t.Errorf("%s: %s: name the algorithm code", f, m)
		}
	}
}
