package service

import (
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// The order of precedence: what decides a request, first to last. It is
// written here and nowhere else; Check, Charge, Reset and Quota all go
// through it (Engine.plan), and docs/architecture.md follows it.
//
// For the whole request, before any counter (denied):
//
//  0. An entry on the domain's deny list — the rule file's, or the admin
//     API's (DenyLists) — makes its descriptor OVER_LIMIT with reason
//     deny_list and the request OVER_LIMIT; nothing is counted.
//
// Then for each descriptor (resolve):
//
//  1. A domain without a rule file, or a descriptor that cannot match (no
//     entries, or an empty key): no limit, OK.
//  2. A limit given in the request (envoy's descriptor limit): a
//     fixed_window of it, in Config's default failure mode, shadow and
//     quota modes. No rule, switch or tenant is consulted.
//  3. The rule the entries match (rules.Snapshot.Match); none: no limit.
//  4. An unlimited rule: unlimited. No switch or tenant applies.
//  5. The rule's kill switch: off is no limit, as if no rule matched;
//     shadow puts what follows in shadow mode.
//  6. A concurrency rule keeps its own limit (its leases are released by
//     the rule's key).
//  7. The tenant's own override for the rule (one of the rule's domain
//     before one of every domain), else the limit the rule file gives the
//     tenant's tier, else the rule's own limit (Overrides.Resolve; a
//     tenant without a record in effect is on the free tier).
//  8. A calendar quota counts that limit in its current period, unless it
//     came from an override that is not a calendar one.
//
// Then the cost of each descriptor (plan): its hits, except on a money rule
// (rules.Rule.Usage), where it is what the descriptor's tokens cost at the
// policy's price table; a model the table does not price makes the
// descriptor OVER_LIMIT with reason unknown_model, and the request takes
// nothing (refuse: its charges and refunds stand).
//
// After every descriptor (applyReplaces):
//
//  9. A matched rule whose name another matched rule replaces is dropped.
//
// The modes of a rule's limit: shadow when the rule says shadow_mode, its
// switch says shadow or Config.ShadowMode; quota mode when the rule says
// quota_mode or Config.QuotaMode; its failure mode, else Config's default.

// source says where a descriptor's limit comes from.
type source uint8

const (
	noLimit   source = iota // steps 1, 3, 5 (off): OK, nothing counted
	byRequest               // step 2
	unlimited               // step 4
	byRule                  // steps 5–8
)

// resolved is the answer of resolve for one descriptor.
type resolved struct {
	from source
	info *ruleInfo // byRule, unlimited: the matched rule's
	// lim is the limit that applies (byRequest, byRule); own: it is not
	// the rule's own limit, so its key carries it.
	lim sluice.Limit
	own bool
	// current is the limit reported (CurrentLimit).
	current CurrentLimit
	// excess: a calendar quota's store window outlasts its period by this
	// much (negative: a calendar quota with nothing to trim).
	excess time.Duration
	// tier is the tenant's (rules.NumTiers: not a tenant's rule); shadow:
	// the rule's switch says shadow.
	tier   rules.Tier
	shadow bool
}

// resolve applies steps 1–8 of the order of precedence to descriptor d of a
// request for domain (dom: the domain's data, nil without a rule file); u
// is the unit of d.Limit that validate found.
func (e *Engine) resolve(pol *policy, dom *domainInfo, domain string, d *Descriptor, u rules.Unit) resolved {
	if dom == nil || !matchable(d.Entries) { // 1
		return resolved{}
	}
	if d.Limit != nil { // 2
		lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: int64(d.Limit.RequestsPerUnit), Window: u.Window}
		return resolved{from: byRequest, lim: lim, own: true, tier: rules.NumTiers,
			current: CurrentLimit{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: u.Name, Window: u.Window}}
	}
	r := pol.snap.Match(domain, d.Entries) // 3
	if r == nil {
		return resolved{}
	}
	info := pol.rules[r]
	if r.Unlimited { // 4
		return resolved{from: unlimited, info: info, tier: rules.NumTiers}
	}
	ov := pol.override(r, d.Entries) // 5, 6, 7
	if ov.off {
		return resolved{}
	}
	res := resolved{from: byRule, info: info, lim: r.Limit, current: info.current, tier: ov.tier, shadow: ov.shadow}
	if ov.limit != nil {
		res.lim, res.current = ov.limit.Limit, ov.current(r)
	}
	if r.Calendar != nil && (ov.limit == nil || ov.limit.Calendar) { // 8
		res.lim, res.excess = info.calendarLimit(e.now(), res.lim.Quota)
		if res.excess == 0 {
			res.excess = -1 // still a calendar quota: trim nothing, but look
		}
	}
	res.own = res.lim != r.Limit
	return res
}

// denied applies step 0 of the order of precedence: it answers a request
// that names an entry on its domain's deny list (the rule file's, or the
// one of DenyLists): those descriptors are OVER_LIMIT with reason
// service.ReasonDenyList, the others OK, and no counter is looked at or
// charged. ok is false when no entry is on a list.
func (pol *policy) denied(req *Request) (resp Response, ok bool) {
	var dl, extra *rules.DenyList
	if dom := pol.domains[req.Domain]; dom != nil {
		dl = dom.deny
	}
	if pol.deny != nil {
		extra = pol.deny.DenyList(req.Domain)
	}
	if dl == nil && extra == nil {
		return Response{}, false
	}
	for i := range req.Descriptors {
		for _, en := range req.Descriptors[i].Entries {
			if !dl.Denies(en) && !extra.Denies(en) {
				continue
			}
			if !ok {
				ok = true
				resp = Response{OverallCode: CodeOverLimit, Statuses: make([]Status, len(req.Descriptors))}
				for j := range resp.Statuses {
					resp.Statuses[j].Code = CodeOK
				}
			}
			resp.Statuses[i].Code = CodeOverLimit
			resp.Statuses[i].Result = sluice.Result{Reason: ReasonDenyList}
			break
		}
	}
	return resp, ok
}
