package rules

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Calendar quotas: Sluice's extension for quotas that reset at the start of
// a calendar month or day in a time zone, not every 30 days from the Unix
// epoch as envoy's unit: month does:
//
//	rate_limit:
//	  calendar: month             # or day
//	  time_zone: Europe/Berlin    # IANA name; default UTC
//	  requests_per_unit: 1000000
//
// A calendar quota is a fixed window per calendar period. The stores only
// know epoch-aligned windows, so for each period the engine picks a window
// length W whose epoch-aligned window [kW, (k+1)W) contains the whole period
// and ends at most a few milliseconds after it (see Calendar.Limit): the
// counter of a period is its own, never resets inside it, and expires right
// after it. No store or script changes.

// Period is the length of a calendar quota's period.
type Period uint8

// The periods.
const (
	// Month: from midnight on the 1st to midnight on the 1st of the next
	// month.
	Month Period = iota + 1
	// Day: from midnight to midnight (23 or 25 hours across a daylight
	// saving change).
	Day
)

// String returns "month" or "day".
func (p Period) String() string {
	switch p {
	case Month:
		return "month"
	case Day:
		return "day"
	}
	return fmt.Sprintf("Period(%d)", uint8(p))
}

// Calendar makes a rule's quota reset at calendar boundaries.
type Calendar struct {
	Period   Period
	Location *time.Location // never nil
}

// Bounds returns the period that holds t: [start, end).
func (c *Calendar) Bounds(t time.Time) (start, end time.Time) {
	l := t.In(c.Location)
	y, m, d := l.Date()
	if c.Period == Month {
		start = time.Date(y, m, 1, 0, 0, 0, 0, c.Location)
		return start, start.AddDate(0, 1, 0)
	}
	start = time.Date(y, m, d, 0, 0, 0, 0, c.Location)
	return start, start.AddDate(0, 0, 1)
}

// Limit returns the fixed-window limit of quota that counts the period
// holding now, and excess: how long the store's window outlasts the period
// (under a few ms), to subtract from the reset and retry times it reports.
//
// With start and end the period's bounds in µs since the epoch and
// P = end − start, it takes n = ⌊end/P⌋ − 1 windows of W = ⌈end/n⌉ µs: then
// (n−1)·W ≤ start (the slack end/n − P ≥ P/n exceeds the rounding, n µs) and
// n·W ≥ end, so the epoch-aligned window n−1 holds the whole period and ends
// less than n µs after it. W depends on the period, so each period's
// counter has its own store key.
func (c *Calendar) Limit(now time.Time, quota int64) (sluice.Limit, time.Duration) {
	s, e := c.Bounds(now)
	start, end := s.UnixMicro(), e.UnixMicro()
	p := end - start
	n := end/p - 1
	w := (end + n - 1) / n
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: quota, Window: time.Duration(w) * time.Microsecond}
	if (n-1)*w > start || lim.Window > stack.MaxWindow { // not for any date after 1970; kept safe
		return sluice.Limit{Algorithm: sluice.FixedWindow, Quota: quota, Window: time.Duration(p) * time.Microsecond}, 0
	}
	return lim, time.Duration(n*w-end) * time.Microsecond
}

// nominal is a calendar rule's Limit outside a check: the longest period.
func (c *Calendar) nominal() time.Duration {
	if c.Period == Month {
		return 31 * 24 * time.Hour
	}
	return 25 * time.Hour
}
