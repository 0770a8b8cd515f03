package rules

import (
	"fmt"
	"strings"

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

// tiers decodes rate_limit.tiers into s.Tiers: a mapping of tier name
// (free, pro, enterprise) to a Spec of tierLimitKeys. The validator
// (Spec.Rule) compiles them against the rule's own limit.
func (p *parser) tiers(n *yaml.Node, field string, s *Spec) bool {
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, field, "want a mapping of tier name to limit, got %s", kindName(n))
		return false
	}
	good := true
	names := tierNames[:TierCustom] // custom takes no tier limits
	ok := p.fields(n, field, names, func(name string, _, v *yaml.Node) {
		ts, ok := p.spec(v, join(field, name), tierLimitKeys)
		if !ok {
			good = false
			return
		}
		if s.Tiers == nil {
			s.Tiers = map[string]*Spec{}
		}
		s.Tiers[name] = ts
	})
	return ok && good
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
