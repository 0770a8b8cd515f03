package tenant

import (
	"maps"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Snapshot is an immutable view of every tenant record and rule switch,
// compact enough to hold a million tenants (see BENCHMARKS.md). It is safe
// for concurrent use. The zero value and nil hold nothing: every tenant is
// on the free tier and every rule on.
type Snapshot struct {
	// base holds the records of the last full load; delta the records that
	// changed since (nil: removed), checked first. A change copies only
	// delta, so applying one costs O(len(delta)), not O(tenants).
	base     *table
	delta    map[string]*entry
	switches map[switchKey]rules.Switch
	// at is when the data was read, in Unix µs: a record effective by then
	// needs no clock read on lookups.
	at int64
}

type switchKey struct{ domain, rule string }

// entry is a record as lookups need it.
type entry struct {
	tier        rules.Tier
	from, until int64 // Unix µs; until 0: never
	ovs         []ovr
}

type ovr struct {
	domain      string // AnyDomain: every domain
	path        string
	lim         rules.TierLimit
	from, until int64
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func toEntry(rec *Record) entry {
	e := entry{tier: rec.Tier, from: micros(rec.EffectiveAt), until: micros(rec.ExpiresAt)}
	if len(rec.Overrides) > 0 {
		e.ovs = make([]ovr, 0, len(rec.Overrides))
		for _, o := range rec.Overrides {
			// Prepare checked them on the way in; a row edited behind the
			// admin API's back must still never reach a store invalid.
			if o.Limit.Validate() != nil || o.Limit.Algorithm == sluice.Concurrency {
				continue
			}
			d := o.Domain
			if d == "" {
				d = AnyDomain
			}
			e.ovs = append(e.ovs, ovr{domain: d, path: o.Descriptor, from: micros(o.EffectiveAt), until: micros(o.ExpiresAt),
				lim: rules.TierLimit{Limit: o.Limit, RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, Calendar: o.Calendar}})
		}
	}
	return e
}

// NewSnapshot builds a snapshot of records and switches read at time at.
// Records with the same tenant: the last wins.
func NewSnapshot(records []Record, switches []RuleSwitch, at time.Time) *Snapshot {
	b := newBuilder(len(records), at)
	for i := range records {
		b.add(&records[i])
	}
	return b.done(switches)
}

// builder fills a snapshot one record at a time (a full load streams).
type builder struct{ s *Snapshot }

func newBuilder(n int, at time.Time) *builder {
	return &builder{s: &Snapshot{base: newTable(n), at: at.UnixMicro()}}
}

// add adds a record; names longer than MaxTenantLen are skipped (Prepare
// refuses them on the way in).
func (b *builder) add(rec *Record) {
	if len(rec.Tenant) <= MaxTenantLen {
		b.s.base.add(rec.Tenant, toEntry(rec))
	}
}

func (b *builder) done(switches []RuleSwitch) *Snapshot {
	b.s.base.finish()
	b.s.switches = switchMap(switches)
	return b.s
}

func switchMap(switches []RuleSwitch) map[switchKey]rules.Switch {
	var m map[switchKey]rules.Switch
	for _, sw := range switches {
		if sw.State == rules.SwitchOn {
			continue
		}
		if m == nil {
			m = map[switchKey]rules.Switch{}
		}
		m[switchKey{sw.Domain, sw.Rule}] = sw.State
	}
	return m
}

// withTenant returns a copy of s where tenant's record is rec (nil: none).
func (s *Snapshot) withTenant(tenant string, rec *Record, at time.Time) *Snapshot {
	n := *s
	n.delta = make(map[string]*entry, len(s.delta)+1)
	maps.Copy(n.delta, s.delta)
	if rec == nil {
		n.delta[tenant] = nil
	} else {
		e := toEntry(rec)
		n.delta[tenant] = &e
	}
	n.at = min(s.at, at.UnixMicro())
	return &n
}

// withSwitches returns a copy of s with the given switches.
func (s *Snapshot) withSwitches(switches []RuleSwitch) *Snapshot {
	n := *s
	n.switches = switchMap(switches)
	return &n
}

// Len returns the number of tenants with a record.
func (s *Snapshot) Len() int {
	if s == nil {
		return 0
	}
	n := s.base.len()
	for t, e := range s.delta {
		_, inBase := s.base.get(t)
		switch {
		case e == nil && inBase:
			n--
		case e != nil && !inBase:
			n++
		}
	}
	return n
}

func (s *Snapshot) lookup(tenant string) (entry, bool) {
	if len(s.delta) > 0 {
		if e, ok := s.delta[tenant]; ok {
			if e == nil {
				return entry{}, false
			}
			return *e, true
		}
	}
	return s.base.get(tenant)
}

// active reports whether [from, until) holds now, reading the clock only
// when the answer can have changed since the snapshot was read.
func active(from, until, at int64, now func() time.Time) bool {
	if from <= at && until == 0 {
		return true
	}
	t := now().UnixMicro()
	return from <= t && (until == 0 || t < until)
}

// Switch returns the kill-switch state in force for a rule: the strongest
// of the rule's own switch, its domain's (RuleSwitch.Rule "") and the
// global one (Domain and Rule ""), where off is stronger than shadow and
// shadow than on. It does not allocate.
func (s *Snapshot) Switch(domain, ruleID string) rules.Switch {
	if s == nil || len(s.switches) == 0 {
		return rules.SwitchOn
	}
	sw := s.switches[switchKey{domain, ruleID}]
	sw = strongerSwitch(sw, s.switches[switchKey{domain, ""}])
	return strongerSwitch(sw, s.switches[switchKey{"", ""}])
}

// strongerSwitch returns the switch that enforces less: off, then shadow,
// then on.
func strongerSwitch(a, b rules.Switch) rules.Switch {
	if a == rules.SwitchOff || b == rules.SwitchOff {
		return rules.SwitchOff
	}
	if a == rules.SwitchShadow || b == rules.SwitchShadow {
		return rules.SwitchShadow
	}
	return rules.SwitchOn
}

// Resolve returns the limit rule r enforces for a request with entries
// (nil: the rule's own Limit) and the rule's switch state. now is read only
// for records whose effective or expiry time lies after the snapshot was
// read. It does not allocate.
func (s *Snapshot) Resolve(r *rules.Rule, entries []rules.Entry, now func() time.Time) (*rules.TierLimit, rules.Switch) {
	tl, _, sw := s.ResolveTier(r, entries, now)
	return tl, sw
}

// ResolveTier is Resolve that also returns the tier the request's tenant is
// on (rules.NumTiers when r is not below a tenant key, or the request names
// no tenant).
func (s *Snapshot) ResolveTier(r *rules.Rule, entries []rules.Entry, now func() time.Time) (*rules.TierLimit, rules.Tier, rules.Switch) {
	tenantRule := r.TenantDepth != 0 && r.TenantDepth <= len(entries)
	if s == nil {
		if !tenantRule {
			return r.Tiers[rules.TierFree], rules.NumTiers, rules.SwitchOn
		}
		return r.Tiers[rules.TierFree], rules.TierFree, rules.SwitchOn
	}
	sw := s.Switch(r.Domain, r.ID)
	if !tenantRule {
		return nil, rules.NumTiers, sw
	}
	e, ok := s.lookup(entries[r.TenantDepth-1].Value)
	if !ok || !active(e.from, e.until, s.at, now) {
		return r.Tiers[rules.TierFree], rules.TierFree, sw
	}
	tier := rules.Tier(e.tier)
	var wild *ovr // an override of every domain: used when none names r's
	for i := range e.ovs {
		o := &e.ovs[i]
		if o.path != r.TenantPath || !active(o.from, o.until, s.at, now) {
			continue
		}
		if o.domain == r.Domain {
			return &o.lim, tier, sw
		}
		if o.domain == AnyDomain && wild == nil {
			wild = o
		}
	}
	if wild != nil {
		return &wild.lim, tier, sw
	}
	if e.tier < rules.NumTiers {
		return r.Tiers[e.tier], tier, sw
	}
	return nil, tier, sw
}
