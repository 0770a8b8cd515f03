package storetest

import (
	"sync"
	"time"
)

// Clock is a controllable clock for stores under test. The zero value is not
// usable; create one with NewClock. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// Epoch is where test clocks start: a realistic instant, so that time in
// microseconds since 1970 is as large as in production.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewClock returns a clock standing at Epoch.
func NewClock() *Clock { return &Clock{t: Epoch} }

// Now returns the clock's time. It does not advance by itself.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t (backward too).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock by d (negative steps it back).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
