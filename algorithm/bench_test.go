package algorithm

import "testing"

var sinkD Decision

// BenchmarkSteps measures each algorithm's step alone (no store): the
// arithmetic floor under a decision.
func BenchmarkSteps(b *testing.B) {
	p := NewParams(1_000_000, 1_000_000, 0)
	now := int64(1_767_225_600_000_000)
	b.Run("gcra", func(b *testing.B) {
		var tat int64
		for b.Loop() {
			now++
			tat, sinkD = GCRA(tat, now, 1, p)
		}
	})
	b.Run("token_bucket", func(b *testing.B) {
		var s TokenState
		for b.Loop() {
			now++
			s, sinkD = TokenBucket(s, now, 1, p)
		}
	})
	b.Run("fixed_window", func(b *testing.B) {
		var s WindowState
		for b.Loop() {
			now++
			s, sinkD = FixedWindow(s, now, 1, p)
		}
	})
	b.Run("sliding_window", func(b *testing.B) {
		var s WindowState
		for b.Loop() {
			now++
			s, sinkD = SlidingWindow(s, now, 1, p)
		}
	})
}
