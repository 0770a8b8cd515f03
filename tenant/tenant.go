// Package tenant holds quotas per customer: each tenant's tier and its own
// overrides of the rule files' limits, kept in an in-memory snapshot that a
// Registry fills from a Source (tenant/pg reads PostgreSQL) and swaps
// atomically, so that a check never waits on the database.
//
// A matched rule's limit for one request is resolved in this order: the
// tenant's own override for the rule (named by the rule's domain and its
// path below the tenant key, rules.Rule.TenantPath; an override of the
// rule's own domain before one of AnyDomain), then the limit the rule file
// gives the tenant's tier, then the rule's own limit. A tenant without a
// record, or whose record is not in effect, is on the free tier.
package tenant

import (
	"encoding/json"
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
	// MaxDomainLen is the longest domain an override may name, in bytes.
	MaxDomainLen = 256
)

// AnyDomain is the domain of an override that applies in every domain: the
// overrides written before overrides had a domain (PostgreSQL migration
// 0002 gives them this one, so their effect does not change on upgrade).
// Prepare refuses it for new overrides. An Override whose Domain is ""
// (the zero value, in snapshots built by programs) means the same.
const AnyDomain = "*"

// Override is one tenant's own limit for the rules of one domain whose
// path below the tenant key is Descriptor.
type Override struct {
	// Domain is the rule file's domain ("api"); AnyDomain for an override
	// kept from before domains (see AnyDomain).
	Domain string
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
	// Written, when set, is the override's limit as written (the admin
	// API's body): Prepare compiles it, against the rule it names, into
	// Limit, RequestsPerUnit, Unit and Calendar, and clears it. When nil,
	// Prepare checks those fields as if they had been written so.
	Written *rules.Spec
}

// written is the override's limit as it would be written: the Spec
// Prepare checks when Written is nil.
func (o *Override) written() *rules.Spec {
	if o.Written != nil {
		return o.Written
	}
	s := &rules.Spec{RequestsPerUnit: o.Limit.Quota, Burst: o.Limit.Burst, Unit: o.Unit,
		Given: rules.FieldRequestsPerUnit}
	if o.Unit == "" && !o.Calendar && o.Limit.Window != 0 {
		s.Window = o.Limit.Window.String()
	}
	if o.Limit.Algorithm != 0 {
		s.Algorithm = o.Limit.Algorithm.String()
	}
	return s
}

// Record is everything kept about one tenant.
type Record struct {
	// Tenant is the value of the tenant key in requests ("acme").
	Tenant string
	// Tier is the tenant's plan.
	Tier rules.Tier
	// Overrides are the tenant's own limits, at most one per Domain and
	// Descriptor.
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

// DenyEntry is one entry of a domain's deny list kept by the admin API
// (beside the rule files' deny lists; see rules.DenyList): requests naming
// Key with Value (exact), with an address in CIDR, or with any value
// (Value and CIDR both ""), are refused with reason deny_list.
type DenyEntry struct {
	Domain, Key, Value, CIDR string
	// Reason is free text for operators (at most MaxDenyReason bytes).
	Reason    string
	Actor     string // the admin token that added it
	CreatedAt time.Time
}

// ErrDenyFull is returned when adding a deny entry while MaxDenyEntries
// are kept already.
var ErrDenyFull = fmt.Errorf("tenant: deny list full (%d entries)", MaxDenyEntries)

// Bounds of DenyEntry.
const (
	// MaxDenyReason bounds DenyEntry.Reason, in bytes.
	MaxDenyReason = 512
	// MaxDenyEntries bounds the entries kept, over every domain.
	MaxDenyEntries = 100_000
)

// AuditEntry is one row of the audit log: who changed what, when, with the
// subject's state before and after (JSON).
type AuditEntry struct {
	// ID orders the rows: a row written later has a larger ID.
	ID      int64
	At      time.Time
	Actor   string          // the admin token's name
	Action  string          // put, delete, switch, reset
	Subject string          // "tenant:acme", "rule:<domain>/<rule ID>"
	Before  json.RawMessage // nil when there was nothing before
	After   json.RawMessage // nil when nothing is left
}

// AuditQuery selects audit rows. The zero value selects every row, newest
// first, in pages of 100.
type AuditQuery struct {
	// Tenant, if set, keeps the rows about that tenant (subject
	// "tenant:<Tenant>": its record's changes and its resets).
	Tenant string
	// Actor, if set, keeps the rows of that actor.
	Actor string
	// Since and Until, if set, keep rows with Since <= At < Until.
	Since, Until time.Time
	// Before, if above 0, keeps rows with an ID below it: the cursor of the
	// next page (the ID of the last row of the previous one).
	Before int64
	// Limit is the page size, 1 to MaxAuditPage; zero means 100.
	Limit int
}

// MaxAuditPage is the largest page of audit rows one query returns.
const MaxAuditPage = 1000

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
// An override must name a loaded domain with a tenant_key (not AnyDomain)
// and a rule of that domain (its rules.Rule.TenantPath) that is not a
// concurrency limit; its limit must be valid; ExpiresAt must be after
// EffectiveAt.
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
	type pathKey struct{ domain, path string }
	byPath := map[pathKey]*rules.Rule{}
	domains := map[string]bool{} // domains with a tenant key
	for _, r := range snap.Rules() {
		if r.TenantDepth > 0 {
			domains[r.Domain] = true
		}
		if r.TenantDepth > 0 && !r.Unlimited {
			if _, seen := byPath[pathKey{r.Domain, r.TenantPath}]; !seen {
				byPath[pathKey{r.Domain, r.TenantPath}] = r
			}
		}
	}
	out := make([]Override, len(rec.Overrides))
	seen := map[pathKey]int{}
	for i, o := range rec.Overrides {
		f := fmt.Sprintf("overrides[%d]", i)
		switch {
		case o.Domain == "":
			bad(f+".domain", "required: the domain of the rule file whose rule this overrides")
			continue
		case o.Domain == AnyDomain:
			bad(f+".domain", "%q (every domain) is kept only for overrides written before overrides had a domain; name one domain", AnyDomain)
			continue
		case len(o.Domain) > MaxDomainLen:
			bad(f+".domain", "longer than %d bytes", MaxDomainLen)
			continue
		case !domains[o.Domain]:
			bad(f+".domain", "no domain %q with a tenant_key is loaded", o.Domain)
			continue
		}
		if len(o.Descriptor) > MaxDescriptorLen {
			bad(f+".descriptor", "longer than %d bytes", MaxDescriptorLen)
			continue
		}
		k := pathKey{o.Domain, o.Descriptor}
		if j, dup := seen[k]; dup {
			bad(f+".descriptor", "%q in domain %q is also overrides[%d]", o.Descriptor, o.Domain, j)
			continue
		}
		seen[k] = i
		r := byPath[k]
		if r == nil {
			bad(f+".descriptor", "domain %q has no rule below its tenant key with the path %q", o.Domain, o.Descriptor)
			continue
		}
		if r.Limit.Algorithm == sluice.Concurrency {
			bad(f+".descriptor", "%q is a concurrency limit; tenants cannot override it", o.Descriptor)
			continue
		}
		tl, err := o.written().TierLimit(rules.OverrideOf(r))
		if err != nil {
			var se rules.SpecErrors
			if !errors.As(err, &se) {
				bad(f, "%v", err)
				continue
			}
			for _, e := range se.At(f) {
				bad(e.Field, "%s", e.Msg)
			}
			continue
		}
		o.Limit, o.RequestsPerUnit, o.Unit, o.Calendar, o.Written = tl.Limit, tl.RequestsPerUnit, tl.Unit, tl.Calendar, nil
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
