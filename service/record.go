package service

import (
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// shadow marks st, a shadow-mode limit's denial: Shadowed, and Code OK —
// except when only Config.ShadowMode put the limit in shadow mode, where
// the code stays OVER_LIMIT (envoyproxy/ratelimit's SHADOW_MODE: the
// descriptor says what would have been limited, only the overall code is
// OK) unless Config.ShadowStatusOK.
func (e *Engine) shadow(p *plan, st *Status) {
	st.Shadowed = true
	if !p.global || e.cfg.ShadowStatusOK {
		st.Code = CodeOK
	}
}

// record applies shadow mode to the statuses, sets the overall code, and
// counts the decisions.
func (e *Engine) record(sc *scratch, req *Request, resp *Response) {
	quotaTotal, quotaDenied := e.noLimitQuota(resp), 0
	var charged, refunded uint64
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.dropped {
			continue
		}
		st := &resp.Statuses[p.desc]
		var out int
		switch {
		case p.refused && p.shadow:
			e.shadow(p, st)
			out = outShadowDenied
		case p.refused:
			out = outDenied
			resp.OverallCode = CodeOverLimit
		case p.op < 0: // unlimited
			out = outAllowed
		case st.Code == CodeOverLimit && p.shadow:
			e.shadow(p, st)
			out = outShadowDenied
		case st.Degraded == FailedOpen:
			out = outFailedOpen
		case st.Degraded == FailedClosed:
			out = outFailedClosed
		case st.Degraded == Local && st.Code == CodeOverLimit:
			out = outLocalDenied
		case st.Degraded == Local:
			out = outLocalAllowed
		case st.Code == CodeOverLimit:
			out = outDenied
		default:
			out = outAllowed
		}
		if p.shadowHit && p.shadow {
			e.shadow(p, st)
			out = outShadowDenied
		}
		if p.quota && !p.shadow && p.op >= 0 {
			quotaTotal++
			if st.Code == CodeOverLimit {
				quotaDenied++
				if out == outDenied {
					out = outQuotaDenied
				}
			}
		}
		if st.Code == CodeOverLimit && !st.Shadowed && !(p.quota && !p.shadow) {
			resp.OverallCode = CodeOverLimit
		}
		if p.op >= 0 && st.Degraded == NotDegraded {
			switch op := &sc.ops[p.op]; op.Action {
			case sluice.Charge:
				charged += uint64(op.Cost)
			case sluice.Refund:
				refunded += uint64(op.Cost)
			}
		}
		near := out == outAllowed && p.op >= 0 && st.Result.Limit > 0 &&
			float64(st.Result.Limit-st.Result.Remaining) > e.cfg.NearLimitRatio*float64(st.Result.Limit)
		e.count(p, req, out, near)
	}
	if quotaTotal > 0 && quotaDenied == quotaTotal {
		resp.OverallCode = CodeOverLimit
	}
	if charged > 0 {
		e.m.Adjusted(req.Domain, ActionCharge, charged)
	}
	if refunded > 0 {
		e.m.Adjusted(req.Domain, ActionRefund, refunded)
	}
}

// count counts plan p's decision out (near: allowed, but near its limit)
// under its rule's label and its tenant's tier.
func (e *Engine) count(p *plan, req *Request, out int, near bool) {
	switch {
	case p.info == nil: // override: never per-value labels
		e.m.Decision(req.Domain, "override", outcomeNames[out], near)
	case p.rule.DetailedMetric:
		label := e.detailed.label(e.cfg.RequestBounds, req.Domain, p.rule.ID, req.Descriptors[p.desc].Entries)
		e.m.Decision(req.Domain, label, outcomeNames[out], near)
	default:
		p.info.count(outcomeNames[out], near)
	}
	if p.tenant {
		e.m.Tier(p.tier.String(), outcomeNames[out])
	}
}

// observe tells the Observer each rule-file limit's decision.
func (e *Engine) observe(now time.Time, sc *scratch, req *Request, resp *Response) {
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.dropped || p.op < 0 || p.rule == nil {
			continue
		}
		st := &resp.Statuses[p.desc]
		denied := st.Shadowed || (st.Code == CodeOverLimit && st.Degraded != FailedClosed)
		sc.obs = appendEntries(sc.obs[:0], req.Descriptors[p.desc].Entries)
		e.cfg.Observer.Observe(now, req.Domain, p.rule.ID, sc.obs, denied)
	}
}

// appendEntries appends entries as "k1=v1.k2=v2".
func appendEntries(b []byte, entries []rules.Entry) []byte {
	for i, en := range entries {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, en.Key...)
		b = append(b, '=')
		b = append(b, en.Value...)
	}
	return b
}

// detailedLabel is the rule label of a detailed_metric rule: the request's
// entries as key=value joined with ".".
func detailedLabel(entries []rules.Entry) string {
	return string(appendEntries(nil, entries))
}
