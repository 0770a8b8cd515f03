package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// ErrNoAllotter is returned by Engine.Allot when the engine's store cannot
// lease allotments (it does not implement sluice.Allotter).
var ErrNoAllotter = errors.New("service: the store cannot lease allotments")

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
	// Leasable: Engine.Allot can lease from the counter (its algorithm
	// satisfies sluice.AllotAlgorithm and the store that holds it is a
	// sluice.Allotter: not a rule placed local).
	Leasable bool
}

// Quota returns the counter that Check charges for one descriptor of
// domain with entries. The request is validated as Check validates it (an
// error wraps ErrInvalidRequest). A rule with sub-counters answers one of
// them, chosen as Check chooses (its Limit is that sub-counter's share).
// Safe for concurrent use; it makes no store call.
func (e *Engine) Quota(domain string, entries []rules.Entry) (Quota, error) {
	req := Request{Domain: domain, Descriptors: []Descriptor{{Entries: entries}}}
	if err := validate(&req, e.cfg.Limits); err != nil {
		return Quota{}, err
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	resp := e.plan(sc, &req, nil)
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
	q.Leasable = q.Key != "" && sluice.AllotAlgorithm(q.Limit.Algorithm) && e.allotterFor(q.Key) != nil
	return q, nil
}

// allotterFor returns the store that can lease key's quota, or nil: the
// engine's store, or for a Placed store the global store (which also holds
// the counters placement: hybrid instances lease from), never a local one.
func (e *Engine) allotterFor(key string) sluice.Allotter {
	st := e.store
	if p, ok := st.(*Placed); ok {
		if i, _ := p.storeOf(key); i == 0 {
			return nil // placement: local counters are per instance
		}
		st = p.Global
	}
	a, _ := st.(sluice.Allotter)
	return a
}

// Allot leases allotments from the engine's store (see sluice.Allotter),
// for counters named by Quota. It returns an error wrapping ErrNoAllotter
// when the store cannot lease, and the store's error (nothing granted)
// otherwise.
//
// Every key must be leasable (Quota.Leasable); they are all leased from one
// store (with a Placed store, the global one).
func (e *Engine) Allot(ctx context.Context, reqs []sluice.AllotRequest, out []sluice.Allotment) error {
	if len(reqs) == 0 {
		return nil
	}
	a := e.allotterFor(reqs[0].Key)
	if a == nil {
		return fmt.Errorf("service: allot %q: %w", reqs[0].Key, ErrNoAllotter)
	}
	for i := range reqs[1:] {
		if e.allotterFor(reqs[1+i].Key) == nil {
			return fmt.Errorf("service: allot %q: %w", reqs[1+i].Key, ErrNoAllotter)
		}
	}
	return a.Allot(ctx, reqs, out)
}

// CanAllot reports whether the engine's store can lease allotments (for
// a Placed store: whether its global store can).
func (e *Engine) CanAllot() bool {
	return e.allotterFor("") != nil
}
