// Package tenant holds quotas per customer: each tenant's tier and its own
// overrides of the rule files' limits, kept in an in-memory snapshot that a
// Registry fills from a Source (tenant/pg reads PostgreSQL) and swaps
// atomically, so that a check never waits on the database.
//
// A matched rule's limit for one request is resolved in this order: the
// tenant's own override for the rule (named by its path below the tenant
// key, rules.Rule.TenantPath), then the limit the rule file gives the
// tenant's tier, then the rule's own limit. A tenant without a record, or
// whose record is not in effect, is on the free tier.
package tenant

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// ErrUnavailable marks an error of a Source or store that could not reach
// its database (as opposed to one that refused a request). The admin API
// answers 503 for it.
var ErrUnavailable = errors.New("tenant: database unavailable")

// Bounds on what a record may hold.
const (
	// MaxTenantLen is the longest tenant key, in bytes.
	MaxTenantLen = 256
	// MaxDescriptorLen is the longest override descriptor, in bytes.
	MaxDescriptorLen = 1024
	// MaxOverrides is the most overrides one tenant may have.
	MaxOverrides = 256
)

// Override is one tenant's own limit for the rules whose path below the
// tenant key is Descriptor.
type Override struct {
	// Descriptor is the rules' TenantPath: "endpoint:POST /api/v1/orders",
	// steps joined by "|", "" for the rule at the tenant key itself.
	Descriptor string
	// Limit is the limit to enforce.
	Limit sluice.Limit
	// RequestsPerUnit and Unit are its envoy spelling; Unit is "" when the
	// limit has a window no envoy unit names.
	RequestsPerUnit uint32
	Unit            string
	// EffectiveAt is when the override starts to apply; ExpiresAt when it
	// stops (zero: never).
	EffectiveAt time.Time
	ExpiresAt   time.Time
	// Calendar: the override counts the calendar periods of the rule it
	// names (it gave no unit or window, and the rule is a calendar quota);
	// Limit.Window is then the rule's nominal window.
	Calendar bool
}

// Record is everything kept about one tenant.
type Record struct {
	// Tenant is the value of the tenant key in requests ("acme").
	Tenant string
	// Tier is the tenant's plan.
	Tier rules.Tier
	// Overrides are the tenant's own limits, at most one per Descriptor.
	Overrides []Override
	// EffectiveAt and ExpiresAt bound when the record (its tier) applies;
	// outside them the tenant is on the free tier. A zero ExpiresAt never
	// expires.
	EffectiveAt time.Time
	ExpiresAt   time.Time
	// CreatedAt and UpdatedAt are kept by the Source.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// RuleSwitch is the kill-switch state of one rule, of a whole domain
// (Rule ""), or of every rule (Domain and Rule ""); see Snapshot.Switch
// for how they combine.
type RuleSwitch struct {
	Domain string
	// Rule is the rule's ID (rules.Rule.ID).
	Rule      string
	State     rules.Switch
	UpdatedAt time.Time
}

// FieldError is one invalid field of a record, named as in the admin API's
// JSON ("overrides[0].unit").
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "field: msg".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// ValidTenant reports whether s may name a tenant: 1 to MaxTenantLen bytes
// of UTF-8 without control characters.
func ValidTenant(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case len(s) > MaxTenantLen:
		return fmt.Errorf("longer than %d bytes", MaxTenantLen)
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("contains a control character")
	}
	return nil
}

// Prepare checks rec against the rules in force and completes it: an
// override without an algorithm takes the algorithm of the rule it names,
// and override times left zero take the record's. It returns every problem
// as a *FieldError (joined with errors.Join), and changes nothing of rec
// when there is one.
//
// An override must name a rule that some domain with a tenant_key has
// (rules.Rule.TenantPath), that is not a concurrency limit; its limit must
// be valid; ExpiresAt must be after EffectiveAt.
func Prepare(rec *Record, snap *rules.Snapshot) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if err := ValidTenant(rec.Tenant); err != nil {
		bad("tenant", "%v", err)
	}
	if rec.Tier >= rules.NumTiers {
		bad("tier", "unknown tier %v", rec.Tier)
	}
	if !rec.ExpiresAt.IsZero() && !rec.ExpiresAt.After(rec.EffectiveAt) {
		bad("expires_at", "%s is not after effective_at %s", rec.ExpiresAt.Format(time.RFC3339), rec.EffectiveAt.Format(time.RFC3339))
	}
	if len(rec.Overrides) > MaxOverrides {
		bad("overrides", "%d overrides; at most %d", len(rec.Overrides), MaxOverrides)
		return errors.Join(errs...)
	}
	byPath := map[string]*rules.Rule{}
	for _, r := range snap.Rules() {
		if r.TenantDepth > 0 && !r.Unlimited {
			if _, seen := byPath[r.TenantPath]; !seen {
				byPath[r.TenantPath] = r
			}
		}
	}
	out := make([]Override, len(rec.Overrides))
	seen := map[string]int{}
	for i, o := range rec.Overrides {
		f := fmt.Sprintf("overrides[%d]", i)
		if len(o.Descriptor) > MaxDescriptorLen {
			bad(f+".descriptor", "longer than %d bytes", MaxDescriptorLen)
			continue
		}
		if j, dup := seen[o.Descriptor]; dup {
			bad(f+".descriptor", "%q is also overrides[%d]", o.Descriptor, j)
			continue
		}
		seen[o.Descriptor] = i
		r := byPath[o.Descriptor]
		if r == nil {
			bad(f+".descriptor", "no rule below a tenant key has the path %q", o.Descriptor)
			continue
		}
		if r.Limit.Algorithm == sluice.Concurrency {
			bad(f+".descriptor", "%q is a concurrency limit; tenants cannot override it", o.Descriptor)
			continue
		}
		if o.Limit.Algorithm == 0 {
			o.Limit.Algorithm = r.Limit.Algorithm
		}
		if o.Limit.Window == 0 && o.Unit == "" {
			if r.Calendar == nil {
				bad(f+".unit", "required (or window)")
				continue
			}
			o.Calendar, o.Limit.Window, o.Unit = true, r.Limit.Window, r.Unit
			if o.Limit.Algorithm != sluice.FixedWindow {
				bad(f+".algorithm", "%q is a calendar quota, a fixed_window; give a unit or window for %v", o.Descriptor, o.Limit.Algorithm)
				continue
			}
		}
		if o.Limit.Algorithm == sluice.Concurrency {
			bad(f+".algorithm", "concurrency is not available for an override")
			continue
		}
		if err := o.Limit.Validate(); err != nil {
			for _, e := range unjoin(err) {
				name, msg, _ := strings.Cut(e.Error(), ": ")
				field := map[string]string{"quota": "requests_per_unit", "window": "window", "burst": "burst", "algorithm": "algorithm"}[name]
				if field == "window" && o.Unit != "" {
					field = "unit"
				}
				if field == "" {
					field, msg = "limit", e.Error()
				}
				bad(f+"."+field, "%s", msg)
			}
			continue
		}
		if o.EffectiveAt.IsZero() {
			o.EffectiveAt = rec.EffectiveAt
		}
		if o.ExpiresAt.IsZero() {
			o.ExpiresAt = rec.ExpiresAt
		}
		if !o.ExpiresAt.IsZero() && !o.ExpiresAt.After(o.EffectiveAt) {
			bad(f+".expires_at", "%s is not after effective_at %s", o.ExpiresAt.Format(time.RFC3339), o.EffectiveAt.Format(time.RFC3339))
			continue
		}
		out[i] = o
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	rec.Overrides = out
	return nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
