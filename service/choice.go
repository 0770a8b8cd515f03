package service

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/batch"
)

// First with quota (rules.Rule.Choice): the descriptors of one request
// whose rules share a choice group are alternatives, in request order; the
// request's other descriptors are its requirements. choose tries each
// alternative with every requirement in one store call, all-or-nothing as
// any check, and stops at the first try the store admits: that
// alternative is charged and named (Response.Choice). A try denied only by
// its alternative goes on to the next; a try in which a requirement is
// over denies the request, and no further alternative is tried. So a
// request with k alternatives makes at most k store calls (a request
// without alternatives still makes one), each atomic: nothing is admitted
// over a limit, and an alternative is charged only when every earlier one
// was denied at its own try.

// alternative reports whether plan p is an alternative of a choice group:
// a limited rule of a group whose op is a Take (a check or a look), not a
// settle-after charge, a refund or a paired slot's release, which are
// applied as the request sends them.
func (sc *scratch) alternative(p *plan) bool {
	if p.rule == nil || p.rule.Choice == "" || p.op < 0 || p.dropped {
		return false
	}
	op := &sc.ops[p.op]
	return op.Action == sluice.Take && !op.Release
}

// alternatives returns the descriptor indexes of the request's
// alternatives (in request order) and their group, or nil when it has
// none. A request with alternatives of two groups is invalid: trying
// every combination is not what a gateway asks, and choosing one group
// after the other would charge the first group's choice for a request the
// second then denies.
func alternatives(sc *scratch) (string, []int, error) {
	group := ""
	var alts []int
	for i := range sc.plans {
		p := &sc.plans[i]
		if !sc.alternative(p) {
			continue
		}
		if group != "" && p.rule.Choice != group {
			return "", nil, fmt.Errorf("service: %w: descriptor %d: choice group %q beside group %q; a request chooses in one group", ErrInvalidRequest, p.desc, p.rule.Choice, group)
		}
		group, alts = p.rule.Choice, append(alts, p.desc)
	}
	return group, alts, nil
}

// tried is an alternative denied at its own try: its status and plan,
// kept for the answer and the metrics.
type tried struct {
	st   Status
	plan plan
}

// choose decides a request with alternatives alts of group (see the top
// of this file): first is plan's answer for every descriptor, whose
// statuses name the rules of the alternatives not tried. It leaves in sc
// the plans and ops of the last try, which record counts; it counts the
// alternatives denied before it itself. Its error is decide's: ctx ended.
func (e *Engine) choose(ctx context.Context, pol *policy, sc *scratch, req *Request, first *Response, group string, alts []int) (Response, error) {
	sc.skip = make([]bool, len(req.Descriptors))
	var denied []tried
	var resp Response
	var decidedAt int64
	last := -1
	exhausted := false // every alternative was over at its own try
	for k, alt := range alts {
		for _, a := range alts {
			sc.skip[a] = a != alt
		}
		sc.replan()
		resp = e.plan(pol, sc, req, nil)
		if len(sc.ops) > 0 {
			if err := e.decide(ctx, sc, &resp); err != nil {
				return Response{}, err
			}
			if sc.calendar {
				trimCalendar(sc, &resp)
			}
		}
		decidedAt = max(decidedAt, resp.DecidedAt)
		last = alt
		admitted, next := verdict(sc, &resp, alt)
		exhausted = next && k == len(alts)-1
		if admitted {
			en := req.Descriptors[alt].Entries[len(req.Descriptors[alt].Entries)-1]
			resp.Choice = &Choice{Group: group, Index: k, Descriptor: alt, Key: en.Key, Value: en.Value}
			break
		}
		if !next || k == len(alts)-1 {
			break
		}
		for i := range sc.plans {
			if p := &sc.plans[i]; p.desc == alt {
				denied = append(denied, tried{st: resp.Statuses[alt], plan: *p})
			}
		}
	}
	sc.skip = nil
	if resp.Choice == nil && len(sc.ops) > 0 && !sc.batch.Charged {
		// Given up: void the reservations the tries took and undid
		// (batch.Run left them for the next try), so that the request's
		// stream-done call charges nothing.
		batch.Void(ctx, e.dec, &sc.batch)
		if sc.batch.SettleErr != nil {
			e.m.StoreError("error")
			e.logFailure("error", sc.batch.SettleErr)
		}
	}
	j := 0
	for _, a := range alts {
		switch {
		case a == last:
		case j < len(denied) && denied[j].plan.desc == a:
			resp.Statuses[a] = denied[j].st
			resp.Statuses[a].PassedOver = resp.Choice != nil
			j++
		default:
			resp.Statuses[a] = Status{Code: CodeOK, Rule: first.Statuses[a].Rule, Untried: true}
		}
	}
	if exhausted {
		// Every alternative over: the request is admitted again when the
		// first of them frees, so that one alone denies it (and sets the
		// wait an edge advertises); the others are passed over.
		first := -1 // on a tie, the earlier (preferred) alternative
		for _, a := range alts {
			if st := &resp.Statuses[a]; st.Code == CodeOverLimit && (first < 0 || st.Result.RetryAfter < resp.Statuses[first].Result.RetryAfter) {
				first = a
			}
		}
		for _, a := range alts {
			resp.Statuses[a].PassedOver = a != first && resp.Statuses[a].Code == CodeOverLimit
		}
	}
	resp.DecidedAt = decidedAt
	for i := range denied {
		e.count(&denied[i].plan, req, outDenied, false)
	}
	return resp, nil
}

// verdict reads the try of alternative alt that decide answered in sc
// and resp: admitted when the request is admitted with it (the store
// charged the batch; or, the store having failed, the failure modes
// allow), and next when the alternative alone was over, so that the next
// one may be tried. A requirement over its limit (not in shadow or quota
// mode, which alone deny nothing), or a store that failed, ends the
// tries.
func verdict(sc *scratch, resp *Response, alt int) (admitted, next bool) {
	failed, over, altOver := false, false, false
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		st := &resp.Statuses[p.desc]
		failed = failed || st.Degraded != NotDegraded
		if st.Code != CodeOverLimit || p.shadow {
			continue
		}
		switch {
		case p.desc == alt:
			altOver = true
		case !p.quota:
			over = true
		}
	}
	if failed {
		return !over && !altOver, false
	}
	if sc.batch.Charged {
		return true, false
	}
	return false, altOver && !over
}
