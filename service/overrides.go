package service

import (
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Overrides changes what a matched rule enforces for one request, at run
// time and without editing rule files: a tenant's tier or own limit, or a
// kill switch that turns the rule off or into shadow mode. *tenant.Registry
// implements it.
//
// Resolve is called once per matched, limited rule on the hot path (unless
// the Overrides is an OverlaySource: then its overlay's Resolve is, and the
// overlay is compiled into the engine's policy): it must be safe for
// concurrent use, must not block (no I/O) and should not allocate. It returns the limit to enforce instead of r.Limit (nil: keep
// r.Limit), the tier of the request's tenant (rules.NumTiers when r is not
// a tenant's rule; decisions are counted per tier, see Metrics.Tier) and
// the rule's switch state.
type Overrides interface {
	Resolve(r *rules.Rule, entries []rules.Entry) (*rules.TierLimit, rules.Tier, rules.Switch)
}

// override is what Overrides decided for one descriptor.
type override struct {
	limit  *rules.TierLimit // nil: the rule's own
	tier   rules.Tier       // rules.NumTiers: not a tenant's rule
	off    bool
	shadow bool
}

// override asks the policy's resolver about rule r (limited, matched by
// entries); the zero override when there is none. A concurrency rule keeps
// its own limit, since releasing a lease rebuilds the key from the rule.
func (pol *policy) override(r *rules.Rule, entries []rules.Entry) override {
	if pol.resolver == nil {
		return override{tier: rules.NumTiers}
	}
	tl, tier, sw := pol.resolver.Resolve(r, entries)
	o := override{tier: tier, off: sw == rules.SwitchOff, shadow: sw == rules.SwitchShadow}
	if tl != nil && tl.Limit != r.Limit && r.Limit.Algorithm != sluice.Concurrency {
		o.limit = tl
	}
	return o
}

func (e *Engine) now() time.Time {
	if e.cfg.Now != nil {
		return e.cfg.Now()
	}
	return time.Now()
}

// trimCalendar reports the reset and retry times of calendar quotas at the
// end of their period rather than of their store window.
func trimCalendar(sc *scratch, resp *Response) {
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.calExcess <= 0 || p.op < 0 || p.dropped {
			continue
		}
		res := &resp.Statuses[p.desc].Result
		if res.ResetAfter > 0 {
			res.ResetAfter = max(res.ResetAfter-p.calExcess, time.Microsecond)
		}
		if res.RetryAfter > 0 {
			res.RetryAfter = max(res.RetryAfter-p.calExcess, time.Microsecond)
		}
	}
}

// current is the CurrentLimit reported for an overridden rule.
func (o *override) current(r *rules.Rule) CurrentLimit {
	return CurrentLimit{Name: r.Name, RequestsPerUnit: o.limit.RequestsPerUnit, Unit: o.limit.Unit, Window: o.limit.Limit.Window}
}

// appendKeyWith is appendKey for a rule whose limit is overridden: the
// same layout with lim in place of the rule's limit, so a tenant's counter
// never shares state with a different limit (see keys.go).
func appendKeyWith(b []byte, domain string, entries []rules.Entry, path []rules.Step, middle string, lim sluice.Limit) []byte {
	idPart := middle[:strings.LastIndexByte(middle, '|')+1] // "}|r:<rule ID>|"
	b = appendKey(b, domain, entries[:1], path, idPart)
	b = appendLimit(b, lim)
	for i := 1; i < len(entries); i++ {
		v := entries[i].Value
		if i < len(path) {
			v = path[i].Counted(v)
		}
		b = append(b, '|')
		b = appendEscaped(b, entries[i].Key)
		b = append(b, '=')
		b = appendEscaped(b, v)
	}
	return b
}
