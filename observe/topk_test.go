package observe

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// zipfTrace returns n keys drawn from a Zipf distribution over m keys
// (s = 1.1), and their exact counts.
func zipfTrace(seed uint64, n int, m uint64) ([]string, map[string]uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, 1.1, 1, m-1)
	trace := make([]string, n)
	exact := map[string]uint64{}
	for i := range trace {
		k := fmt.Sprintf("key-%d", z.Uint64())
		trace[i] = k
		exact[k]++
	}
	return trace, exact
}

// checkGuarantees asserts Space-Saving's bounds of t against exact counts.
func checkGuarantees(t *testing.T, name string, s *TopK, exact map[string]uint64) {
	t.Helper()
	var n uint64
	for _, c := range exact {
		n += c
	}
	if s.Total() != n {
		t.Errorf("%s: Total = %d, want %d", name, s.Total(), n)
	}
	bound := s.Bound()
	if want := (n + uint64(s.K()) - 1) / uint64(s.K()); bound != want {
		t.Errorf("%s: Bound = %d, want ⌈N/K⌉ = %d", name, bound, want)
	}
	for _, e := range s.Top(-1) {
		truth := exact[e.Key]
		if e.Count < truth {
			t.Errorf("%s: %s estimated %d, below its true count %d", name, e.Key, e.Count, truth)
		}
		if e.Count-truth > e.Err {
			t.Errorf("%s: %s estimated %d, true %d: overestimate %d above its Err %d", name, e.Key, e.Count, truth, e.Count-truth, e.Err)
		}
		if e.Err > bound {
			t.Errorf("%s: %s Err %d above the bound N/K = %d", name, e.Key, e.Err, bound)
		}
	}
	for k, c := range exact {
		if c > bound {
			if _, ok := s.Lookup(k); !ok {
				t.Errorf("%s: %s has %d > N/K = %d but is not in the summary", name, k, c, bound)
			}
		}
	}
}

func TestTopKZipfAgainstExact(t *testing.T) {
	for _, k := range []int{8, 32, 128} {
		trace, exact := zipfTrace(uint64(k), 200_000, 50_000)
		s := NewTopK(k)
		for _, key := range trace {
			s.Add([]byte(key), 1)
		}
		checkGuarantees(t, fmt.Sprintf("k=%d", k), s, exact)
		if got := len(s.Top(-1)); got > k {
			t.Errorf("k=%d: %d entries held, want at most %d", k, got, k)
		}
		// The heaviest key of a Zipf trace is far above N/K: it must lead.
		if top := s.Top(1); len(top) != 1 || top[0].Key != "key-0" {
			t.Errorf("k=%d: top = %v, want key-0 first", k, top)
		}
	}
}

func TestTopKMergeKeepsGuarantees(t *testing.T) {
	a, b := NewTopK(32), NewTopK(32)
	ta, ea := zipfTrace(1, 100_000, 20_000)
	tb, eb := zipfTrace(2, 60_000, 20_000)
	for _, k := range ta {
		a.Add([]byte(k), 1)
	}
	for _, k := range tb {
		b.Add([]byte(k), 1)
	}
	exact := map[string]uint64{}
	for k, c := range ea {
		exact[k] += c
	}
	for k, c := range eb {
		exact[k] += c
	}
	// Round-trip b through its exchange form, as a fleet does.
	a.Merge(b.Snapshot().TopK())
	checkGuarantees(t, "merged", a, exact)
}

func TestTopKWeightsAndSmallStreams(t *testing.T) {
	s := NewTopK(3)
	steps := []struct {
		key string
		n   uint64
	}{{"a", 5}, {"b", 2}, {"c", 1}, {"a", 0}, {"d", 4}}
	for _, st := range steps {
		s.Add([]byte(st.key), st.n)
	}
	// d replaces c (the minimum, 1): estimate 5 with error 1.
	want := []Entry{{"a", 5, 0}, {"d", 5, 1}, {"b", 2, 0}}
	got := s.Top(-1)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Top = %v, want %v", got, want)
	}
	if s.Total() != 12 {
		t.Errorf("Total = %d, want 12", s.Total())
	}
}

// TestTopKMemoryIsBounded: a flood of distinct keys leaves at most K
// entries and does not grow the heap beyond a fixed budget.
func TestTopKMemoryIsBounded(t *testing.T) {
	tr := NewTracker(Options{K: 64, Buckets: 2})
	now := time.Unix(1_700_000_000, 0)
	var before, after runtime.MemStats
	key := make([]byte, 0, 32)
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			key = fmt.Appendf(key[:0], "flood-%d", i)
			tr.Observe(now, "d", "r", key, i%2 == 0)
		}
	}
	flood(0, 50_000) // warm up: the summaries reach their size
	runtime.GC()
	runtime.ReadMemStats(&before)
	flood(50_000, 300_000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Errorf("heap grew by %d bytes over 250,000 new keys, want under 1 MiB (bounded summaries)", grew)
	}
	ws, err := tr.Windows(now, time.Minute, "d", "r")
	if err != nil || len(ws) != 1 {
		t.Fatalf("Windows = %v, %v", ws, err)
	}
	if got := len(ws[0].Checked.Top(-1)); got != 64 {
		t.Errorf("entries held = %d, want K = 64", got)
	}
	if ws[0].Checked.Total() != 300_000 || ws[0].Denials.Total() != 150_000 {
		t.Errorf("totals = %d checks, %d denials; want 300000 and 150000", ws[0].Checked.Total(), ws[0].Denials.Total())
	}
}

func TestTrackerWindowsAndExports(t *testing.T) {
	opts := Options{K: 16, Bucket: time.Minute, Buckets: 5, MaxRules: 2}
	a, b := NewTracker(opts), NewTracker(opts)
	t0 := time.Unix(1_700_000_000, 0).Truncate(time.Minute)
	obs := func(tr *Tracker, at time.Duration, rule, key string, denied bool, n int) {
		for range n {
			tr.Observe(t0.Add(at), "edge", rule, []byte(key), denied)
		}
	}
	obs(a, 0, "ip", "1.1.1.1", true, 10)            // minute 0
	obs(a, 2*time.Minute, "ip", "2.2.2.2", true, 3) // minute 2
	obs(b, 2*time.Minute, "ip", "1.1.1.1", true, 4)
	obs(b, 2*time.Minute, "ip", "3.3.3.3", false, 7)
	obs(a, 2*time.Minute, "other", "x", false, 1)
	obs(a, 2*time.Minute, "third", "x", false, 1) // beyond MaxRules
	if a.Dropped() != 1 {
		t.Errorf("Dropped = %d, want 1", a.Dropped())
	}
	now := t0.Add(2*time.Minute + 30*time.Second)

	// One instance, a one-minute window: only minute 2.
	ws, err := a.Windows(now, time.Minute, "edge", "ip")
	if err != nil {
		t.Fatal(err)
	}
	r := ws[0].Report(10)
	if r.Denials != 3 || len(r.TopDenied) != 1 || r.TopDenied[0].Key != "2.2.2.2" {
		t.Errorf("1m window report = %+v, want only 2.2.2.2 with 3 denials", r)
	}
	// The fleet over five minutes: both instances, both minutes.
	merged := MergeExports(now, 5*time.Minute, "edge", "ip", a.Export(now, 5*time.Minute), b.Export(now, 5*time.Minute))
	if len(merged) != 1 {
		t.Fatalf("merged windows = %d, want 1", len(merged))
	}
	r = merged[0].Report(2)
	if r.Denials != 17 || r.Checks != 24 {
		t.Errorf("fleet totals = %d denials, %d checks; want 17 and 24", r.Denials, r.Checks)
	}
	if len(r.TopDenied) != 2 || r.TopDenied[0] != (Offender{Key: "1.1.1.1", Denials: 14, Checks: 14}) {
		t.Errorf("fleet top denied = %+v, want 1.1.1.1 first with 14 denials and 14 checks", r.TopDenied)
	}
	if len(r.TopChecked) != 2 || r.TopChecked[0].Key != "1.1.1.1" || r.TopChecked[1] != (Offender{Key: "3.3.3.3", Checks: 7}) {
		t.Errorf("fleet top checked = %+v, want 1.1.1.1 then 3.3.3.3 (7 checks, 0 denials)", r.TopChecked)
	}
	if _, err := a.Windows(now, time.Hour, "", ""); err == nil {
		t.Error("Windows(1h) on a 5-minute tracker: nil error, want ErrWindow")
	}
}

// BenchmarkTrackerObserve: uniform is the worst case (10,000 keys, every
// hit a newcomer that evicts); zipf is typical traffic.
func BenchmarkTrackerObserve(b *testing.B) {
	trace, _ := zipfTrace(7, 1<<16, 100_000)
	zipf := make([][]byte, len(trace))
	for i, k := range trace {
		zipf[i] = []byte(k)
	}
	uniform := make([][]byte, 10_000)
	for i := range uniform {
		uniform[i] = fmt.Appendf(nil, "remote_address=10.0.%d.%d", i/256, i%256)
	}
	for _, bc := range []struct {
		name string
		keys [][]byte
	}{{"zipf", zipf}, {"uniform", uniform}} {
		b.Run(bc.name, func(b *testing.B) {
			tr := NewTracker(Options{})
			now := time.Now()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tr.Observe(now, "edge", "remote_address", bc.keys[i%len(bc.keys)], i%4 == 0)
			}
		})
	}
}
