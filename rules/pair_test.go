package rules

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// TestPairBy reads rate_limit.pair_by: the rule names the entry, its index
// on the path, and the step is Paired, so that the entry's value is left
// out of the counter (Counted gives "").
func TestPairBy(t *testing.T) {
	const file = `domain: llm
descriptors:
  - key: key
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, window: 10m, requests_per_unit: 4, pair_by: request_id}
  - key: request_id
    rate_limit: {algorithm: concurrency, window: 1m, requests_per_unit: 100, pair_by: request_id}
`
	snap, err := Parse("llm.yaml", []byte(file), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		entries []Entry
		index   int
		window  string
	}{
		{[]Entry{{"key", "k1"}, {"request_id", "r-1"}}, 1, "10m0s"},
		{[]Entry{{"request_id", "r-1"}}, 0, "1m0s"},
	}
	for _, tt := range tests {
		r := snap.Match("llm", tt.entries)
		if r == nil {
			t.Fatalf("Match(%v) = nil, want the paired rule", tt.entries)
		}
		if r.PairBy != "request_id" || r.PairIndex != tt.index || r.Limit.Algorithm != sluice.Concurrency || r.Limit.Window.String() != tt.window {
			t.Errorf("rule %s: PairBy %q PairIndex %d algorithm %v window %v, want request_id %d concurrency %s", r.ID, r.PairBy, r.PairIndex, r.Limit.Algorithm, r.Limit.Window, tt.index, tt.window)
		}
		for i, s := range r.Path {
			if got, want := s.Paired, i == tt.index; got != want {
				t.Errorf("rule %s: Path[%d].Paired = %v, want %v", r.ID, i, got, want)
			}
		}
		if got := r.Path[tt.index].Counted("r-1"); got != "" {
			t.Errorf("rule %s: the paired step counts value %q, want \"\"", r.ID, got)
		}
	}
}

// TestSettleReserve reads rate_limit.settle: reserve with pair_by on any
// algorithm but concurrency: the rule reserves, pairs by the entry (left
// out of the counter), and reserve and settle_within take their values or
// their defaults.
func TestSettleReserve(t *testing.T) {
	const file = `domain: llm
descriptors:
  - key: key
    descriptors:
      - key: request_id
        rate_limit: {unit: hour, requests_per_unit: 100000, settle: reserve, pair_by: request_id, reserve: 4000, settle_within: 10m}
  - key: team
    descriptors:
      - key: request_id
        rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: 100000, settle: reserve, pair_by: request_id}
`
	snap, err := Parse("llm.yaml", []byte(file), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		entries []Entry
		alg     sluice.Algorithm
		reserve int64
		within  time.Duration
	}{
		{[]Entry{{"key", "k1"}, {"request_id", "r-1"}}, sluice.FixedWindow, 4000, 10 * time.Minute},
		{[]Entry{{"team", "t1"}, {"request_id", "r-1"}}, sluice.GCRA, DefaultReserve, DefaultSettleWithin},
	}
	for _, tt := range tests {
		r := snap.Match("llm", tt.entries)
		if r == nil {
			t.Fatalf("Match(%v) = nil, want the reserving rule", tt.entries)
		}
		if !r.SettleReserve || r.SettleAfter || r.PairBy != "request_id" || r.PairIndex != 1 || r.Limit.Algorithm != tt.alg ||
			r.Reserve != tt.reserve || r.SettleWithin != tt.within {
			t.Errorf("rule %s: SettleReserve %v SettleAfter %v PairBy %q PairIndex %d algorithm %v Reserve %d SettleWithin %v, want true false request_id 1 %v %d %v",
				r.ID, r.SettleReserve, r.SettleAfter, r.PairBy, r.PairIndex, r.Limit.Algorithm, r.Reserve, r.SettleWithin, tt.alg, tt.reserve, tt.within)
		}
		if got := r.Path[1].Counted("r-1"); got != "" {
			t.Errorf("rule %s: the paired step counts value %q, want \"\"", r.ID, got)
		}
	}
	// A store counting fixed windows natively keeps no reservation's
	// record: the fixed_window reservation asks for the script path
	// (Rule.Script), the gcra one has no other.
	for _, tt := range tests {
		if r := snap.Match("llm", tt.entries); r.Script != (tt.alg == sluice.FixedWindow) {
			t.Errorf("rule %s (%v): Script %v, want %v", r.ID, tt.alg, r.Script, tt.alg == sluice.FixedWindow)
		}
	}
}

// TestRedisPath: rate_limit.redis_path sets Rule.Script for a fixed_window
// rule (script), leaves it unset by default and with native, and a
// fixed_window reservation is on the script path whatever it says.
func TestRedisPath(t *testing.T) {
	const file = `domain: p
descriptors:
  - {key: a, rate_limit: {unit: second, requests_per_unit: 5, redis_path: script}}
  - {key: b, rate_limit: {unit: second, requests_per_unit: 5, redis_path: native}}
  - {key: c, rate_limit: {unit: second, requests_per_unit: 5}}
  - {key: d, rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, redis_path: script}}
`
	snap, err := Parse("p.yaml", []byte(file), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"a": true, "b": false, "c": false, "d": false} {
		r := snap.Match("p", []Entry{{key, "v"}})
		if r == nil {
			t.Fatalf("no rule for %s", key)
		}
		if r.Script != want {
			t.Errorf("rule %s: Script %v, want %v", key, r.Script, want)
		}
	}
}
