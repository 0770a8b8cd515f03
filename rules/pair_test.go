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
	// record: the fixed_window reservation is refused where it is written,
	// the gcra one is not.
	_, err = Parse("llm.yaml", []byte(file), Options{NativeFixedWindow: true})
	want := "llm.yaml:6: descriptors[0].descriptors[0].rate_limit.settle: a fixed_window reservation cannot be kept by native Redis counters (sluice serve --redis-native-fixed-window): use sliding_window, token_bucket or gcra, or serve without the flag"
	if err == nil || err.Error() != want {
		t.Errorf("Parse with NativeFixedWindow: %v, want %s", err, want)
	}
}
