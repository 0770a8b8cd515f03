package service

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/rules"
)

// callCost returns what the call descriptor i's entries describe costs
// under money rule r (rules.Rule.Usage) at the prices of table: the
// tokens of each type its usage entries carry, at the prices of the model
// its model entry names, in micro-units (rules.Price.Cost). known is false
// when the table prices no such model (nor has a default_model). A token
// count that is not a whole number from 0 to algorithm.MaxExact, and a
// cost above algorithm.MaxExact, are errors wrapping ErrInvalidRequest:
// the caller sent what no counter can take.
func callCost(table *rules.Prices, r *rules.Rule, i int, entries []rules.Entry) (cost int64, known bool, err error) {
	u := r.Usage
	var tokens [rules.NumTokenTypes]int64
	for t, at := range u.Tokens {
		if at < 0 {
			continue
		}
		v := entries[at].Value
		n, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil || n > algorithm.MaxExact {
			return 0, false, fmt.Errorf("service: %w: descriptor %d: %s (%s tokens): want a whole number from 0 to %d, got %q",
				ErrInvalidRequest, i, entries[at].Key, rules.TokenType(t), uint64(algorithm.MaxExact), v) // v: bounded by RequestBounds
		}
		tokens[t] = int64(n)
	}
	price, ok := table.Price(entries[u.Model].Value)
	if !ok {
		return 0, false, nil
	}
	cost, err = price.Cost(&tokens)
	if err != nil {
		return 0, true, fmt.Errorf("service: %w: descriptor %d: the call's cost: %w", ErrInvalidRequest, i, err)
	}
	return cost, true, nil
}

// refuse drops the ops of a request one of whose descriptors a money rule
// refused (reason unknown_model, see plan): its Takes — looks, probes,
// acquires — whose statuses become OK with nothing counted, as the deny
// list's do; its charges and refunds stand (spent already, never denied).
// It does nothing when every refused descriptor is in shadow mode or
// replaced by another matched rule; sc.refused then goes back to false.
func refuse(sc *scratch, resp *Response) {
	sc.refused = slices.ContainsFunc(sc.plans, func(p plan) bool { return p.refused && !p.dropped && !p.shadow })
	if !sc.refused {
		return
	}
	kept := sc.ops[:0]
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		if op := sc.ops[p.op]; op.Action == sluice.Charge || op.Action == sluice.Refund {
			p.pen = 0
			p.op, kept = len(kept), append(kept, op)
			continue
		}
		p.dropped, p.op = true, -1
		resp.Statuses[p.desc] = Status{Code: CodeOK}
	}
	sc.ops = kept
}
