package admin

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/tenant"
)

// DenyJSON is one deny entry: the body of PUT and DELETE /admin/v1/deny
// and an item of GET's answer. Value and CIDR are exclusive; with neither,
// every value of Key is denied.
type DenyJSON struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	CIDR   string `json:"cidr,omitempty"`
	// Reason is free text, at most tenant.MaxDenyReason bytes (ignored by
	// DELETE).
	Reason string `json:"reason,omitempty"`
	// Actor and CreatedAt, in answers: who added the entry, and when.
	Actor     string     `json:"actor,omitempty"`
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// DenyListJSON is the answer of GET /admin/v1/deny: a page of entries and
// the cursor of the next ("" on the last page).
type DenyListJSON struct {
	Deny []DenyJSON `json:"deny"`
	Next string     `json:"next,omitempty"`
}

// DecodeDeny reads and validates a deny entry body: every invalid field
// is reported (a fieldErrors error). cidr is returned masked.
func DecodeDeny(body []byte) (tenant.DenyEntry, error) {
	var d DenyJSON
	errs, err := decodeStrict(body, &d)
	if err != nil {
		return tenant.DenyEntry{}, err
	}
	add := func(f, msg string, args ...any) {
		errs = append(errs, &tenant.FieldError{Field: f, Msg: fmt.Sprintf(msg, args...)})
	}
	switch {
	case d.Domain == "":
		add("domain", "required")
	case len(d.Domain) > service.DefaultMaxKeyBytes:
		add("domain", "%d bytes, above %d", len(d.Domain), service.DefaultMaxKeyBytes)
	}
	switch {
	case d.Key == "":
		add("key", "required")
	case len(d.Key) > service.DefaultMaxKeyBytes:
		add("key", "%d bytes, above %d", len(d.Key), service.DefaultMaxKeyBytes)
	}
	if len(d.Value) > service.DefaultMaxValueBytes {
		add("value", "%d bytes, above %d", len(d.Value), service.DefaultMaxValueBytes)
	}
	if d.Value != "" && d.CIDR != "" {
		add("cidr", "give value or cidr, not both")
	}
	if d.CIDR != "" {
		if len(d.CIDR) > 64 {
			add("cidr", "%d bytes, above 64", len(d.CIDR))
		} else if pfx, perr := rules.ParseDenyCIDR(d.CIDR); perr != nil {
			add("cidr", "%v", perr)
		} else {
			d.CIDR = pfx.String()
		}
	}
	if len(d.Reason) > tenant.MaxDenyReason {
		add("reason", "%d bytes, above %d", len(d.Reason), tenant.MaxDenyReason)
	}
	if d.Actor != "" {
		add("actor", "set by the server (the token's name)")
	}
	if d.CreatedAt != nil {
		add("created_at", "set by the server")
	}
	if len(errs) > 0 {
		return tenant.DenyEntry{}, errs
	}
	return tenant.DenyEntry{Domain: d.Domain, Key: d.Key, Value: d.Value, CIDR: d.CIDR, Reason: d.Reason}, nil
}

func denyJSON(e tenant.DenyEntry) DenyJSON {
	return DenyJSON{Domain: e.Domain, Key: e.Key, Value: e.Value, CIDR: e.CIDR, Reason: e.Reason, Actor: e.Actor, CreatedAt: optTime(e.CreatedAt)}
}

// denyCursor encodes the position after e: base64url of a JSON array.
func denyCursor(e tenant.DenyEntry) string {
	b, _ := json.Marshal([4]string{e.Domain, e.Key, e.Value, e.CIDR})
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseDenyCursor(s string) (tenant.DenyEntry, error) {
	if len(s) > 8192 {
		return tenant.DenyEntry{}, errors.New("too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	var a [4]string
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil {
		return tenant.DenyEntry{}, errors.New("not a cursor this server wrote (pass the answer's next)")
	}
	return tenant.DenyEntry{Domain: a[0], Key: a[1], Value: a[2], CIDR: a[3]}, nil
}

func (h *handler) listDeny(w http.ResponseWriter, r *http.Request, _ string, st Store) {
	q := r.URL.Query()
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPage {
			msg := fmt.Sprintf("want a whole number from 1 to %d, got %q", MaxPage, s)
			problem(w, http.StatusBadRequest, "limit: "+msg, fieldErrors{{Field: "limit", Msg: msg}})
			return
		}
		limit = n
	}
	domain := q.Get("domain")
	if len(domain) > service.DefaultMaxKeyBytes {
		problem(w, http.StatusBadRequest, "domain: too long", fieldErrors{{Field: "domain", Msg: "too long"}})
		return
	}
	var after tenant.DenyEntry
	if s := q.Get("cursor"); s != "" {
		var err error
		if after, err = parseDenyCursor(s); err != nil {
			problem(w, http.StatusBadRequest, "cursor: "+err.Error(), fieldErrors{{Field: "cursor", Msg: err.Error()}})
			return
		}
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	es, err := st.ListDeny(ctx, domain, after, limit)
	if err != nil {
		h.storeError(w, r, "deny list", err)
		return
	}
	out := DenyListJSON{Deny: []DenyJSON{}}
	for _, e := range es {
		out.Deny = append(out.Deny, denyJSON(e))
	}
	if len(es) == limit {
		out.Next = denyCursor(es[len(es)-1])
	}
	reply(w, http.StatusOK, out)
}

// denyBody reads a deny entry body, answering 400 (naming the fields) when
// it is invalid or its domain is no rule file's.
func (h *handler) denyBody(w http.ResponseWriter, r *http.Request) (tenant.DenyEntry, bool) {
	b, ok := h.body(w, r)
	if !ok {
		return tenant.DenyEntry{}, false
	}
	e, err := DecodeDeny(b)
	if err == nil && !h.opts.Rules().HasDomain(e.Domain) {
		err = fieldErrors{{Field: "domain", Msg: fmt.Sprintf("no rule file has domain %q (see /debug/rules)", e.Domain)}}
	}
	if err != nil {
		badFields(w, err)
		return tenant.DenyEntry{}, false
	}
	return e, true
}

func (h *handler) addDeny(w http.ResponseWriter, r *http.Request, actor string, st Store) {
	e, ok := h.denyBody(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	if err := st.AddDeny(ctx, actor, e); err != nil {
		if errors.Is(err, tenant.ErrDenyFull) {
			problem(w, http.StatusConflict, err.Error(), nil)
			return
		}
		h.storeError(w, r, "deny add", err)
		return
	}
	e.Actor = actor
	reply(w, http.StatusOK, denyJSON(e))
}

func (h *handler) removeDeny(w http.ResponseWriter, r *http.Request, actor string, st Store) {
	e, ok := h.denyBody(w, r)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	found, err := st.RemoveDeny(ctx, actor, e)
	if err != nil {
		h.storeError(w, r, "deny remove", err)
		return
	}
	if !found {
		problem(w, http.StatusNotFound, "no such deny entry", nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
