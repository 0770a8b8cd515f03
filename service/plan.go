package service

import (
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/batch"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/stack"
)

// LastHit returns when a check last matched the rule of domain with ID id
// in the rules in force (to the second), or the zero time when none has
// since the engine started (or the rule is not in force). Matches of rules
// switched off are not counted. Safe for concurrent use; a reload guard
// (watch.Guard.InUse) uses it to tell rules in use.
func (e *Engine) LastHit(domain, id string) time.Time {
	e.policy()
	e.mu.Lock()
	last := e.lastHits[[2]string{domain, id}]
	e.mu.Unlock()
	if last == nil {
		return time.Time{}
	}
	if sec := last.Load(); sec != 0 {
		return time.Unix(sec, 0)
	}
	return time.Time{}
}

// touch records that the rules of sc's plans were hit at now: one atomic
// load per rule, and a store only when the second changed.
func touch(sc *scratch, now time.Time) {
	sec := now.Unix()
	for i := range sc.plans {
		if info := sc.plans[i].info; info != nil && info.last.Load() != sec {
			info.last.Store(sec)
		}
	}
}

// scaleLimit divides a limit's quota and burst by the replica count, rounding
// up and keeping at least 1 of a non-zero figure. If the result would not be
// a valid limit, the limit is kept as it is.
func scaleLimit(l sluice.Limit, replicas int) sluice.Limit {
	if replicas <= 1 {
		return l
	}
	div := func(x int64) int64 {
		if x == 0 {
			return 0
		}
		return max(1, (x+int64(replicas)-1)/int64(replicas))
	}
	s := l
	s.Quota, s.Burst = div(l.Quota), div(l.Burst)
	if s.Validate() != nil {
		return l
	}
	return s
}

// plan is one descriptor's part of a check.
type plan struct {
	desc   int         // index into the request's descriptors
	info   *ruleInfo   // nil for an override
	rule   *rules.Rule // nil for an override
	mode   rules.FailureMode
	shadow bool
	// global: in shadow mode only by Config.ShadowMode (its status stays
	// OVER_LIMIT unless Config.ShadowStatusOK; see record)
	global  bool
	local   sluice.Limit
	op      int  // index into ops, -1 when the rule is unlimited
	ks, ke  int  // the op's key is scratch.key[ks:ke]
	dropped bool // replaced by another matched rule
	// shadowHit: a shadow-mode limit denied and was decided as a look
	// (batch.Batch.Shadowed); its result is the denial it reported.
	shadowHit bool
	// calExcess: a calendar quota's store window outlasts its period by
	// this much (see rules.Calendar.Limit).
	calExcess time.Duration
	// tenant: the rule is a tenant's and tier is the tenant's tier.
	tenant bool
	tier   rules.Tier
	// lim is the limit the rule enforces, before splitting over
	// sub-counters; own: it is not the rule's own, so keys carry it.
	lim sluice.Limit
	own bool
	// pen is 1 + the index in ops of the rule's penalty look (0: none);
	// its key is scratch.key[pks:pke].
	pen, pks, pke int
	// subs, for Charge and Reset of a rule with sub-counters: the ops of
	// sub-counters 1 … S−1 are ops[subs:subs+S−1] (op is sub-counter 0's).
	subs int
	// quota: the limit is in quota mode (rules.Rule.QuotaMode or
	// Config.QuotaMode); shadowHit then marks a quota-mode denial retried
	// as a look.
	quota bool
	// probing: a look at a settle-after rule, planned as a Take of 1 that
	// ops[probe], a Refund of 1 on the same key, gives back in the same
	// batch: denied with the exact RetryAfter of one unit when not one unit
	// is left, and charging nothing either way.
	probing bool
	probe   int
	// refused: a money rule refused the descriptor (a model without a
	// price: reason unknown_model); it has no op.
	refused bool
}

// adjust makes plan build the ops of Engine.Charge or Engine.Reset
// instead of Check's: on sub-counter 0 of each rule (spread adds the
// others), with each descriptor's signed cost or a reset, and skipping
// what those cannot adjust.
type adjust struct {
	costs []int64 // Charge: each descriptor's signed cost
	reset bool    // Reset: forget every counter
}

// op returns the cost and action of descriptor i's op.
func (a *adjust) op(i int) (int64, sluice.Action) {
	switch c := a.costs; {
	case a.reset:
		return 0, sluice.Reset
	case c[i] > 0:
		return c[i], sluice.Charge
	case c[i] < 0:
		return -c[i], sluice.Refund
	}
	return 0, sluice.Take // a look
}

// scratch holds a check's working memory, reused through a pool.
type scratch struct {
	plans   []plan
	ops     []sluice.Op
	results []sluice.Result
	local   []sluice.Op
	lres    []sluice.Result
	key     []byte
	obs     []byte // an Observer's key
	// roles, of, shadowed and batch: the store call of decide.
	roles    []batch.Role
	of       []int
	shadowed []bool
	batch    batch.Batch
	// calendar: a planned limit is a calendar quota (trimCalendar applies).
	calendar bool
	// units: the unit of each descriptor's limit given in the request,
	// found once by validate (unset for descriptors without one).
	units []rules.Unit
	// skip: the descriptors plan leaves out (the other alternatives of a
	// choice's try; see choice.go); nil plans every descriptor.
	skip []bool
	// refused: a descriptor was refused (plan.refused), and after refuse,
	// one not in shadow mode nor replaced;
	// err: a descriptor's usage cannot be priced (see callCost).
	refused bool
	err     error
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *scratch) release() {
	s.replan()
	clear(s.units)
	s.units, s.skip = s.units[:0], nil
	scratchPool.Put(s)
}

// replan empties what plan and decide fill, keeping validate's units.
func (s *scratch) replan() {
	clear(s.ops) // drop references to keys
	clear(s.local)
	for i := range s.plans {
		s.plans[i] = plan{}
	}
	s.plans, s.ops, s.results, s.local, s.lres, s.key, s.obs =
		s.plans[:0], s.ops[:0], s.results[:0], s.local[:0], s.lres[:0], s.key[:0], s.obs[:0]
	s.calendar, s.refused, s.err = false, false, nil
	s.batch = batch.Batch{}
}

// plan matches each descriptor of req against the policy pol and puts one
// op per limit in sc (limits given in the request as fixed windows,
// unlimited rules as plans without an op, replaced rules dropped). It
// returns the response with every status OK and its rule and current limit
// filled in; decide fills in the store's answers. adj, when not nil, makes
// the ops those of Charge or Reset (see adjust); Check passes nil. Every
// counter Check, Charge and Reset touch is named here, so they always
// agree. Which limit applies is resolve's (precedence.go).
func (e *Engine) plan(pol *policy, sc *scratch, req *Request, adj *adjust) Response {
	resp, currents := newResponse(len(req.Descriptors))
	dom := pol.domains[req.Domain]
	replacing := false
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &resp.Statuses[i]
		st.Code = CodeOK
		if sc.skip != nil && sc.skip[i] {
			continue // another alternative's try (choice.go)
		}
		var u rules.Unit
		if d.Limit != nil {
			u = sc.units[i]
		}
		res := e.resolve(pol, dom, req.Domain, d, u)
		if res.from == noLimit {
			continue
		}
		if res.from != byRequest {
			st.Rule = res.info.rule
			replacing = replacing || len(st.Rule.Replaces) > 0
		}
		if res.from == unlimited {
			st.Unlimited = true
			sc.plans = append(sc.plans, plan{desc: i, info: res.info, rule: res.info.rule, op: -1})
			continue
		}
		if currents == nil {
			currents = make([]CurrentLimit, len(req.Descriptors))
		}
		currents[i] = res.current
		st.CurrentLimit = &currents[i]
		cost, act := descriptorOp(req, i, adj)
		if res.from == byRule && res.info.rule.Usage != nil && adj == nil {
			r := res.info.rule
			c, known, err := callCost(pol.prices, r, i, d.Entries)
			if err != nil {
				sc.err = err
				return resp
			}
			if !known {
				st.Code, st.Result = CodeOverLimit, sluice.Result{Reason: ReasonUnknownModel}
				shadow := res.info.shadow || res.shadow
				sc.refused = true
				sc.plans = append(sc.plans, plan{desc: i, info: res.info, rule: r, op: -1, refused: true, shadow: shadow, global: res.info.global && !res.shadow})
				continue
			}
			cost = c // its hits do not count: the tokens' price does
		}
		if res.from != byRequest && res.info.rule.SettleReserve && adj == nil && act == sluice.Take {
			cost = givenHits(req, i) // 0: the rule's reserve
		}
		if res.from == byRequest {
			planGiven(pol, dom, sc, d, i, &res, cost, act)
		} else {
			planRule(pol, sc, st, d, i, &res, cost, act, adj)
		}
	}
	if replacing {
		e.applyReplaces(sc, &resp)
	}
	if sc.refused {
		refuse(sc, &resp)
	}
	markUndo(sc, e.cfg.Fallback != nil)
	finishOps(sc)
	return resp
}

// newResponse returns a response of n statuses (OK is set by plan), and
// for one descriptor its CurrentLimit too, in one allocation; currents is
// nil otherwise (plan allocates it when the first limit applies).
func newResponse(n int) (resp Response, currents []CurrentLimit) {
	resp.OverallCode = CodeOK
	if n == 1 {
		one := new(struct {
			st [1]Status
			cl [1]CurrentLimit
		})
		resp.Statuses, currents = one.st[:], one.cl[:]
		return resp, currents
	}
	resp.Statuses = make([]Status, n)
	return resp, nil
}

// descriptorOp returns the cost and action of descriptor i of req: its
// hits (its own, else the request's, else 1) taken or, with Refund, given
// back; adj's instead for Charge and Reset.
func descriptorOp(req *Request, i int, adj *adjust) (int64, sluice.Action) {
	if adj != nil {
		return adj.op(i)
	}
	d := &req.Descriptors[i]
	hits := req.Hits
	if hits == 0 {
		hits = 1
	}
	if d.Hits != nil {
		hits = *d.Hits
	}
	cost := int64(hits) // validated: hits ≤ algorithm.MaxExact
	if d.Refund && cost > 0 {
		return cost, sluice.Refund
	}
	return cost, sluice.Take
}

// givenHits returns the hits descriptor i of req gives: its own, else the
// request's, 0 when neither gives any (descriptorOp's default of 1 is not
// taken: a reservation then takes its rule's reserve, and a settle counts
// no usage).
func givenHits(req *Request, i int) int64 {
	if h := req.Descriptors[i].Hits; h != nil {
		return int64(*h)
	}
	return int64(req.Hits)
}

// planGiven plans descriptor i's limit given in the request: its key and
// op, in Config's default modes.
func planGiven(pol *policy, dom *domainInfo, sc *scratch, d *Descriptor, i int, res *resolved, cost int64, act sluice.Action) {
	ks := len(sc.key)
	sc.key = dom.appendGivenKey(sc.key, d.Entries, res.lim)
	p := pol.given
	p.desc, p.local, p.op, p.ks, p.ke, p.lim = i, scaleLimit(res.lim, pol.replicas), len(sc.ops), ks, len(sc.key), res.lim
	sc.plans = append(sc.plans, p)
	sc.ops = append(sc.ops, sluice.Op{Limit: res.lim, Cost: cost, Action: act})
}

// planRule plans descriptor i's rule limit: the op's shape (ruleOp), its
// key, the op, and the rule's penalty look.
func planRule(pol *policy, sc *scratch, st *Status, d *Descriptor, i int, res *resolved, cost int64, act sluice.Action, adj *adjust) {
	info, r := res.info, res.info.rule
	op, probing, skip := ruleOp(r, d, cost, act, adj)
	if skip {
		if adj != nil {
			st.Skipped = SkipConcurrency
		}
		sc.plans = append(sc.plans, plan{desc: i, info: info, rule: r, op: -1})
		return
	}
	local, own := info.local, (*sluice.Limit)(nil)
	if res.own {
		local, own = scaleLimit(res.lim, pol.replicas), &res.lim
	}
	sub := 0 // Charge and Reset spread over every sub-counter
	if adj == nil {
		sub = subCounter(r)
	}
	ks := len(sc.key)
	sc.key = info.appendKey(sc.key, d.Entries, sub, own)
	sc.calendar = sc.calendar || res.excess != 0
	sc.plans = append(sc.plans, plan{desc: i, info: info, rule: r, mode: info.mode, shadow: info.shadow || res.shadow, global: info.global && !res.shadow,
		local: local, op: len(sc.ops), ks: ks, ke: len(sc.key), calExcess: res.excess, tenant: res.tier < rules.NumTiers, tier: res.tier,
		lim: res.lim, own: res.own, quota: info.quota, probing: probing})
	op.Limit = splitLimit(res.lim, r.SubCounters)
	sc.ops = append(sc.ops, op)
	if p := &sc.plans[len(sc.plans)-1]; r.Penalty > 0 && adj == nil && !p.shadow {
		addPenalty(sc, p, info)
	}
}

// ruleOp shapes the op (all but key and limit) of a descriptor of rule r
// with cost and act: a reservation of a settle-reserve rule (its lease the
// request ID, hashed: the store reserves or settles by its record); a
// paired slot's lease, or its release at stream end; a settle-after rule's
// charge, or its probe (a look as a Take of 1 that finishOps refunds).
// skip: a concurrency rule's refund or Charge, which has no op (its lease
// is given back with Release).
func ruleOp(r *rules.Rule, d *Descriptor, cost int64, act sluice.Action, adj *adjust) (op sluice.Op, probing, skip bool) {
	op.Script = r.Script
	if r.SettleReserve {
		if adj == nil && act == sluice.Take {
			op.Lease, op.Reserve, op.SettleWithin = pairLease(d.Entries[r.PairIndex].Value), r.Reserve, r.SettleWithin
		}
		op.Cost, op.Action = cost, act
		return op, false, false
	}
	if r.PairBy != "" && adj == nil && cost > 0 {
		op.Lease = pairLease(d.Entries[r.PairIndex].Value) // the slot: its request ID, hashed
	}
	// The stream-done call of a paired slot (a refund) releases exactly
	// the slot the request-path call acquired (nothing if none is held).
	if op.Release = op.Lease != 0 && act == sluice.Refund; op.Release {
		cost, act = 0, sluice.Take
	}
	if r.Limit.Algorithm == sluice.Concurrency && ((adj != nil && !adj.reset) || act == sluice.Refund) {
		return op, false, true
	}
	if adj == nil && r.SettleAfter && act == sluice.Take {
		if cost > 0 {
			act = sluice.Charge // spent already: charged whether or not it fits
		} else {
			cost, probing = 1, true
		}
	}
	op.Cost, op.Action = cost, act
	return op, probing, false
}

// addPenalty adds the penalty look of plan p (its rule has a penalty): a
// Take of 1 on the key of p's op with penaltySuffix.
func addPenalty(sc *scratch, p *plan, info *ruleInfo) {
	p.pks = len(sc.key)
	sc.key = append(sc.key, sc.key[p.ks:p.ke]...)
	sc.key = append(sc.key, penaltySuffix...)
	p.pke, p.pen = len(sc.key), len(sc.ops)+1
	sc.ops = append(sc.ops, sluice.Op{Limit: info.pen, Cost: 1, Action: sluice.Take})
}

// finishOps gives every op its key, cut from one string of every key of
// the request (one allocation), and adds the refund of each settle-after
// probe.
func finishOps(sc *scratch) {
	if len(sc.ops) == 0 {
		return
	}
	keys := string(sc.key)
	for i := range sc.plans {
		if p := &sc.plans[i]; p.op >= 0 {
			sc.ops[p.op].Key = keys[p.ks:p.ke]
			if p.pen > 0 {
				sc.ops[p.pen-1].Key = keys[p.pks:p.pke]
			}
		}
	}
	for i := range sc.plans {
		if p := &sc.plans[i]; p.probing && p.op >= 0 {
			take := &sc.ops[p.op]
			take.UndoIfUnknown = false // its refund rides in the same atomic step
			p.probe = len(sc.ops)
			sc.ops = append(sc.ops, sluice.Op{Key: take.Key, Limit: take.Limit, Cost: 1, Action: sluice.Refund, Script: take.Script})
		}
	}
}

// matchable reports whether a descriptor's entries can match a rule: at
// least one entry, and no empty key. envoyproxy/ratelimit answers any other
// descriptor OK without a limit, and so does the engine.
func matchable(entries []rules.Entry) bool {
	if len(entries) == 0 {
		return false
	}
	for i := range entries {
		if entries[i].Key == "" {
			return false
		}
	}
	return true
}

// markUndo sets sluice.Op.UndoIfUnknown on the Takes (of cost > 0) that a
// store timeout would not leave admitted in the store (see fail): every
// Take of the request when a limit failing closed (not in shadow mode)
// would deny it, else those of limits failing to the local fallback, which
// decides them instead. A Take that fails open keeps the charge the store
// may have made: the request was admitted and pays once.
func markUndo(sc *scratch, fallback bool) {
	denies := false
	for i := range sc.plans {
		p := &sc.plans[i]
		denies = denies || (p.op >= 0 && !p.dropped && !p.shadow && p.mode == rules.FailureClosed)
	}
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		// Not a reservation: a refund of its cost would not undo it (its
		// record would still say reserved).
		if op := &sc.ops[p.op]; op.Action == sluice.Take && !op.Release && op.Cost > 0 && !stack.Paired(op) {
			op.UndoIfUnknown = denies || (fallback && p.mode == rules.FailureLocal)
		}
	}
}

// applyReplaces drops the limits whose names other matched rules replace.
func (e *Engine) applyReplaces(sc *scratch, resp *Response) {
	kept := sc.ops[:0]
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.rule != nil && p.rule.Name != "" && replaced(p.rule, sc.plans) {
			p.dropped = true
			resp.Statuses[p.desc] = Status{Code: CodeOK}
			continue
		}
		if p.op >= 0 {
			p.op, kept = len(kept), append(kept, sc.ops[p.op])
		}
	}
	for i := range sc.plans {
		if p := &sc.plans[i]; p.dropped {
			p.op = -1
		}
	}
	sc.ops = kept
}

// replaced reports whether a matched rule other than r itself names r in its
// replaces.
func replaced(r *rules.Rule, plans []plan) bool {
	for i := range plans {
		o := plans[i].rule
		if o == nil || o == r {
			continue
		}
		for _, n := range o.Replaces {
			if n == r.Name {
				return true
			}
		}
	}
	return false
}

// pairLease is the lease ID of the slot a rule with rules.Rule.PairBy
// holds for request ID id: the same on every replica (FNV-1a, 64 bits),
// never 0 (the store's "pick one").
func pairLease(id string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * prime
	}
	if h != 0 {
		return h
	}
	return 1
}
