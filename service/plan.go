package service

import (
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/batch"
	"github.com/sluice-rl/sluice/rules"
)

// compiled is what the engine derives once per snapshot.
type compiled struct {
	snap  *rules.Snapshot
	rules map[*rules.Rule]*ruleInfo
}

// ruleInfo is the per-rule data the hot path needs ready-made.
type ruleInfo struct {
	middle  string       // key part after the hash tag
	local   sluice.Limit // limit for the local fallback
	mode    rules.FailureMode
	current CurrentLimit
	count   func(outcome string, near bool) // Metrics.Rule's recorder
	// pen is the limit of the rule's penalty key (see penaltyLimit); zero
	// when the rule has no penalty.
	pen sluice.Limit
	// last is when a check last matched the rule (unix seconds), shared
	// by the ruleInfos of every snapshot holding the rule (Engine.LastHit).
	last *atomic.Int64
}

// rulesFor returns the per-rule data of snapshot s, building it on the first
// check after a reload.
func (e *Engine) rulesFor(s *rules.Snapshot) *compiled {
	if c := e.cache.Load(); c != nil && c.snap == s {
		return c
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cache.Load()
	if old != nil && old.snap == s {
		return old
	}
	c := &compiled{snap: s, rules: map[*rules.Rule]*ruleInfo{}}
	live := map[[2]string]bool{}
	if e.lastHits == nil {
		e.lastHits = map[[2]string]*atomic.Int64{}
	}
	for _, r := range s.Rules() {
		info := &ruleInfo{mode: r.FailureMode}
		if info.mode == rules.FailureDefault {
			info.mode = e.cfg.DefaultFailureMode
		}
		if !r.Unlimited {
			info.middle = ruleMiddle(r)
			info.local = scaleLimit(r.Limit, e.cfg.ExpectedReplicas)
		}
		if r.Penalty > 0 {
			info.pen = penaltyLimit(r.Penalty)
		}
		info.current = CurrentLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Window: r.Limit.Window}
		info.count = e.m.Rule(r.Domain, r.ID)
		id := [2]string{r.Domain, r.ID}
		if info.last = e.lastHits[id]; info.last == nil {
			info.last = new(atomic.Int64)
			e.lastHits[id] = info.last
		}
		c.rules[r] = info
		live[id] = true
	}
	if old != nil { // drop the series of rules that are gone
		for r := range old.rules {
			if !live[[2]string{r.Domain, r.ID}] {
				e.m.DropRule(r.Domain, r.ID)
			}
		}
	}
	for id := range e.lastHits {
		if !live[id] {
			delete(e.lastHits, id)
		}
	}
	e.cache.Store(c)
	return c
}

// LastHit returns when a check last matched the rule of domain with ID id
// in the rules in force (to the second), or the zero time when none has
// since the engine started (or the rule is not in force). Matches of rules
// switched off are not counted. Safe for concurrent use; a reload guard
// (watch.Guard.InUse) uses it to tell rules in use.
func (e *Engine) LastHit(domain, id string) time.Time {
	e.rulesFor(e.src.Current())
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
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func (s *scratch) release() {
	clear(s.ops) // drop references to keys
	clear(s.local)
	for i := range s.plans {
		s.plans[i] = plan{}
	}
	s.plans, s.ops, s.results, s.local, s.lres, s.key, s.obs =
		s.plans[:0], s.ops[:0], s.results[:0], s.local[:0], s.lres[:0], s.key[:0], s.obs[:0]
	s.calendar = false
	s.batch = batch.Batch{}
	scratchPool.Put(s)
}

// plan matches each descriptor of req against the rules in force and puts
// one op per limit in sc (overrides as fixed windows, unlimited rules as
// plans without an op, replaced rules dropped). It returns the response with
// every status OK and its rule and current limit filled in; decide fills in
// the store's answers. adj, when not nil, makes the ops those of Charge or
// Reset (see adjust); Check passes nil. Every counter Check, Charge and
// Reset touch is named here, so they always agree.
func (e *Engine) plan(sc *scratch, req *Request, adj *adjust) Response {
	snap := e.src.Current()
	c := e.rulesFor(snap)
	n := len(req.Descriptors)
	resp := Response{OverallCode: CodeOK}
	var currents []CurrentLimit // allocated once, when the first limit matches
	if n == 1 {
		// The common case in one allocation.
		one := new(struct {
			st [1]Status
			cl [1]CurrentLimit
		})
		resp.Statuses, currents = one.st[:], one.cl[:]
	} else {
		resp.Statuses = make([]Status, n)
	}

	knownDomain := snap.HasDomain(req.Domain)
	replacing := false
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		st := &resp.Statuses[i]
		st.Code = CodeOK
		if !knownDomain || !matchable(d.Entries) {
			continue
		}
		hits := req.Hits
		if hits == 0 {
			hits = 1
		}
		if d.Hits != nil {
			hits = *d.Hits
		}
		cost, act := int64(hits), sluice.Take // validated: hits ≤ sluice.MaxExact
		switch {
		case adj != nil:
			cost, act = adj.op(i)
		case d.Refund && cost > 0:
			act = sluice.Refund
		}
		if d.Limit != nil {
			window, _ := rules.UnitWindow(d.Limit.Unit) // validated
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: int64(d.Limit.RequestsPerUnit), Window: window}
			if currents == nil {
				currents = make([]CurrentLimit, n)
			}
			currents[i] = CurrentLimit{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: strings.ToLower(d.Limit.Unit), Window: window}
			st.CurrentLimit = &currents[i]
			ks := len(sc.key)
			sc.key = appendKey(sc.key, req.Domain, d.Entries, nil, string(overrideMiddle(lim)))
			sc.plans = append(sc.plans, plan{desc: i, mode: e.cfg.DefaultFailureMode, local: scaleLimit(lim, e.cfg.ExpectedReplicas),
				op: len(sc.ops), ks: ks, ke: len(sc.key), lim: lim, shadow: e.cfg.ShadowMode, global: e.cfg.ShadowMode, quota: e.cfg.QuotaMode})
			sc.ops = append(sc.ops, sluice.Op{Limit: lim, Cost: cost, Action: act})
			continue
		}
		r := snap.Match(req.Domain, d.Entries)
		if r == nil {
			continue
		}
		ov := e.overrideFor(r, d.Entries)
		if ov.off {
			continue // switched off: as if no rule matched
		}
		info := c.rules[r]
		st.Rule = r
		if len(r.Replaces) > 0 {
			replacing = true
		}
		if r.Unlimited {
			st.Unlimited = true
			sc.plans = append(sc.plans, plan{desc: i, info: info, rule: r, op: -1})
			continue
		}
		if currents == nil {
			currents = make([]CurrentLimit, n)
		}
		currents[i] = info.current
		st.CurrentLimit = &currents[i]
		var lease uint64 // a paired slot's lease: its request ID, hashed
		if r.PairBy != "" && adj == nil && cost > 0 {
			lease = pairLease(d.Entries[r.PairIndex].Value)
		}
		// The stream-done call of a paired slot (a refund) releases exactly
		// the slot the request-path call acquired (nothing if none is held).
		release := lease != 0 && act == sluice.Refund
		if release {
			cost, act = 0, sluice.Take
		}
		if r.Limit.Algorithm == sluice.Concurrency && ((adj != nil && !adj.reset) || act == sluice.Refund) {
			if adj != nil {
				st.Skipped = SkipConcurrency
			}
			sc.plans = append(sc.plans, plan{desc: i, info: info, rule: r, op: -1})
			continue
		}
		probing := false
		if adj == nil && r.SettleAfter && act == sluice.Take {
			if cost > 0 {
				act = sluice.Charge // spent already: charged whether or not it fits
			} else {
				cost, probing = 1, true
			}
		}
		ks := len(sc.key)
		lim, excess := e.limitFor(r, &ov, &currents[i])
		local, own := info.local, (*sluice.Limit)(nil)
		if lim != r.Limit {
			local, own = scaleLimit(lim, e.cfg.ExpectedReplicas), &lim
		}
		sub := 0 // Charge and Reset spread over every sub-counter
		if adj == nil {
			sub = subCounter(r)
		}
		sc.key = appendRuleKey(sc.key, req.Domain, d.Entries, r, info.middle, sub, own)
		sc.calendar = sc.calendar || excess != 0
		sc.plans = append(sc.plans, plan{desc: i, info: info, rule: r, mode: info.mode, shadow: r.ShadowMode || ov.shadow || e.cfg.ShadowMode, global: e.cfg.ShadowMode && !r.ShadowMode && !ov.shadow, local: local,
			op: len(sc.ops), ks: ks, ke: len(sc.key), calExcess: excess, tenant: ov.tier < rules.NumTiers, tier: ov.tier,
			lim: lim, own: own != nil, quota: r.QuotaMode || e.cfg.QuotaMode, probing: probing})
		sc.ops = append(sc.ops, sluice.Op{Limit: splitLimit(lim, r.SubCounters), Cost: cost, Action: act, Lease: lease, Release: release})
		if p := &sc.plans[len(sc.plans)-1]; r.Penalty > 0 && adj == nil && !p.shadow {
			p.pks = len(sc.key)
			sc.key = append(sc.key, sc.key[ks:p.ke]...)
			sc.key = append(sc.key, penaltySuffix...)
			p.pke, p.pen = len(sc.key), len(sc.ops)+1
			sc.ops = append(sc.ops, sluice.Op{Limit: info.pen, Cost: 1, Action: sluice.Take})
		}
	}
	if replacing {
		e.applyReplaces(sc, &resp)
	}
	markUndo(sc, e.cfg.Fallback != nil)
	if len(sc.ops) > 0 {
		// One allocation for every key of the request.
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
				sc.ops = append(sc.ops, sluice.Op{Key: take.Key, Limit: take.Limit, Cost: 1, Action: sluice.Refund})
			}
		}
	}
	return resp
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
		if op := &sc.ops[p.op]; op.Action == sluice.Take && !op.Release && op.Cost > 0 {
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
	h := fnv.New64a()
	h.Write([]byte(id))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}
