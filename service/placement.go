package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Placement (rate_limit.placement) and sub-counters (rate_limit.sub_counters).
//
// The key of a rule placed hybrid starts with 'h', of a rule placed local
// with 'l', before its hash tag (global keys start with the tag's '{'), so a
// Placed store routes each op by its key's first byte, and a change of
// placement starts fresh counters, as a change of limit does. With
// sub_counters S > 1 the hash tag ends with "|s<i>", i drawn at random per
// check, so the S counters of one hot key spread over Redis Cluster slots;
// each enforces ⌊quota/S⌋ (and ⌊burst/S⌋).

// placementByte is the first byte of the keys of a rule placed p.
func placementByte(p rules.Placement) byte {
	switch p {
	case rules.PlacementHybrid:
		return 'h'
	case rules.PlacementLocal:
		return 'l'
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

// Placed is a sluice.Store that routes each op to the store of its rule's
// placement, by the first byte of its key: 'h' hybrid, 'l' local, anything
// else global. A nil Hybrid or Local means Global.
//
// A batch within one placement is passed through whole (all-or-nothing as
// that store makes it). A batch spanning placements is decided store by
// store — local, then hybrid, then global — and once one denies, the rest
// are only looked at (cost 0; releases still apply), so nothing later is
// charged; what an earlier store charged stays charged. Like a Redis
// Cluster batch across slots, that can deny too much, never admit too much.
type Placed struct {
	Global, Hybrid, Local sluice.Store
}

func (p *Placed) storeOf(key string) (int, sluice.Store) {
	if key != "" {
		switch key[0] {
		case 'l':
			if p.Local != nil {
				return 0, p.Local
			}
		case 'h':
			if p.Hybrid != nil {
				return 1, p.Hybrid
			}
		}
	}
	return 2, p.Global
}

// Take implements sluice.Store.
func (p *Placed) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	if len(ops) == 0 || len(results) != len(ops) {
		return p.Global.Take(ctx, ops, results)
	}
	first, st := p.storeOf(ops[0].Key)
	same := true
	for i := 1; i < len(ops) && same; i++ {
		k, _ := p.storeOf(ops[i].Key)
		same = k == first
	}
	if same {
		return st.Take(ctx, ops, results)
	}
	denied := false
	for want := range 3 {
		var idx []int
		var sub []sluice.Op
		var s sluice.Store
		for i := range ops {
			if k, st := p.storeOf(ops[i].Key); k == want {
				idx, s = append(idx, i), st
				op := ops[i]
				if denied && !op.Release {
					op.Cost, op.Action = 0, sluice.Take // a look: the batch is refused
				}
				sub = append(sub, op)
			}
		}
		if len(sub) == 0 {
			continue
		}
		res := make([]sluice.Result, len(sub))
		if err := s.Take(ctx, sub, res); err != nil {
			return err
		}
		for j, i := range idx {
			results[i] = res[j]
			denied = denied || !res[j].Allowed
		}
	}
	return nil
}

// Keys implements sluice.KeyLister: a prefix that starts with a placement
// byte is listed in that placement's store, any other in the global store
// (an empty prefix in each distinct store, up to max in all). It returns
// an error wrapping ErrNoKeyLister when that store cannot list its keys.
func (p *Placed) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	var stores []sluice.Store
	if prefix != "" {
		_, st := p.storeOf(prefix)
		stores = []sluice.Store{st}
	} else {
		for _, st := range []sluice.Store{p.Local, p.Hybrid, p.Global} {
			if st != nil && !slices.Contains(stores, st) {
				stores = append(stores, st)
			}
		}
	}
	var out []string
	more := false
	for _, st := range stores {
		kl, ok := st.(sluice.KeyLister)
		if !ok {
			return nil, false, fmt.Errorf("service: placed store %T: %w", st, ErrNoKeyLister)
		}
		if len(out) == max {
			return out, true, nil
		}
		keys, m, err := kl.Keys(ctx, prefix, max-len(out))
		if err != nil {
			return nil, false, err
		}
		out, more = append(out, keys...), more || m
	}
	return out, more, nil
}

// Health implements sluice.HealthReporter with the global store's nodes
// (nil when the global store reports none).
func (p *Placed) Health() []sluice.NodeHealth {
	if hr, ok := p.Global.(sluice.HealthReporter); ok {
		return hr.Health()
	}
	return nil
}
