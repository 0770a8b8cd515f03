package service

import (
	"cmp"
	"slices"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// The kinds of change Preview reports for one descriptor.
const (
	// ChangeNewlyLimited: no limit (no rule, or an unlimited one) before,
	// a limit with the new rules.
	ChangeNewlyLimited = "newly_limited"
	// ChangeNewlyUnlimited: a limit before, none with the new rules.
	ChangeNewlyUnlimited = "newly_unlimited"
	// ChangeLimitChanged: limited both times, by a different limit.
	ChangeLimitChanged = "limit_changed"
	// ChangeRuleChanged: another rule matches, with the same limit (or
	// both unlimited).
	ChangeRuleChanged = "rule_changed"
)

// PreviewReport is what Preview found, per domain, sorted by domain.
type PreviewReport struct {
	Requests    int             `json:"requests"`
	Descriptors int             `json:"descriptors"`
	Domains     []DomainPreview `json:"domains"`
}

// DomainPreview counts the descriptors of one domain by change.
type DomainPreview struct {
	Domain         string `json:"domain"`
	Descriptors    int    `json:"descriptors"`
	Unchanged      int    `json:"unchanged"`
	NewlyLimited   int    `json:"newly_limited"`
	NewlyUnlimited int    `json:"newly_unlimited"`
	LimitChanged   int    `json:"limit_changed"`
	RuleChanged    int    `json:"rule_changed"`
	// OwnLimit: descriptors that gave their own limit, which rules do not
	// change.
	OwnLimit int `json:"own_limit,omitempty"`
	// DeniedNowUnlimited: descriptors denied when sampled that the new
	// rules leave without a limit.
	DeniedNowUnlimited int `json:"denied_now_unlimited"`
	// Moves are the rules that match differently, most descriptors first.
	Moves []RuleMove `json:"moves,omitempty"`
}

// RuleMove is a number of descriptors that went from one rule to another
// ("" for no rule).
type RuleMove struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Change    string `json:"change"`
	FromLimit string `json:"from_limit,omitempty"`
	ToLimit   string `json:"to_limit,omitempty"`
	Count     int    `json:"count"`
}

// Preview replays sampled requests against the rules of next and reports
// how the match of each descriptor would change from the match recorded
// when it was sampled. It only matches: it neither plans store operations
// nor touches a store, so it cannot say whether a hit would be admitted,
// only which limit would decide it. Tenant overrides, kill switches and
// replaces are not replayed.
func Preview(sample []SampledRequest, next *rules.Snapshot) PreviewReport {
	rep := PreviewReport{Requests: len(sample)}
	byDomain := map[string]*DomainPreview{}
	moves := map[string]map[RuleMove]int{}
	for i := range sample {
		sr := &sample[i]
		req := &sr.Request
		dp := byDomain[req.Domain]
		if dp == nil {
			dp = &DomainPreview{Domain: req.Domain}
			byDomain[req.Domain] = dp
			moves[req.Domain] = map[RuleMove]int{}
		}
		for j := range req.Descriptors {
			if j >= len(sr.Matched) {
				break
			}
			d, old := &req.Descriptors[j], sr.Matched[j]
			rep.Descriptors++
			dp.Descriptors++
			if d.Limit != nil {
				dp.OwnLimit++
				continue
			}
			var newRule string
			var newLim sluice.Limit
			newUnlimited := false
			if r := next.Match(req.Domain, d.Entries); r != nil {
				newRule, newUnlimited = r.ID, r.Unlimited
				if !r.Unlimited {
					newLim = r.Limit
				}
			}
			oldLimited := old.Rule != "" && !old.Unlimited
			newLimited := newRule != "" && !newUnlimited
			change := ""
			switch {
			case oldLimited && !newLimited:
				change = ChangeNewlyUnlimited
				dp.NewlyUnlimited++
				if old.Denied {
					dp.DeniedNowUnlimited++
				}
			case !oldLimited && newLimited:
				change = ChangeNewlyLimited
				dp.NewlyLimited++
			case oldLimited && old.Limit != newLim:
				change = ChangeLimitChanged
				dp.LimitChanged++
			case old.Rule != newRule:
				change = ChangeRuleChanged
				dp.RuleChanged++
			default:
				dp.Unchanged++
			}
			if change != "" {
				mv := RuleMove{From: old.Rule, To: newRule, Change: change, FromLimit: limitString(old.Rule, old.Unlimited, old.Limit),
					ToLimit: limitString(newRule, newUnlimited, newLim)}
				moves[req.Domain][mv]++
			}
		}
	}
	for name, dp := range byDomain {
		for mv, n := range moves[name] {
			mv.Count = n
			dp.Moves = append(dp.Moves, mv)
		}
		slices.SortFunc(dp.Moves, func(a, b RuleMove) int {
			return cmp.Or(b.Count-a.Count, cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To), cmp.Compare(a.Change, b.Change))
		})
		rep.Domains = append(rep.Domains, *dp)
	}
	slices.SortFunc(rep.Domains, func(a, b DomainPreview) int { return cmp.Compare(a.Domain, b.Domain) })
	return rep
}

// limitString spells a matched rule's limit for a report.
func limitString(rule string, unlimited bool, l sluice.Limit) string {
	switch {
	case rule == "":
		return ""
	case unlimited:
		return "unlimited"
	}
	return l.String()
}
