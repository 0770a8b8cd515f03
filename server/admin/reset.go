package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/tenant"
)

// ResetRequest is the body of POST /admin/v1/reset: one tenant, or the
// counter(s) of one descriptor.
//
//	{"tenant": "acme"}
//	{"domain": "api", "descriptor": [{"key": "api_key", "value": "acme"}, {"key": "endpoint", "value": "POST /api/v1/orders"}]}
type ResetRequest struct {
	// Tenant resets every counter of the tenant (the value of a domain's
	// tenant_key), in every domain.
	Tenant string `json:"tenant,omitempty"`
	// Domain and Descriptor reset the counter a check of that one
	// descriptor uses (every sub-counter of a rule with sub_counters).
	Domain     string      `json:"domain,omitempty"`
	Descriptor []EntryJSON `json:"descriptor,omitempty"`
}

// EntryJSON is one key/value entry of a descriptor.
type EntryJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ResetJSON is the answer of POST /admin/v1/reset.
type ResetJSON struct {
	// KeysReset counts the counters reset.
	KeysReset int `json:"keys_reset"`
	// More: the tenant may have more counters than one reset handles
	// (MaxResetKeys); post the same body again.
	More bool `json:"more"`
	// Audited: an audit row was written in PostgreSQL. False without
	// PostgreSQL (the reset is then in the server log only) and when
	// nothing was reset.
	Audited bool `json:"audited"`
}

// MaxResetKeys bounds the counters one POST /admin/v1/reset resets.
const MaxResetKeys = service.DefaultMaxResetKeys

// DecodeReset decodes the body of POST /admin/v1/reset, naming each bad
// field in a *tenant.FieldError. For one key it also returns the request of
// that one descriptor (with zero hits); for a tenant, req is nil. It never
// panics.
func DecodeReset(body []byte) (rr ResetRequest, req *service.Request, err error) {
	errs, err := decodeStrict(body, &rr)
	if err != nil {
		return rr, nil, err
	}
	bad := func(field, format string, args ...any) {
		errs = append(errs, &tenant.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	one := rr.Domain != "" || rr.Descriptor != nil
	switch {
	case rr.Tenant != "" && one:
		bad("tenant", "give tenant, or domain and descriptor, not both")
	case rr.Tenant != "":
		if err := tenant.ValidTenant(rr.Tenant); err != nil {
			bad("tenant", "%v", err)
		}
	case !one:
		bad("tenant", "required (or domain and descriptor, for one key)")
	default:
		// The sizes a check may have (service.RequestBounds' defaults), named in
		// this body's spelling.
		var lim service.RequestBounds
		overLimit := func(err error) {
			var le *service.LimitError
			var fe *service.FieldError
			switch {
			case errors.As(err, &le):
				field := strings.Replace(le.Field, "descriptors[0].entries", "descriptor", 1)
				bad(field, "%s", strings.TrimPrefix(le.Error(), le.Field+": "))
			case errors.As(err, &fe):
				bad(strings.Replace(fe.Field, "descriptors[0].entries", "descriptor", 1), "%s", fe.Reason)
			}
		}
		if rr.Domain == "" {
			bad("domain", "required with descriptor")
		} else {
			overLimit(lim.CheckDomain(rr.Domain))
		}
		if len(rr.Descriptor) == 0 {
			bad("descriptor", "required with domain: at least one entry")
		} else {
			overLimit(lim.CheckEntries(0, len(rr.Descriptor), func(j int) (string, string) {
				return rr.Descriptor[j].Key, rr.Descriptor[j].Value
			}))
		}
		d := service.Descriptor{Hits: new(uint64)}
		for i, e := range rr.Descriptor {
			if e.Key == "" {
				bad(fmt.Sprintf("descriptor[%d].key", i), "empty")
			}
			d.Entries = append(d.Entries, rules.Entry{Key: e.Key, Value: e.Value})
		}
		req = &service.Request{Domain: rr.Domain, Descriptors: []service.Descriptor{d}}
	}
	if len(errs) > 0 {
		return rr, nil, errs
	}
	return rr, req, nil
}

// auditError is an audit row that could not be written: nothing was reset.
type auditError struct{ err error }

func (e auditError) Error() string { return "audit: " + e.err.Error() }
func (e auditError) Unwrap() error { return e.err }

// resetAudit is the detail of a reset's audit row.
type resetAudit struct {
	Tenant     string      `json:"tenant,omitempty"`
	Domain     string      `json:"domain,omitempty"`
	Descriptor []EntryJSON `json:"descriptor,omitempty"`
	Keys       []string    `json:"keys"`
	More       bool        `json:"more,omitempty"`
}

// reset serves POST /admin/v1/reset. With PostgreSQL the audit row (actor,
// subject, the keys about to be reset) is written first, and if it cannot
// be, nothing is reset (503); without PostgreSQL the reset is logged.
func (h *handler) reset(w http.ResponseWriter, r *http.Request, actor string) {
	if h.opts.Counters == nil {
		problem(w, http.StatusServiceUnavailable, "resets are not available on this server", nil)
		return
	}
	b, ok := h.body(w, r)
	if !ok {
		return
	}
	rr, req, err := DecodeReset(b)
	snap := h.opts.Rules()
	if err == nil && req != nil && !snap.HasDomain(req.Domain) {
		err = fieldErrors{{Field: "domain", Msg: fmt.Sprintf("no rule file declares domain %q", req.Domain)}}
	}
	if err != nil {
		badFields(w, err)
		return
	}
	detail := resetAudit{Tenant: rr.Tenant, Domain: rr.Domain, Descriptor: rr.Descriptor}
	subject := "tenant:" + rr.Tenant
	if req != nil {
		subject = resetSubject(snap, req)
	}
	audited := false
	opts := service.ResetOptions{MaxKeys: MaxResetKeys, Before: func(ctx context.Context, keys []string, more bool) error {
		if h.opts.Store == nil {
			h.log.InfoContext(ctx, "admin: counters reset (no PostgreSQL: no audit row)", "actor", actor, "subject", subject, "keys", len(keys), "more", more)
			return nil
		}
		detail.Keys, detail.More = keys, more
		if err := h.opts.Store.Audit(ctx, actor, "reset", subject, detail); err != nil {
			return auditError{err}
		}
		audited = true
		return nil
	}}
	ctx, cancel := h.ctx(r)
	defer cancel()
	var res service.ResetResult
	if req != nil {
		res, err = h.opts.Counters.Reset(ctx, *req, opts)
	} else {
		res, err = h.opts.Counters.ResetTenant(ctx, rr.Tenant, opts)
	}
	var ae auditError
	switch {
	case err == nil:
	case errors.As(err, &ae):
		if !errors.Is(err, tenant.ErrUnavailable) {
			h.log.ErrorContext(r.Context(), "admin: reset: audit row not written", "err", err)
		}
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusServiceUnavailable, "reset: the audit row could not be written to PostgreSQL; nothing was reset, try again", nil)
		return
	case errors.Is(err, service.ErrInvalidRequest):
		badFields(w, fieldErrors{{Field: "body", Msg: err.Error()}})
		return
	case errors.Is(err, service.ErrNoKeyLister):
		problem(w, http.StatusNotImplemented, "reset: the rate-limit store cannot list its keys, so a tenant's counters cannot be found; reset one key (domain and descriptor) instead", nil)
		return
	default:
		h.log.WarnContext(r.Context(), "admin: reset failed", "subject", subject, "err", err)
		problem(w, http.StatusServiceUnavailable, "reset: the rate-limit store failed (some counters may have been reset; try again): "+err.Error(), nil)
		return
	}
	if req != nil && len(res.Keys) == 0 {
		problem(w, http.StatusNotFound, "reset: no limit applies to this descriptor; nothing to reset", nil)
		return
	}
	reply(w, http.StatusOK, ResetJSON{KeysReset: len(res.Keys), More: res.More, Audited: audited})
}

// resetSubject is the audit subject of a one-key reset: the tenant's
// ("tenant:acme") when the descriptor names the domain's tenant key, so the
// tenant's audit log shows it, else "domain:<domain>".
func resetSubject(snap *rules.Snapshot, req *service.Request) string {
	if tk := snap.TenantKey(req.Domain); tk != "" {
		for _, e := range req.Descriptors[0].Entries {
			if e.Key == tk {
				return "tenant:" + e.Value
			}
		}
	}
	return "domain:" + req.Domain
}
