package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/sluice-rl/sluice/tenant"
)

// Auditor is the audit table a fleet shares (*pg.Store of tenant/pg).
type Auditor interface {
	// Audit writes one row; detail is marshalled to JSON (its after).
	Audit(ctx context.Context, actor, action, subject string, detail any) error
	// AuditAction reads the rows of one action, newest first, with IDs
	// below before (0: from the newest), and whether older ones exist.
	AuditAction(ctx context.Context, action string, before int64, limit int) ([]tenant.AuditEntry, bool, error)
}

// Audit rows of a fired level: actor AuditActor, action AuditAction,
// subject "rule:<domain>/<rule ID>", after the Fired as JSON.
const (
	AuditActor  = "sluice"
	AuditAction = "notify"
)

// AuditLog is a Log in an audit table: every instance writes its firings
// there, and each lists the fleet's. Its cursors are the rows' IDs.
type AuditLog struct{ A Auditor }

// Add implements Log.
func (l AuditLog) Add(ctx context.Context, f Fired) error {
	return l.A.Audit(ctx, AuditActor, AuditAction, "rule:"+f.Domain+"/"+f.Rule, f)
}

// Page implements Log.
func (l AuditLog) Page(ctx context.Context, cursor string, limit int) ([]Fired, string, error) {
	before, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	rows, more, err := l.A.AuditAction(ctx, AuditAction, before, min(max(limit, 1), MaxPage))
	if err != nil {
		return nil, "", err
	}
	out := make([]Fired, 0, len(rows))
	for _, r := range rows {
		var f Fired
		if err := json.Unmarshal(r.After, &f); err != nil {
			return nil, "", fmt.Errorf("notify: audit row %d: %w", r.ID, err)
		}
		out = append(out, f)
	}
	next := ""
	if more && len(rows) > 0 {
		next = strconv.FormatInt(rows[len(rows)-1].ID, 10)
	}
	return out, next, nil
}

// parseCursor reads a Log cursor: "" (0) or a positive whole number.
func parseCursor(cursor string) (int64, error) {
	if cursor == "" {
		return 0, nil
	}
	c, err := strconv.ParseInt(cursor, 10, 64)
	if err != nil || c <= 0 {
		return 0, fmt.Errorf("notify: cursor %q: want the next of an earlier page", cursor)
	}
	return c, nil
}
