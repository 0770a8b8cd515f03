package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/tenant"
)

// AuditJSON is one row of GET /admin/v1/audit.
type AuditJSON struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`
	Subject string    `json:"subject"`
	// Before and After are the subject's state around the change (a
	// tenant's record, a switch's state, a reset's keys); null when absent.
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// AuditPageJSON is the answer of GET /admin/v1/audit.
type AuditPageJSON struct {
	Entries []AuditJSON `json:"entries"`
	// Next is the cursor= of the next (older) page; absent on the last.
	Next string `json:"next,omitempty"`
}

// maxActorLen bounds the actor filter (token names are shorter).
const maxActorLen = 256

// DecodeAuditQuery reads the query of GET /admin/v1/audit: tenant, actor,
// since and until (RFC 3339), cursor and limit (1 to tenant.MaxAuditPage,
// default 100). Every bad parameter is named in a *tenant.FieldError.
func DecodeAuditQuery(get func(string) string) (tenant.AuditQuery, error) {
	var q tenant.AuditQuery
	var errs fieldErrors
	bad := func(field, format string, args ...any) {
		errs = append(errs, &tenant.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if v := get("tenant"); v != "" {
		if err := tenant.ValidTenant(v); err != nil {
			bad("tenant", "%v", err)
		}
		q.Tenant = v
	}
	if v := get("actor"); len(v) > maxActorLen {
		bad("actor", "longer than %d bytes", maxActorLen)
	} else {
		q.Actor = v
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if v := get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				bad(p.name, "want an RFC 3339 time such as 2026-11-26T00:00:00Z, got %q", v)
			}
			*p.dst = t
		}
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		bad("until", "%s is not after since %s", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	if v := get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			bad("cursor", "want the next value of a previous page, got %q", v)
		}
		q.Before = n
	}
	q.Limit = 100
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > tenant.MaxAuditPage {
			bad("limit", "want a whole number from 1 to %d, got %q", tenant.MaxAuditPage, v)
		}
		q.Limit = n
	}
	if len(errs) > 0 {
		return q, errs
	}
	return q, nil
}

func (h *handler) audit(w http.ResponseWriter, r *http.Request, _ string, st Store) {
	q, err := DecodeAuditQuery(r.URL.Query().Get)
	if err != nil {
		badFields(w, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	rows, more, err := st.AuditPage(ctx, q)
	if err != nil {
		h.storeError(w, r, "read the audit log", err)
		return
	}
	out := AuditPageJSON{Entries: make([]AuditJSON, 0, len(rows))}
	for _, e := range rows {
		out.Entries = append(out.Entries, AuditJSON{ID: e.ID, At: e.At.UTC(), Actor: e.Actor, Action: e.Action, Subject: e.Subject,
			Before: nullJSON(e.Before), After: nullJSON(e.After)})
	}
	if more && len(rows) > 0 {
		out.Next = strconv.FormatInt(rows[len(rows)-1].ID, 10)
	}
	reply(w, http.StatusOK, out)
}

func nullJSON(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
