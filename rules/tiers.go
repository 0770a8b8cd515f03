package rules

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice"
)

// Tenants and tiers: Sluice's extension for quotas per customer.
//
// A domain may name its tenant key at the top of the file, and a rate_limit
// on a path through that key may give limits per tier beside its default:
//
//	domain: api
//	tenant_key: api_key
//	descriptors:
//	  - key: api_key
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 100          # the free (default) tier
//	      tiers:
//	        pro: {requests_per_unit: 1000}
//	        enterprise: {requests_per_unit: 10000, unit: hour}
//
// A tier's limit takes the rule's unit (or window) and algorithm unless it
// names its own; its burst is its own (0 means its quota). Files without
// tenant_key and tiers read exactly as envoyproxy/ratelimit reads them.

// Tier is a tenant's plan. The zero value is TierFree, the tier of a tenant
// without a record.
type Tier uint8

// The tiers.
const (
	// TierFree is the default tier: a rule's own limit unless it gives a
	// free tier limit.
	TierFree Tier = iota
	// TierPro and TierEnterprise take their limits from a rule's tiers,
	// else the rule's own limit.
	TierPro
	TierEnterprise
	// TierCustom has no tier limits of its own: a tenant on it gets its
	// per-tenant overrides, and elsewhere the rule's own limit.
	TierCustom
	// NumTiers is the number of tiers.
	NumTiers
)

var tierNames = [NumTiers]string{"free", "pro", "enterprise", "custom"}

// String returns the tier's name ("free", "pro", "enterprise", "custom").
func (t Tier) String() string { return enumName(tierNames[:], t, "Tier") }

// ParseTier returns the tier named s (lower case, as String spells it).
func ParseTier(s string) (Tier, error) { return parseEnum[Tier](tierNames[:], s, "tier") }

// TierLimit is the limit one tier has under a rule.
type TierLimit struct {
	// Limit is the limit to enforce.
	Limit sluice.Limit
	// RequestsPerUnit and Unit are the envoy spelling, for current_limit;
	// Unit is "" when the limit uses a window no envoy unit names.
	RequestsPerUnit uint32
	Unit            string
	// Line is where the tier's limit is in the rule file.
	Line int
	// Calendar: the limit counts the rule's calendar periods (a tier of a
	// calendar rule that names no unit or window of its own).
	Calendar bool
}

// TenantKey returns the key that names a tenant in domain (the file's
// tenant_key), or "" when the domain has none.
func (s *Snapshot) TenantKey(domain string) string {
	if s == nil {
		return ""
	}
	return s.tenantKeys[domain]
}

// TenantPathOf spells the steps of a rule's path below its tenant key the
// way per-tenant overrides name them: "key:value" for a step with a value
// (or wildcard pattern), "key" for a bare key, joined by "|"; "" for the
// rule at the tenant key itself.
func TenantPathOf(steps []Step) string { return joinSteps(steps, '|', ':') }

var tierLimitKeys = []string{"requests_per_unit", "unit", "window", "algorithm", "burst"}

// tiers reads rate_limit.tiers for rule r, whose own limit is already
// known.
func (p *parser) tiers(n *yaml.Node, field string, r *Rule) bool {
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, field, "want a mapping of tier name to limit, got %s", kindName(n))
		return false
	}
	if r.Limit.Algorithm == sluice.Concurrency {
		p.add(n.Line, field, "not available for concurrency limits (a lease is released against the rule's own limit)")
		return false
	}
	good := true
	names := tierNames[:TierCustom] // custom takes no tier limits
	p.fields(n, field, names, func(name string, _, v *yaml.Node) {
		tier, _ := ParseTier(name)
		tl := p.tierLimit(v, join(field, name), r)
		if tl == nil {
			good = false
			return
		}
		r.Tiers[tier] = tl
	})
	return good
}

func (p *parser) tierLimit(n *yaml.Node, field string, r *Rule) *TierLimit {
	tl := &TierLimit{Line: n.Line, Unit: r.Unit}
	lim := sluice.Limit{Algorithm: r.Limit.Algorithm, Window: r.Limit.Window}
	var rpuNode, unitNode, windowNode, algNode, burstNode *yaml.Node
	good := true
	ok := p.fields(n, field, tierLimitKeys, func(key string, _, v *yaml.Node) {
		f := join(field, key)
		switch key {
		case "requests_per_unit":
			rpuNode = v
			if u, ok := p.integer(v, f, 1<<32-1); ok {
				tl.RequestsPerUnit, lim.Quota = uint32(u), int64(u)
			} else {
				good = false
			}
		case "unit":
			unitNode = v
			s, ok := p.str(v, f)
			w, known := UnitWindow(s)
			switch {
			case !ok:
				good = false
			case !known:
				p.add(v.Line, f, "unknown unit %q (want one of %s)", s, unitList)
				good = false
			default:
				tl.Unit, lim.Window = strings.ToLower(s), w
			}
		case "window":
			windowNode = v
			s, ok := p.str(v, f)
			if !ok {
				good = false
				return
			}
			w, err := time.ParseDuration(s)
			if err != nil || w <= 0 {
				p.add(v.Line, f, "want a positive duration such as 90s or 1h30m, got %q", s)
				good = false
				return
			}
			tl.Unit, lim.Window = "", w
		case "algorithm":
			algNode = v
			s, ok := p.str(v, f)
			if !ok {
				good = false
				return
			}
			a, err := sluice.ParseAlgorithm(s)
			if err != nil {
				p.add(v.Line, f, "%v", err)
				good = false
				return
			}
			if a == sluice.Concurrency {
				p.add(v.Line, f, "concurrency is not available for a tier")
				good = false
				return
			}
			lim.Algorithm = a
		case "burst":
			burstNode = v
			b, ok := p.integer(v, f, sluice.MaxExact)
			lim.Burst, good = int64(b), good && ok
		}
	})
	if !ok {
		return nil
	}
	if unitNode != nil && windowNode != nil {
		p.add(windowNode.Line, join(field, "window"), "give unit or window, not both")
		good = false
	}
	if r.Calendar != nil && unitNode == nil && windowNode == nil {
		tl.Calendar = true
		if lim.Algorithm != sluice.FixedWindow {
			p.add(algNode.Line, join(field, "algorithm"), "a calendar quota is a fixed_window; %v cannot reset at calendar boundaries", lim.Algorithm)
			good = false
		}
	}
	if rpuNode == nil {
		p.add(n.Line, join(field, "requests_per_unit"), "required")
		good = false
	}
	if burstNode != nil && !lim.Algorithm.HasBurst() {
		p.add(burstNode.Line, join(field, "burst"), "%v has no burst; remove it", lim.Algorithm)
		good = false
	}
	if !good {
		return nil
	}
	if err := lim.Validate(); err != nil {
		p.limitProblems(err, n, field, map[string]*yaml.Node{
			"window": firstNode(windowNode, unitNode), "quota": rpuNode, "burst": burstNode, "algorithm": algNode,
		})
		return nil
	}
	tl.Limit = lim
	return tl
}

// tenantRules sets the tenant fields of a domain's rules and reports rules
// with tiers that no tenant key reaches.
func tenantRules(t *domainTree, probs *Errors) {
	walk(t.top, func(d *dnode) {
		r := d.rule
		for i, st := range r.Path {
			if t.tenantKey != "" && st.Key == t.tenantKey {
				r.TenantDepth = i + 1
				r.TenantPath = TenantPathOf(r.Path[i+1:])
				break
			}
		}
		if r.TenantDepth == 0 && t.tierLines[r] != 0 {
			msg := "the file names no tenant_key, so no tenant is ever on a tier"
			if t.tenantKey != "" {
				msg = fmt.Sprintf("no step of this rule's descriptor path has the tenant key %q", t.tenantKey)
			}
			*probs = append(*probs, Problem{File: t.file, Line: t.tierLines[r], Field: d.field + ".rate_limit.tiers", Msg: msg})
		}
	})
}

// Switch is a rule's runtime state, set fleet-wide by the admin API's kill
// switch without editing rule files. The zero value is SwitchOn.
type Switch uint8

// The switch states.
const (
	// SwitchOn: the rule applies as written.
	SwitchOn Switch = iota
	// SwitchOff: the rule is ignored, as if no rule had matched.
	SwitchOff
	// SwitchShadow: the rule counts, but a denial is reported as allowed
	// (as shadow_mode: true).
	SwitchShadow
)

var switchNames = [...]string{"on", "off", "shadow"}

// String returns "on", "off" or "shadow".
func (s Switch) String() string { return enumName(switchNames[:], s, "Switch") }

// ParseSwitch returns the Switch spelled s ("on", "off", "shadow").
func ParseSwitch(s string) (Switch, error) { return parseEnum[Switch](switchNames[:], s, "state") }

// enumName returns names[v], or typ(v) for a value with no name.
func enumName[T ~uint8](names []string, v T, typ string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// parseEnum returns the value whose name is s, or an error calling s an
// unknown what and listing the names.
func parseEnum[T ~uint8](names []string, s, what string) (T, error) {
	for i, n := range names {
		if s == n {
			return T(i), nil
		}
	}
	want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return 0, fmt.Errorf("unknown %s %q (want %s)", what, s, want)
}
