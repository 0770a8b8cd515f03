package admin

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/internal/strictjson"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/tenant"
)

// QuotaRequest is the body of PUT /admin/v1/quotas/{tenant}.
type QuotaRequest struct {
	// Tier is free, pro, enterprise or custom. Required.
	Tier string `json:"tier"`
	// Overrides replace the tenant's whole set of overrides.
	Overrides []OverrideJSON `json:"overrides"`
	// EffectiveAt (RFC 3339) is when the record applies; absent means now.
	EffectiveAt *time.Time `json:"effective_at"`
	// ExpiresAt (RFC 3339) is when it stops; absent or null means never.
	ExpiresAt *time.Time `json:"expires_at"`
}

// OverrideJSON is one override, in requests and answers.
type OverrideJSON struct {
	// Domain is the rule file's domain whose rule this overrides. Required
	// in requests; "*" in answers marks an override kept from before
	// overrides had a domain, which applies in every domain.
	Domain string `json:"domain"`
	// Descriptor names the domain's rule by its path below the tenant key:
	// "endpoint:POST /api/v1/orders" ("" for the rule at the tenant key).
	Descriptor string `json:"descriptor"`
	// Spec is the limit, with the rule files' keys (requests_per_unit,
	// unit or window, algorithm, burst; rules.OverrideOf says which it
	// takes): the algorithm defaults to the rule's, and neither unit nor
	// window counts a calendar rule's periods.
	rules.Spec
	EffectiveAt *time.Time `json:"effective_at,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	// Calendar, in answers: the override counts its rule's calendar
	// periods (a PUT gets that by giving neither unit nor window for a
	// calendar rule). Ignored in requests.
	Calendar bool `json:"calendar,omitempty"`
}

// QuotaJSON is a tenant's record as the API answers it.
type QuotaJSON struct {
	Tenant      string         `json:"tenant"`
	Tier        string         `json:"tier"`
	Overrides   []OverrideJSON `json:"overrides"`
	EffectiveAt time.Time      `json:"effective_at"`
	ExpiresAt   *time.Time     `json:"expires_at"`
	CreatedAt   time.Time      `json:"created_at"`
	UpdatedAt   time.Time      `json:"updated_at"`
	// Quotas is the limit the tenant gets from each rule below a tenant
	// key, now, and where it comes from; present in single-tenant answers.
	Quotas []ResolvedJSON `json:"quotas,omitempty"`
}

// ResolvedJSON is the limit one rule enforces for a tenant.
type ResolvedJSON struct {
	Domain     string `json:"domain"`
	Rule       string `json:"rule"`
	Descriptor string `json:"descriptor"`
	// Source is "override", "tier" or "default" (the rule's own limit).
	Source          string `json:"source"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit,omitempty"`
	Window          string `json:"window"`
	Algorithm       string `json:"algorithm"`
	Burst           int64  `json:"burst,omitempty"`
}

// ListJSON is a page of GET /admin/v1/quotas.
type ListJSON struct {
	Tenants []QuotaJSON `json:"tenants"`
	// Next is the after= value of the next page; absent on the last.
	Next string `json:"next,omitempty"`
}

// SwitchJSON is the body of PUT /admin/v1/switches and one entry of its GET.
// Scope is "rule" (the default: Domain and Rule name one rule), "domain"
// (every rule of Domain; no Rule) or "global" (every rule; neither).
type SwitchJSON struct {
	Scope  string `json:"scope,omitempty"`
	Domain string `json:"domain,omitempty"`
	Rule   string `json:"rule,omitempty"`
	// State is on, off or shadow.
	State     string     `json:"state"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// fieldErrors is a 400's list of invalid fields.
type fieldErrors []*tenant.FieldError

func (e fieldErrors) Error() string {
	msgs := make([]string, len(e))
	for i, f := range e {
		msgs[i] = f.Error()
	}
	return strings.Join(msgs, "; ")
}

func asFieldErrors(err error) fieldErrors {
	var out fieldErrors
	var fe fieldErrors
	if errors.As(err, &fe) {
		return fe
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var f *tenant.FieldError
		if errors.As(e, &f) {
			out = append(out, f)
		} else {
			out = append(out, &tenant.FieldError{Field: "body", Msg: e.Error()})
		}
	}
	return out
}

// bodies decodes every admin body: arrays are refused past what the
// endpoints accept as they are read, so a body cannot make the decoder hold
// more (the checks after decoding say the same, in the same words).
var bodies = strictjson.New(
	strictjson.MaxItems[OverrideJSON](tenant.MaxOverrides, func(n int) string {
		return fmt.Sprintf("%d overrides; at most %d", n, tenant.MaxOverrides)
	}),
	strictjson.MaxItems[EntryJSON](service.DefaultMaxEntries, func(n int) string {
		return fmt.Sprintf("%d exceeds the limit max-entries=%d", n, service.DefaultMaxEntries)
	}),
)

// decodeStrict decodes one JSON value into v, strictly, in one pass
// (strictjson.Decode, whose memory is linear in the body). Members v has no
// field for and members named twice in one object come back as soft
// problems, every one of them (up to strictjson.MaxProblems), for the
// caller to report beside its own checks of the decoded value (so a body's
// problems are reported at once); malformed JSON, nesting deeper than
// strictjson.MaxDepth, invalid UTF-8, wrong types and trailing data are
// err, which also carries the soft problems.
func decodeStrict(body []byte, v any) (soft fieldErrors, err error) {
	derr := bodies.Decode(body, v)
	var se *strictjson.Error
	if !errors.As(derr, &se) {
		if derr != nil {
			return nil, fieldErrors{{Field: "body", Msg: derr.Error()}}
		}
		return nil, nil
	}
	for _, p := range se.Problems {
		msg := "unknown field"
		if p.Duplicate {
			msg = "duplicate member (each name may appear once in an object)"
		}
		soft = append(soft, &tenant.FieldError{Field: p.Path, Msg: msg})
	}
	if se.More {
		soft = append(soft, &tenant.FieldError{Field: "body", Msg: fmt.Sprintf("more unknown or repeated members than the %d listed", len(se.Problems))})
	}
	if se.Msg != "" {
		return nil, append(soft, &tenant.FieldError{Field: se.Where(), Msg: se.Msg})
	}
	return soft, nil
}

// DecodeQuota decodes the body of PUT /admin/v1/quotas/{name} into a record
// of tenant name. It checks the body's own shape (types, unknown fields,
// tier, units, windows, algorithms, signs and ranges), naming each bad field
// in a *tenant.FieldError; what needs the rules (domains, descriptors,
// limits) is tenant.Prepare's. It never panics.
func DecodeQuota(body []byte, name string) (tenant.Record, error) {
	var q QuotaRequest
	errs, err := decodeStrict(body, &q)
	if err != nil {
		return tenant.Record{}, err
	}
	bad := func(field, format string, args ...any) {
		errs = append(errs, &tenant.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	rec := tenant.Record{Tenant: name}
	if err := tenant.ValidTenant(name); err != nil {
		bad("tenant", "%v", err)
	}
	if q.Tier == "" {
		bad("tier", "required (free, pro, enterprise or custom)")
	} else if len(q.Tier) > maxEcho {
		bad("tier", "%d bytes; want free, pro, enterprise or custom", len(q.Tier))
	} else if t, err := rules.ParseTier(q.Tier); err != nil {
		bad("tier", "%v", err)
	} else {
		rec.Tier = t
	}
	if q.EffectiveAt != nil {
		rec.EffectiveAt = *q.EffectiveAt
	}
	if q.ExpiresAt != nil {
		rec.ExpiresAt = *q.ExpiresAt
	}
	if len(q.Overrides) > tenant.MaxOverrides {
		bad("overrides", "%d overrides; at most %d", len(q.Overrides), tenant.MaxOverrides)
		return rec, errs
	}
	for i, o := range q.Overrides {
		f := fmt.Sprintf("overrides[%d]", i)
		ov := tenant.Override{Domain: o.Domain, Descriptor: o.Descriptor, Written: &q.Overrides[i].Spec}
		// What the limit says without its rule is reported with the
		// body's other problems; tenant.Prepare checks it all, against
		// the rule, with the same validator.
		if err := o.CheckFields(rules.OverrideOf(nil)); err != nil {
			var se rules.SpecErrors
			if errors.As(err, &se) {
				for _, e := range se.At(f) {
					bad(e.Field, "%s", e.Msg)
				}
			}
		}
		if o.EffectiveAt != nil {
			ov.EffectiveAt = *o.EffectiveAt
		}
		if o.ExpiresAt != nil {
			ov.ExpiresAt = *o.ExpiresAt
		}
		rec.Overrides = append(rec.Overrides, ov)
	}
	if len(errs) > 0 {
		return rec, errs
	}
	return rec, nil
}

// maxEcho bounds the bytes of a refused value quoted back in an error, so
// that a 256 KiB value is not answered with a 256 KiB message.
const maxEcho = 64

// echo is s cut to maxEcho bytes (on a rune boundary), marked "…" when cut.
func echo(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	n := maxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// maxSwitchName bounds a switch's domain and rule.
const maxSwitchName = 1024

// SwitchScope returns the scope of a switch: "global" (no domain),
// "domain" (no rule) or "rule".
func SwitchScope(domain, rule string) string {
	switch {
	case domain == "":
		return "global"
	case rule == "":
		return "domain"
	}
	return "rule"
}

// DecodeSwitch decodes the body of PUT /admin/v1/switches: a domain switch
// has rule "", the global switch domain and rule "".
func DecodeSwitch(body []byte) (domain, rule string, state rules.Switch, err error) {
	var s SwitchJSON
	errs, err := decodeStrict(body, &s)
	if err != nil {
		return "", "", 0, err
	}
	switch s.Scope {
	case "", "rule":
		if s.Domain == "" {
			errs = append(errs, &tenant.FieldError{Field: "domain", Msg: "required"})
		}
		if s.Rule == "" {
			errs = append(errs, &tenant.FieldError{Field: "rule", Msg: "required (a rule ID, as /debug/rules lists them)"})
		}
	case "domain":
		if s.Domain == "" {
			errs = append(errs, &tenant.FieldError{Field: "domain", Msg: "required"})
		}
		if s.Rule != "" {
			errs = append(errs, &tenant.FieldError{Field: "rule", Msg: `must be empty with scope "domain"`})
		}
	case "global":
		if s.Domain != "" {
			errs = append(errs, &tenant.FieldError{Field: "domain", Msg: `must be empty with scope "global"`})
		}
		if s.Rule != "" {
			errs = append(errs, &tenant.FieldError{Field: "rule", Msg: `must be empty with scope "global"`})
		}
	default:
		errs = append(errs, &tenant.FieldError{Field: "scope", Msg: fmt.Sprintf("unknown scope %q (want rule, domain or global)", s.Scope)})
	}
	for _, f := range []struct{ name, v string }{{"domain", s.Domain}, {"rule", s.Rule}} {
		if len(f.v) > maxSwitchName {
			errs = append(errs, &tenant.FieldError{Field: f.name, Msg: fmt.Sprintf("%d bytes, above %d", len(f.v), maxSwitchName)})
		}
	}
	st, perr := rules.ParseSwitch(echo(s.State))
	if perr != nil {
		errs = append(errs, &tenant.FieldError{Field: "state", Msg: perr.Error()})
	}
	if len(errs) > 0 {
		return "", "", 0, errs
	}
	return s.Domain, s.Rule, st, nil
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func overrideJSON(o tenant.Override) OverrideJSON {
	d := o.Domain
	if d == "" {
		d = tenant.AnyDomain
	}
	j := OverrideJSON{Domain: d, Descriptor: o.Descriptor, ExpiresAt: optTime(o.ExpiresAt), EffectiveAt: optTime(o.EffectiveAt),
		Spec: rules.Spec{RequestsPerUnit: int64(o.RequestsPerUnit), Unit: o.Unit, Algorithm: o.Limit.Algorithm.String(), Burst: o.Limit.Burst}}
	switch {
	case o.Calendar:
		j.Unit, j.Calendar = "", true
	case o.Unit == "":
		j.Window = o.Limit.Window.String()
	}
	return j
}

func quotaJSON(rec tenant.Record) QuotaJSON {
	q := QuotaJSON{Tenant: rec.Tenant, Tier: rec.Tier.String(), Overrides: []OverrideJSON{},
		EffectiveAt: rec.EffectiveAt.UTC(), ExpiresAt: optTime(rec.ExpiresAt), CreatedAt: rec.CreatedAt.UTC(), UpdatedAt: rec.UpdatedAt.UTC()}
	for _, o := range rec.Overrides {
		q.Overrides = append(q.Overrides, overrideJSON(o))
	}
	return q
}
