package rules

import (
	"strings"
	"time"
)

// Unit is one of envoy's rate-limit units: its rule-file name and its
// window. As in envoyproxy/ratelimit, a month is 30 days and a year 365 days.
type Unit struct {
	Name   string
	Window time.Duration
}

// units is the one table of envoy's units, longest first.
var units = [...]Unit{
	{"year", 365 * 24 * time.Hour},
	{"month", 30 * 24 * time.Hour},
	{"week", 7 * 24 * time.Hour},
	{"day", 24 * time.Hour},
	{"hour", time.Hour},
	{"minute", time.Minute},
	{"second", time.Second},
}

// Units returns envoy's rate-limit units, longest first. The slice is the
// caller's.
func Units() []Unit { return append([]Unit(nil), units[:]...) }

// UnitWindow returns the window of an envoy unit name (case-insensitive):
// second, minute, hour, day, week, month (30 days) or year (365 days).
func UnitWindow(unit string) (time.Duration, bool) {
	for _, u := range units {
		if strings.EqualFold(u.Name, unit) {
			return u.Window, true
		}
	}
	return 0, false
}
