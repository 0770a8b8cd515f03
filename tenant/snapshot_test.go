package tenant

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

const testRules = `
domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 100
      tiers:
        free: {requests_per_unit: 50}
        pro: {requests_per_unit: 1000}
    descriptors:
      - key: endpoint
        value: POST /orders
        rate_limit: {unit: minute, requests_per_unit: 20}
      - key: lease
        rate_limit: {algorithm: concurrency, window: 30s, requests_per_unit: 3}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`

func testSnapshot(t testing.TB) *rules.Snapshot {
	t.Helper()
	s, err := rules.Parse("api.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func match(t testing.TB, s *rules.Snapshot, kv ...string) (*rules.Rule, []rules.Entry) {
	t.Helper()
	var es []rules.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	r := s.Match("api", es)
	if r == nil {
		t.Fatalf("no rule matches %v", es)
	}
	return r, es
}

func TestResolveOrder(t *testing.T) {
	rs := testSnapshot(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := t0
	now := func() time.Time { return clock }
	lim := func(n int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Quota: n, Window: time.Minute}
	}
	snap := NewSnapshot([]Record{
		{Tenant: "pro", Tier: rules.TierPro},
		{Tenant: "ent", Tier: rules.TierEnterprise},
		{Tenant: "acme", Tier: rules.TierPro, Overrides: []Override{
			{Descriptor: "endpoint:POST /orders", Limit: lim(500), RequestsPerUnit: 500, Unit: "minute"},
			{Descriptor: "", Limit: lim(7), RequestsPerUnit: 7, Unit: "minute", EffectiveAt: t0.Add(time.Hour), ExpiresAt: t0.Add(2 * time.Hour)},
		}},
		{Tenant: "soon", Tier: rules.TierPro, EffectiveAt: t0.Add(time.Hour)},
		{Tenant: "gone", Tier: rules.TierPro, ExpiresAt: t0.Add(time.Hour)},
		{Tenant: "dup", Tier: rules.TierFree},
		{Tenant: "dup", Tier: rules.TierPro}, // the last wins
	}, []RuleSwitch{{Domain: "api", Rule: "remote_address", State: rules.SwitchOff}}, t0)

	for _, tc := range []struct {
		at      time.Duration
		kv      []string
		want    int64 // 0: the rule's own limit (nil)
		switch_ rules.Switch
	}{
		{0, []string{"api_key", "nobody"}, 50, rules.SwitchOn},                         // free tier limit
		{0, []string{"api_key", "pro"}, 1000, rules.SwitchOn},                          // pro tier
		{0, []string{"api_key", "ent"}, 0, rules.SwitchOn},                             // no enterprise limit: the rule's
		{0, []string{"api_key", "pro", "endpoint", "POST /orders"}, 0, rules.SwitchOn}, // no tiers on the rule
		{0, []string{"api_key", "acme", "endpoint", "POST /orders"}, 500, rules.SwitchOn},
		{0, []string{"api_key", "acme"}, 1000, rules.SwitchOn},                // override not yet effective
		{90 * time.Minute, []string{"api_key", "acme"}, 7, rules.SwitchOn},    // effective
		{3 * time.Hour, []string{"api_key", "acme"}, 1000, rules.SwitchOn},    // expired
		{0, []string{"api_key", "soon"}, 50, rules.SwitchOn},                  // record not yet effective: free
		{90 * time.Minute, []string{"api_key", "soon"}, 1000, rules.SwitchOn}, //
		{0, []string{"api_key", "gone"}, 1000, rules.SwitchOn},                //
		{90 * time.Minute, []string{"api_key", "gone"}, 50, rules.SwitchOn},   // expired: free
		{0, []string{"api_key", "dup"}, 1000, rules.SwitchOn},                 //
		{0, []string{"remote_address", "1.2.3.4"}, 0, rules.SwitchOff},        // no tenant key; switched off
	} {
		clock = t0.Add(tc.at)
		r, es := match(t, rs, tc.kv...)
		tl, sw := snap.Resolve(r, es, now)
		var got int64
		if tl != nil {
			got = tl.Limit.Quota
		}
		if got != tc.want || sw != tc.switch_ {
			t.Errorf("at +%v %v: quota %d, switch %v; want %d, %v", tc.at, tc.kv, got, sw, tc.want, tc.switch_)
		}
	}
	if n := snap.Len(); n != 6 {
		t.Errorf("Len = %d, want 6", n)
	}
}

func TestSnapshotDelta(t *testing.T) {
	rs := testSnapshot(t)
	now := time.Now
	t0 := time.Now()
	s := NewSnapshot([]Record{{Tenant: "a", Tier: rules.TierPro}, {Tenant: "b", Tier: rules.TierPro}}, nil, t0)
	s2 := s.withTenant("a", nil, t0)
	s3 := s2.withTenant("c", &Record{Tenant: "c", Tier: rules.TierPro}, t0)
	r, _ := match(t, rs, "api_key", "x")
	quota := func(s *Snapshot, tenant string) int64 {
		tl, _ := s.Resolve(r, []rules.Entry{{Key: "api_key", Value: tenant}}, now)
		return tl.Limit.Quota
	}
	for _, tc := range []struct {
		s      *Snapshot
		tenant string
		want   int64
	}{
		{s, "a", 1000}, {s2, "a", 50}, {s3, "a", 50}, {s3, "b", 1000}, {s3, "c", 1000}, {s2, "c", 50},
	} {
		if got := quota(tc.s, tc.tenant); got != tc.want {
			t.Errorf("quota(%s) = %d, want %d", tc.tenant, got, tc.want)
		}
	}
	if s.Len() != 2 || s2.Len() != 1 || s3.Len() != 2 {
		t.Errorf("Len = %d, %d, %d; want 2, 1, 2", s.Len(), s2.Len(), s3.Len())
	}
}

func TestResolveDoesNotAllocate(t *testing.T) {
	rs := testSnapshot(t)
	snap := NewSnapshot([]Record{{Tenant: "acme", Tier: rules.TierPro, Overrides: []Override{
		{Descriptor: "endpoint:POST /orders", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Minute}}}}}, nil, time.Now())
	r, es := match(t, rs, "api_key", "acme", "endpoint", "POST /orders")
	if n := testing.AllocsPerRun(100, func() { snap.Resolve(r, es, time.Now) }); n != 0 {
		t.Errorf("Resolve allocates %v times, want 0", n)
	}
}

func millionRecords() []Record {
	recs := make([]Record, 1_000_000)
	for i := range recs {
		recs[i] = Record{Tenant: "tenant-" + strconv.Itoa(i), Tier: rules.Tier(i % 3)}
		if i%16 == 0 {
			recs[i].Overrides = []Override{{Descriptor: "endpoint:POST /orders", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 500, Window: time.Minute}, RequestsPerUnit: 500, Unit: "minute"}}
		}
	}
	return recs
}

// BenchmarkResolve is one lookup: in a snapshot of 10^3 tenants (the code
// path alone), and in one of 10^6 tenants, for
// requests spread over 2^12 and 2^16 distinct tenants, beside the baseline
// of a bare Go map[string] lookup of the same keys among 10^6 (memory
// latency dominates both once the hot set leaves the cache).
func BenchmarkResolve(b *testing.B) {
	rs := testSnapshot(b)
	recs := millionRecords()
	snap := NewSnapshot(recs, nil, time.Now())
	base := make(map[string]entry, len(recs))
	for i := range recs {
		base[recs[i].Tenant] = toEntry(&recs[i])
	}
	recs = nil
	r, _ := match(b, rs, "api_key", "x", "endpoint", "POST /orders")
	small := NewSnapshot(millionRecords()[:1000], nil, time.Now())
	b.Run("snapshot-1e3/hot=16", func(b *testing.B) { // the code path, all in cache
		es := make([][]rules.Entry, 16)
		for i := range es {
			es[i] = []rules.Entry{{Key: "api_key", Value: "tenant-" + strconv.Itoa(i*16)}, {Key: "endpoint", Value: "POST /orders"}}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			small.Resolve(r, es[i%16], time.Now)
			i++
		}
	})
	for _, hot := range []int{1 << 12, 1 << 16} {
		entries := make([][]rules.Entry, hot)
		for i := range entries {
			entries[i] = []rules.Entry{{Key: "api_key", Value: "tenant-" + strconv.Itoa(i*241%1_000_000)}, {Key: "endpoint", Value: "POST /orders"}}
		}
		b.Run("snapshot/hot="+strconv.Itoa(hot), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				snap.Resolve(r, entries[i%hot], time.Now)
				i++
			}
		})
		b.Run("gomap-baseline/hot="+strconv.Itoa(hot), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = base[entries[i%hot][0].Value]
				i++
			}
		})
	}
}

// BenchmarkBuild1M builds a snapshot of 10^6 tenants (one in 16 with an
// override) and reports the heap one snapshot keeps.
func BenchmarkBuild1M(b *testing.B) {
	recs := millionRecords()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	one := NewSnapshot(recs, nil, time.Now())
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(one)
	b.ReportAllocs()
	for b.Loop() {
		NewSnapshot(recs, nil, time.Now())
	}
	b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/(1<<20), "MiB-kept")
}
