package admin

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluice-rl/sluice/notify"
	"github.com/sluice-rl/sluice/tenant"
)

// Notifications lists the notify_at levels that fired (GET
// /admin/v1/notifications), newest first. *notify.Notifier implements it.
type Notifications interface {
	Page(ctx context.Context, cursor string, limit int) ([]notify.Fired, string, error)
}

// NotificationsJSON is the answer of GET /admin/v1/notifications.
type NotificationsJSON struct {
	// Notifications are the levels that fired, newest first.
	Notifications []notify.Fired `json:"notifications"`
	// Next is the cursor= of the next (older) page; absent on the last.
	Next string `json:"next,omitempty"`
}

// maxCursorLen bounds the cursor of GET /admin/v1/notifications.
const maxCursorLen = 64

// notifications serves GET /admin/v1/notifications: limit (1 to
// notify.MaxPage, default 100) and cursor.
func (h *handler) notifications(w http.ResponseWriter, r *http.Request, _ string) {
	if h.opts.Notifications == nil {
		problem(w, http.StatusServiceUnavailable, "no rule notifies: the server keeps no notifications (notify_at)", nil)
		return
	}
	q := r.URL.Query()
	var errs fieldErrors
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > notify.MaxPage {
			errs = append(errs, &tenant.FieldError{Field: "limit", Msg: fmt.Sprintf("want a whole number from 1 to %d, got %q", notify.MaxPage, v)})
		}
		limit = n
	}
	cursor := q.Get("cursor")
	if c, err := strconv.ParseInt(cursor, 10, 64); cursor != "" && (len(cursor) > maxCursorLen || err != nil || c <= 0) {
		errs = append(errs, &tenant.FieldError{Field: "cursor", Msg: "want the next of a previous page"})
	}
	if len(errs) > 0 {
		badFields(w, errs)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	page, next, err := h.opts.Notifications.Page(ctx, cursor, limit)
	if err != nil {
		h.storeError(w, r, "read the notifications", err)
		return
	}
	if page == nil {
		page = []notify.Fired{}
	}
	reply(w, http.StatusOK, NotificationsJSON{Notifications: page, Next: next})
}
