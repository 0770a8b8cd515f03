package service

import (
	"fmt"
	"math/rand/v2"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/stack"
)

// Placement (rate_limit.placement) and sub-counters (rate_limit.sub_counters).
//
// The key of a rule placed hybrid starts with stack.KeyHybrid ('h'), of a
// rule placed local with stack.KeyLocal ('l'), before its hash tag (global
// keys start with the tag's '{'), so a composed store (store/compose) routes
// each op by its key's first byte, and a change of
// placement starts fresh counters, as a change of limit does. With
// sub_counters S > 1 the hash tag ends with "|s<i>", i drawn at random per
// check, so the S counters of one hot key spread over Redis Cluster slots;
// each enforces ⌊quota/S⌋ (and ⌊burst/S⌋).

// placementByte is the first byte of the keys of a rule placed p.
func placementByte(p rules.Placement) byte {
	switch p {
	case rules.PlacementHybrid:
		return stack.KeyHybrid
	case rules.PlacementLocal:
		return stack.KeyLocal
	}
	return 0
}

// appendRuleKey is appendKey for a rule: its placement byte first, and with
// sub-counters the counter sub (0 ≤ sub < r.SubCounters) inside the tag.
func appendRuleKey(b []byte, domain string, entries []rules.Entry, r *rules.Rule, middle string, sub int, lim *sluice.Limit) []byte {
	if c := placementByte(r.Placement); c != 0 {
		b = append(b, c)
	}
	if r.SubCounters > 1 {
		tagged := make([]byte, 0, len(middle)+4)
		tagged = append(tagged, "|s"...)
		tagged = append(tagged, fmt.Sprint(sub)...)
		tagged = append(tagged, middle...)
		middle = string(tagged)
	}
	if lim != nil { // a tenant's or a calendar's limit: its own counter
		return appendKeyWith(b, domain, entries, r.Path, middle, *lim)
	}
	return appendKey(b, domain, entries, r.Path, middle)
}

// subCounter picks the sub-counter of one check.
func subCounter(r *rules.Rule) int {
	if r.SubCounters <= 1 {
		return 0
	}
	return rand.IntN(r.SubCounters)
}

// splitLimit is the limit one of s sub-counters enforces: l itself, or its
// share when split over s > 1 sub-counters.
func splitLimit(l sluice.Limit, s int) sluice.Limit {
	if s > 1 {
		burst := l.Burst
		l.Quota /= int64(s)
		l.Burst /= int64(s)
		if l.Burst == 0 && burst != 0 {
			l.Burst = 1
		}
	}
	return l
}
