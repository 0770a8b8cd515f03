package redis

import (
	"testing"
	"time"
)

// TestClockEstimateSample: a looser sample does not replace a tight
// estimate it agrees with, but does replace one it proves wrong (their
// error intervals do not overlap), and a tighter sample always wins.
func TestClockEstimateSample(t *testing.T) {
	start := time.Now()
	mid := func(d time.Duration) int64 { return start.Add(d / 2).UnixMicro() }
	for _, tc := range []struct {
		name       string
		redisNow   func() int64 // what the second sample read
		d          time.Duration
		wantOffset int64
	}{
		{"looser, agreeing: kept", func() int64 { return mid(4*time.Millisecond) + 1_000_500 }, 4 * time.Millisecond, 1_000_000},
		{"looser, contradicting: replaced", func() int64 { return mid(4*time.Millisecond) - 7_200_000_000 }, 4 * time.Millisecond, -7_200_000_000},
		{"tighter: replaced", func() int64 { return mid(50*time.Microsecond) + 1_000_010 }, 50 * time.Microsecond, 1_000_010},
	} {
		var c clockEstimate
		c.sample(mid(200*time.Microsecond)+1_000_000, start, 200*time.Microsecond) // offset 1 s, error 101 µs
		c.sample(tc.redisNow(), start, tc.d)
		if c.offset != tc.wantOffset {
			t.Errorf("%s: offset %d µs, want %d", tc.name, c.offset, tc.wantOffset)
		}
	}
}
