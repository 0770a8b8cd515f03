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
// Resolve is called once per matched, limited rule on the hot path: it must
// be safe for concurrent use, must not block (no I/O) and should not
// allocate. It returns the limit to enforce instead of r.Limit (nil: keep
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

// overrideFor asks the configured Overrides about rule r; the zero override
// when there are none. A concurrency rule keeps its own limit, since
// releasing a lease rebuilds the key from the rule.
func (e *Engine) overrideFor(r *rules.Rule, entries []rules.Entry) override {
	if e.cfg.Overrides == nil || r.Unlimited {
		return override{tier: rules.NumTiers}
	}
	tl, tier, sw := e.cfg.Overrides.Resolve(r, entries)
	o := override{tier: tier, off: sw == rules.SwitchOff, shadow: sw == rules.SwitchShadow}
	if tl != nil && tl.Limit != r.Limit && r.Limit.Algorithm != sluice.Concurrency {
		o.limit = tl
	}
	return o
}

// limitFor returns the limit rule r enforces under override ov (setting the
// CurrentLimit *cur reports when it is not the rule's), and for a calendar
// quota, how long its store window outlasts the period (negative when the
// rule is a calendar quota but nothing needs trimming).
func (e *Engine) limitFor(r *rules.Rule, ov *override, cur *CurrentLimit) (lim sluice.Limit, excess time.Duration) {
	lim = r.Limit
	if ov.limit != nil {
		lim, *cur = ov.limit.Limit, ov.current(r)
	}
	if r.Calendar != nil && (ov.limit == nil || ov.limit.Calendar) {
		lim, excess = r.Calendar.Limit(e.now(), lim.Quota)
		if excess == 0 {
			excess = -1 // still a calendar quota: trim nothing, but look
		}
	}
	return lim, excess
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
