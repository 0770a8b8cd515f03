package service

import (
	"reflect"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// policy is everything that says what limits a request, compiled into one
// immutable value: the rule snapshot in force (its match tree), each
// domain's and each rule's data made ready once (domainInfo, ruleInfo: key
// prefixes, fallback limits, the current limit reported, metric recorders,
// penalty limits, modes with Config's defaults folded in), and the overlay
// in force (tenant tiers and overrides, kill switches, the admin API's deny
// lists). The engine holds the newest in an atomic.Pointer; a request loads
// it once (Engine.policy) and reads nothing else that a reload can change,
// so it sees one whole state: never the rules of one reload with the
// tenants of another. The order in which its parts decide is written in
// precedence.go.
//
// None of the sources says when it changes (RuleSource and OverlaySource
// only answer what is in force), so Engine.policy compares, per request,
// the snapshot and overlay in force with the policy's (two atomic loads and
// two pointer comparisons) and compiles a new policy when either differs.
// A new overlay alone reuses the rule data (a tenant change costs no walk
// over the rules); a new snapshot rebuilds it.
type policy struct {
	snap *rules.Snapshot
	// overlay is the OverlaySource's overlay this policy was compiled with
	// (nil when Config.Overrides is not an OverlaySource).
	overlay rules.Overlay
	// resolver answers tenants and switches: overlay, or Config.Overrides
	// itself when it is not an OverlaySource (asked per check), or nil.
	resolver Overrides
	// deny answers the admin API's deny lists: overlay, Config.Overrides
	// when it is a DenyLists, or nil.
	deny    DenyLists
	domains map[string]*domainInfo // the domains with a rule file
	rules   map[*rules.Rule]*ruleInfo
	// given is the plan of a limit given in a request, with Config's
	// defaults (desc, op, ks, ke, local and lim are filled per request).
	given    plan
	replicas int
	// prices is the price table of the snapshot's money rules (nil
	// without one).
	prices *rules.Prices
	// choices and notifies say some rule of the snapshot has a choice
	// group or notify_at levels: without, a check skips looking for
	// alternatives (choice.go) and crossings (notify.go).
	choices, notifies bool
}

// domainInfo is one domain's data made ready once.
type domainInfo struct {
	deny *rules.DenyList // the rule file's, or nil
	// head starts the key of a limit given in a request: "{<domain>|".
	head string
}

// ruleInfo is the per-rule data the hot path needs ready-made.
type ruleInfo struct {
	rule *rules.Rule
	// The parts of the rule's keys (see keys.go and placement.go), for a
	// limited rule: head is the placement byte and "{<domain>|<key 1>=";
	// ids[s] is sub-counter s's "|s<s>" (without sub-counters, nothing)
	// and "}|r:<rule ID>|"; limit is "<limit>"; steps[i] is
	// "|<key i+2>=". A key is head, value 1, ids[s], the limit, and each
	// step with its value.
	head  string
	ids   []string
	limit string
	steps []string
	local sluice.Limit // limit for the local fallback
	mode  rules.FailureMode
	// shadow, global, quota: the rule's modes with Config's folded in
	// (see plan); a switch set to shadow adds shadow and clears global.
	shadow, global, quota bool
	current               CurrentLimit
	count                 func(outcome string, near bool) // Metrics.Rule's recorder
	// pen is the limit of the rule's penalty key (see penaltyLimit); zero
	// when the rule has no penalty.
	pen sluice.Limit
	// last is when a check last matched the rule (unix seconds), shared
	// by the ruleInfos of every snapshot holding the rule (Engine.LastHit).
	last *atomic.Int64
	// cal caches a calendar rule's period in force (see calendarLimit).
	cal atomic.Pointer[calPeriod]
}

// calPeriod is one calendar period of a rule: [from, until) in Unix µs,
// the store window that holds it and by how much that window outlasts it
// (rules.Calendar.Limit, which depends on nothing else).
type calPeriod struct {
	from, until    int64
	window, excess time.Duration
}

// OverlaySource is an Overrides whose state changes as a whole
// (*tenant.Registry): Overlay returns the state in force, the same value
// (==; make it a pointer) until that state changes. When Config.Overrides
// is one, the engine compiles each overlay with the rule snapshot into the
// plan it decides by, and a check asks only that overlay: Resolve of the
// source itself is not called. Overlay is called once per request: it must
// be safe for concurrent use, must not block and should not allocate.
type OverlaySource interface {
	Overrides
	Overlay() rules.Overlay
}

// overlaySource returns o as an OverlaySource, or nil when it is not one
// or its overlays cannot be compared (== would panic).
func overlaySource(o Overrides) OverlaySource {
	src, ok := o.(OverlaySource)
	if !ok {
		return nil
	}
	if ov := src.Overlay(); ov != nil && !reflect.TypeOf(ov).Comparable() {
		return nil
	}
	return src
}

// policy returns the policy in force: the one held, unless the rule
// snapshot or the overlay in force is no longer its own, then a new one.
func (e *Engine) policy() *policy {
	p := e.pol.Load()
	if p != nil && p.snap == e.src.Current() && (e.overlays == nil || p.overlay == e.overlays.Overlay()) {
		return p
	}
	return e.compile()
}

// compile builds the policy of the sources in force, stores it and returns
// it. It reads the sources itself, under e.mu, so that a request that loaded
// an older snapshot cannot put it back in force.
func (e *Engine) compile() *policy {
	e.mu.Lock()
	defer e.mu.Unlock()
	snap := e.src.Current()
	var ov rules.Overlay
	if e.overlays != nil {
		ov = e.overlays.Overlay()
	}
	old := e.pol.Load()
	if old != nil && old.snap == snap && old.overlay == ov {
		return old
	}
	p := &policy{snap: snap, overlay: ov, replicas: e.cfg.ExpectedReplicas, prices: snap.Prices(),
		given: plan{mode: e.cfg.DefaultFailureMode, shadow: e.cfg.ShadowMode, global: e.cfg.ShadowMode, quota: e.cfg.QuotaMode}}
	switch {
	case ov != nil:
		p.resolver, p.deny = ov, ov
	case e.cfg.Overrides != nil:
		p.resolver = e.cfg.Overrides
		p.deny, _ = e.cfg.Overrides.(DenyLists)
	}
	if old != nil && old.snap == snap {
		p.domains, p.rules, p.choices, p.notifies = old.domains, old.rules, old.choices, old.notifies
	} else {
		e.compileRules(p, old)
	}
	e.pol.Store(p)
	return p
}

// compileRules fills p's domain and rule data from p.snap, and drops the
// metric series of the rules of old that are gone. e.mu is held.
func (e *Engine) compileRules(p *policy, old *policy) {
	s := p.snap
	p.domains = map[string]*domainInfo{}
	for _, d := range s.Domains() {
		p.domains[d] = &domainInfo{deny: s.DenyList(d), head: string(appendEscaped([]byte{'{'}, d)) + "|"}
	}
	p.rules = map[*rules.Rule]*ruleInfo{}
	live := map[[2]string]bool{}
	if e.lastHits == nil {
		e.lastHits = map[[2]string]*atomic.Int64{}
	}
	for _, r := range s.Rules() {
		info := e.ruleInfo(r)
		id := [2]string{r.Domain, r.ID}
		if info.last = e.lastHits[id]; info.last == nil {
			info.last = new(atomic.Int64)
			e.lastHits[id] = info.last
		}
		p.rules[r] = info
		live[id] = true
		p.choices = p.choices || r.Choice != ""
		p.notifies = p.notifies || len(r.NotifyAt) > 0
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
}

// ruleInfo makes rule r's data ready (all but last).
func (e *Engine) ruleInfo(r *rules.Rule) *ruleInfo {
	info := &ruleInfo{rule: r, mode: r.FailureMode,
		shadow: r.ShadowMode || e.cfg.ShadowMode, global: e.cfg.ShadowMode && !r.ShadowMode, quota: r.QuotaMode || e.cfg.QuotaMode}
	if info.mode == rules.FailureDefault {
		info.mode = e.cfg.DefaultFailureMode
	}
	if !r.Unlimited && len(r.Path) > 0 {
		info.local = scaleLimit(r.Limit, e.cfg.ExpectedReplicas)
		head := []byte(nil)
		if c := placementByte(r.Placement); c != 0 {
			head = append(head, c)
		}
		head = append(head, '{')
		head = appendEscaped(head, r.Domain)
		head = append(head, '|')
		head = appendEscaped(head, r.Path[0].Key)
		info.head = string(append(head, '='))
		id := string(appendEscapedBut([]byte("}|r:"), r.ID, '=')) + "|"
		info.ids = make([]string, max(1, r.SubCounters))
		for s := range info.ids {
			if r.SubCounters > 1 {
				info.ids[s] = "|s" + strconv.Itoa(s) + id
			} else {
				info.ids[s] = id
			}
		}
		info.limit = string(appendLimit(nil, r.Limit))
		for _, st := range r.Path[1:] {
			info.steps = append(info.steps, string(append(appendEscaped([]byte{'|'}, st.Key), '=')))
		}
	}
	if r.Penalty > 0 {
		info.pen = penaltyLimit(r.Penalty)
	}
	info.current = CurrentLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Window: r.Limit.Window}
	info.count = e.m.Rule(r.Domain, r.ID)
	return info
}

// appendKey appends the key of sub-counter sub of the rule's counter for
// entries (which matched the rule), with the limit own in place of the
// rule's when not nil: the key appendRuleKey names, from the parts made
// ready (TestRuleKeyParts checks they agree).
func (ri *ruleInfo) appendKey(b []byte, entries []rules.Entry, sub int, own *sluice.Limit) []byte {
	path := ri.rule.Path
	b = append(b, ri.head...)
	b = appendEscaped(b, path[0].Counted(entries[0].Value))
	b = append(b, ri.ids[sub]...)
	if own != nil {
		b = appendLimit(b, *own)
	} else {
		b = append(b, ri.limit...)
	}
	for i := 1; i < len(entries); i++ {
		b = append(b, ri.steps[i-1]...)
		b = appendEscaped(b, path[i].Counted(entries[i].Value))
	}
	return b
}

// appendGivenKey appends the key of a limit lim given in a request with
// entries (see keys.go).
func (d *domainInfo) appendGivenKey(b []byte, entries []rules.Entry, lim sluice.Limit) []byte {
	b = append(b, d.head...)
	b = appendEscaped(b, entries[0].Key)
	b = append(b, '=')
	b = appendEscaped(b, entries[0].Value)
	b = append(b, "}|o|"...)
	b = appendLimit(b, lim)
	for i := 1; i < len(entries); i++ {
		b = append(b, '|')
		b = appendEscaped(b, entries[i].Key)
		b = append(b, '=')
		b = appendEscaped(b, entries[i].Value)
	}
	return b
}

// calendarLimit is rules.Calendar.Limit for the rule's calendar, from the
// period cached while now is in it (a period is computed once, not per
// check).
func (ri *ruleInfo) calendarLimit(now time.Time, quota int64) (sluice.Limit, time.Duration) {
	t := now.UnixMicro()
	if c := ri.cal.Load(); c != nil && c.from <= t && t < c.until {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Quota: quota, Window: c.window}, c.excess
	}
	cal := ri.rule.Calendar
	lim, excess := cal.Limit(now, quota)
	from, until := cal.Bounds(now)
	ri.cal.Store(&calPeriod{from: from.UnixMicro(), until: until.UnixMicro(), window: lim.Window, excess: excess})
	return lim, excess
}
