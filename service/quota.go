package service

import (
	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Quota is the counter a check of one descriptor charges: the store key and
// limit Check would use, so that quota leased for it (Engine.Allot) and
// requests checked one by one (Check, over RLS or HTTP) spend one quota.
type Quota struct {
	// Rule is the rule that matched, nil when none did (unknown domain, no
	// match, or the rule is switched off by an override).
	Rule *rules.Rule
	// Unlimited: the rule is unlimited; Key and Limit are empty.
	Unlimited bool
	// Shadow: the rule is in shadow mode (counted, never enforced).
	Shadow bool
	// Key and Limit name the counter (empty when Rule is nil or Unlimited).
	Key   string
	Limit sluice.Limit
}

// Quota returns the counter that Check charges for one descriptor of
// domain with entries. The request is validated as Check validates it (an
// error wraps ErrInvalidRequest). A rule with sub-counters answers one of
// them, chosen as Check chooses (its Limit is that sub-counter's share).
// Safe for concurrent use; it makes no store call.
func (e *Engine) Quota(domain string, entries []rules.Entry) (Quota, error) {
	req := Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := validate(&req, e.cfg.RequestBounds, sc); err != nil {
		return Quota{}, err
	}
	resp := e.plan(e.policy(), sc, &req, nil)
	st := resp.Statuses[0]
	q := Quota{Rule: st.Rule, Unlimited: st.Unlimited}
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.dropped || p.op < 0 {
			continue
		}
		q.Shadow = p.shadow
		q.Key = string([]byte(sc.ops[p.op].Key)) // the scratch's keys are reused
		q.Limit = sc.ops[p.op].Limit
	}
	return q, nil
}
