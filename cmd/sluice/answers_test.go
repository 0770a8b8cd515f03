package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/server/api"
)

// answerBudget is the most decodeAnswer may allocate per byte of an answer
// at the read bound, plus answerSlack: the decoder's read buffer holds the
// answer once and a list at most maxAnswerItems values.
const (
	answerBudget = 8
	answerSlack  = 64 << 20
)

// TestWorstAnswers: the answers a server could send the commands, at the
// read bound (maxAdminAnswer), allocate within the budget, and a list past
// maxAnswerItems is refused. Without the item bound an answer of empty
// statuses cost 221 bytes per byte (3.5 GiB at 16 MiB). The allocations
// are the whole process's: the test runs in a process of its own
// (proctest.Alone), beside the others.
func TestWorstAnswers(t *testing.T) {
	if !proctest.Alone(t) {
		return
	}
	many := func(field string) string {
		return `{"` + field + `":[` + strings.Repeat(`{},`, maxAdminAnswer/3-10) + `{}]}`
	}
	long := `{"statuses":[{"code":"` + strings.Repeat("x", maxAdminAnswer-40) + `"}]}`
	for _, tc := range []struct {
		name, body string
		into       func() any
		wantErr    bool
	}{
		{"check: empty statuses", many("statuses"), func() any { return new(api.CheckResponse) }, true},
		{"switches: empty switches", many("Switches"), func() any { return new(struct{ Switches []admin.SwitchJSON }) }, true},
		{"switch: empty rules", many("Rules"), func() any { return new(struct{ Rules []ruleInForce }) }, true},
		{"check: one long string", long, func() any { return new(api.CheckResponse) }, false},
		{"deep nesting", strings.Repeat("[", maxAdminAnswer), func() any { return new(api.CheckResponse) }, true},
	} {
		b := []byte(tc.body)
		v := tc.into()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := decodeAnswer(b, v)
		runtime.ReadMemStats(&after)
		got := after.TotalAlloc - before.TotalAlloc
		if budget := uint64(answerBudget*len(b) + answerSlack); got > budget {
			t.Errorf("%s: %d bytes allocated for %d, want at most %d", tc.name, got, len(b), budget)
		}
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want an error %v", tc.name, err, tc.wantErr)
		}
		t.Logf("%s: %.2f bytes per byte (%v)", tc.name, float64(got)/float64(len(b)), err)
	}
}
