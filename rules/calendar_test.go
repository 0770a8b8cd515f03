package rules

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// TestCalendarLimit: for every day of several years, in zones with and
// without daylight saving, the window Limit picks holds the whole period in
// one epoch-aligned fixed window that ends less than 100 ms after it.
func TestCalendarLimit(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	for _, loc := range []*time.Location{time.UTC, berlin, kolkata} {
		for _, period := range []Period{Month, Day} {
			c := &Calendar{Period: period, Location: loc}
			for at := time.Date(2024, 1, 1, 12, 0, 0, 0, loc); at.Year() < 2031; at = at.AddDate(0, 0, 1) {
				start, end := c.Bounds(at)
				if !(!at.Before(start) && at.Before(end)) {
					t.Fatalf("%v %v: Bounds(%v) = [%v, %v) does not hold it", loc, period, at, start, end)
				}
				lim, excess := c.Limit(at, 1000)
				if err := lim.Validate(); err != nil {
					t.Fatalf("%v %v at %v: invalid limit %v: %v", loc, period, at, lim, err)
				}
				w := lim.Window.Microseconds()
				s, e := start.UnixMicro(), end.UnixMicro()
				if s/w != (e-1)/w {
					t.Fatalf("%v %v at %v: period [%v, %v) spans windows %d and %d of %v", loc, period, at, start, end, s/w, (e-1)/w, lim.Window)
				}
				windowEnd := (s/w + 1) * w
				if got := time.Duration(windowEnd-e) * time.Microsecond; got != excess || excess < 0 || excess >= 100*time.Millisecond {
					t.Fatalf("%v %v at %v: window ends %v after the period, excess %v; want equal and < 100ms", loc, period, at, got, excess)
				}
				if period == Day {
					continue
				}
				// The next period has a window (and so a key) of its own.
				next, _ := c.Limit(end, 1000)
				if next == lim {
					t.Fatalf("%v: months starting %v and %v share the limit %v", loc, start, end, lim)
				}
			}
		}
	}
}

func TestCalendarBounds(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	c := &Calendar{Period: Month, Location: berlin}
	// 2026-03-31 23:30 UTC is already April 1st in Berlin (CEST, UTC+2).
	start, end := c.Bounds(time.Date(2026, 3, 31, 23, 30, 0, 0, time.UTC))
	if want := time.Date(2026, 4, 1, 0, 0, 0, 0, berlin); !start.Equal(want) {
		t.Errorf("start = %v, want %v", start, want)
	}
	if want := time.Date(2026, 4, 30, 22, 0, 0, 0, time.UTC); !end.Equal(want) {
		t.Errorf("end = %v, want %v (midnight on May 1st in Berlin)", end, want)
	}
	d := &Calendar{Period: Day, Location: berlin}
	s, e := d.Bounds(time.Date(2026, 3, 29, 12, 0, 0, 0, berlin)) // spring forward
	if e.Sub(s) != 23*time.Hour {
		t.Errorf("the day of the spring change lasts %v, want 23h", e.Sub(s))
	}
}

func TestCalendarRule(t *testing.T) {
	snap, err := Parse("c.yaml", []byte(`domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      calendar: month
      time_zone: Europe/Berlin
      requests_per_unit: 1000000
      tiers:
        pro: {requests_per_unit: 5000000}
        enterprise: {requests_per_unit: 100, unit: second}
`), Options{DefaultAlgorithm: sluice.GCRA})
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Match("api", []Entry{{"api_key", "x"}})
	if r.Calendar == nil || r.Calendar.Period != Month || r.Calendar.Location.String() != "Europe/Berlin" {
		t.Fatalf("Calendar = %+v", r.Calendar)
	}
	if r.Limit.Algorithm != sluice.FixedWindow || r.Unit != "month" || r.Limit.Quota != 1_000_000 {
		t.Errorf("calendar rule limit %v unit %q; want fixed_window 1000000, month (despite the default algorithm)", r.Limit, r.Unit)
	}
	if !r.Tiers[TierPro].Calendar || r.Tiers[TierEnterprise].Calendar {
		t.Errorf("tier calendars: pro %v, enterprise %v; want true (inherited), false (own unit)", r.Tiers[TierPro].Calendar, r.Tiers[TierEnterprise].Calendar)
	}
}
