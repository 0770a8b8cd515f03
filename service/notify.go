package service

import (
	"strconv"
	"time"

	"github.com/sluice-rl/sluice"
)

// Crossing is one level of a rule's notify_at (rules.Rule.NotifyAt) that a
// check or a charge took the counter of one key across: the counter's use
// went from below the level's threshold, ceil(Level% × Limit), to it or
// above. Every instance that sees a crossing reports it; Claim names it so
// that a Notifier tells it once per period across the fleet (see
// stack.Claimer).
//
// A counter in debt (a charge past its limit) reports Remaining 0, not
// how deep: the engine then takes the use before a charge as Limit − cost
// and may report a level it had reached before again; the claim keeps it
// told once.
type Crossing struct {
	// Domain and Rule (the rule's ID) name the budget; Key is the
	// request's entries for it, "k1=v1.k2=v2".
	Domain, Rule, Key string
	// Level is the level crossed, in percent of Limit.
	Level int
	// Limit is the limit in force for the key (a tier's or an override's
	// when one applies); Used is what its counter had used after the op
	// (Limit − Remaining: at most Limit, even in debt).
	Limit, Used int64
	// At is when the store decided the op; PeriodEnd when the counter's
	// full quota is back with no more traffic (At + Result.ResetAfter: a
	// window's or calendar period's end; a bucket's refill).
	At, PeriodEnd time.Time
	// Claim is the store name of this level in this period: the counter's
	// key with "|n<level>" added (its hash tag, so its Redis Cluster slot,
	// kept). Claimed with a ttl of PeriodEnd − At, it is free again when
	// the period is over.
	Claim string
}

// Notifier hears the crossings of notify_at levels (Config.Notify). The
// engine calls Crossed on the request path, after the store answered,
// only when a level was crossed: it must not block (queue and return)
// and must be safe for concurrent use.
type Notifier interface {
	Crossed(c Crossing)
}

// crossedLevels returns the levels (percent of limit) whose threshold
// ceil(level% × limit) a use going from before to after reaches: levels
// [from, to) of the increasing list levels, before < threshold ≤ after.
// None when limit ≤ 0 or after ≤ before.
func crossedLevels(levels []uint8, limit, before, after int64) (from, to int) {
	if limit <= 0 || after <= before {
		return 0, 0
	}
	from = len(levels)
	for i, l := range levels {
		t := threshold(l, limit)
		if t > after {
			return min(from, i), i
		}
		if before < t && i < from {
			from = i
		}
	}
	return from, len(levels)
}

// threshold is the use at which level (percent) of limit is reached:
// ceil(level × limit / 100) (limit ≤ algorithm.MaxExact, so no overflow).
func threshold(level uint8, limit int64) int64 {
	return (int64(level)*limit + 99) / 100
}

// notify tells Config.Notify of each level crossed by the ops of sc that
// charged a notify_at rule's counter: a Take the request was admitted
// with (charged = false: Check), or a Charge (settle-after rules in
// Check, every op of Engine.Charge), decided by the store itself (not a
// failure mode).
func (e *Engine) notify(sc *scratch, req *Request, resp *Response, now time.Time) {
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.dropped || p.op < 0 || p.rule == nil || len(p.rule.NotifyAt) == 0 {
			continue
		}
		st := &resp.Statuses[p.desc]
		op := &sc.ops[p.op]
		if st.Degraded != NotDegraded || op.Cost <= 0 || p.probing || op.Release {
			continue
		}
		switch op.Action {
		case sluice.Charge:
		case sluice.Take:
			if resp.OverallCode != CodeOK || st.Code != CodeOK || st.Shadowed || p.shadowHit {
				continue // not charged: the request, or this limit, was denied
			}
		default:
			continue
		}
		e.crossings(p, op, &st.Result, req, now)
	}
}

// crossings reports the levels op, which charged p's counter, crossed.
func (e *Engine) crossings(p *plan, op *sluice.Op, r *sluice.Result, req *Request, now time.Time) {
	after := max(r.Limit-r.Remaining, 0)
	from, to := crossedLevels(p.rule.NotifyAt, r.Limit, after-op.Cost, after)
	if from == to {
		return
	}
	at := now
	if r.At > 0 {
		at = time.UnixMicro(r.At)
	}
	key := detailedLabel(req.Descriptors[p.desc].Entries)
	for _, l := range p.rule.NotifyAt[from:to] {
		e.cfg.Notify.Crossed(Crossing{
			Domain: req.Domain, Rule: p.rule.ID, Key: key, Level: int(l),
			Limit: r.Limit, Used: after, At: at, PeriodEnd: at.Add(r.ResetAfter),
			Claim: op.Key + "|n" + strconv.Itoa(int(l)),
		})
	}
}
