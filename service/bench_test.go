package service

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/memory"
)

const benchRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

const benchKeys = 10_000

// cpuTime returns the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds a cpu-ns/op figure: CPU time spent by the whole process per
// op. On a shared machine wall time per op includes waiting for a core; CPU
// time per op does not.
func reportCPU(b *testing.B, start time.Duration) {
	b.Helper()
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// benchRequests returns one request per distinct remote_address value.
func benchRequests() []Request {
	reqs := make([]Request, benchKeys)
	for i := range reqs {
		reqs[i] = Request{Domain: "edge", Descriptors: []Descriptor{{
			Entries: []rules.Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)}},
		}}}
	}
	return reqs
}

func benchEngine(b *testing.B) *Engine {
	b.Helper()
	snap, err := rules.Parse("bench.yaml", []byte(benchRules), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	b.Cleanup(func() { st.Close() })
	eng, err := New(DefaultConfig(), StaticRules{snap}, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// BenchmarkCheck is Engine.Check with one descriptor over 10^4 distinct
// values on the memory store: matching, key building, the store call,
// metrics.
func BenchmarkCheck(b *testing.B) {
	eng := benchEngine(b)
	reqs := benchRequests()
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime(b)
		i := 0
		for b.Loop() {
			if _, err := eng.Check(ctx, reqs[i%benchKeys]); err != nil {
				b.Fatal(err)
			}
			i++
		}
		reportCPU(b, cpu)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime(b)
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, err := eng.Check(ctx, reqs[i%benchKeys]); err != nil {
					b.Error(err)
					return
				}
				i += 7
			}
		})
		reportCPU(b, cpu)
	})
}

// BenchmarkStoreBaseline is the same work done straight on the memory store
// (one op with a prebuilt key): the floor Check's overhead is measured
// against.
func BenchmarkStoreBaseline(b *testing.B) {
	st := memory.New(memory.Options{})
	b.Cleanup(func() { st.Close() })
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1_000_000, Window: time.Second}
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "{edge|remote_address=10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + "}|r:remote_address|fixed_window:1000000:1000000"
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		ops := make([]sluice.Op, 1)
		res := make([]sluice.Result, 1)
		cpu := cpuTime(b)
		i := 0
		for b.Loop() {
			ops[0] = sluice.Op{Key: keys[i%benchKeys], Limit: lim, Cost: 1}
			if err := st.Take(ctx, ops, res); err != nil {
				b.Fatal(err)
			}
			i++
		}
		reportCPU(b, cpu)
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuTime(b)
		defer reportCPU(b, cpu)
		b.RunParallel(func(pb *testing.PB) {
			ops := make([]sluice.Op, 1)
			res := make([]sluice.Result, 1)
			i := 0
			for pb.Next() {
				ops[0] = sluice.Op{Key: keys[i%benchKeys], Limit: lim, Cost: 1}
				if err := st.Take(ctx, ops, res); err != nil {
					b.Error(err)
					return
				}
				i += 7
			}
		})
	})
}

// BenchmarkMatch is the rule lookup alone.
func BenchmarkMatch(b *testing.B) {
	snap, err := rules.Parse("bench.yaml", []byte(benchRules), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	reqs := benchRequests()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if snap.Match("edge", reqs[i%benchKeys].Descriptors[0].Entries) == nil {
			b.Fatal("no match")
		}
		i++
	}
}

const benchPathRules = `
domain: paths
descriptors:
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: sub
    rate_limit: {unit: second, requests_per_unit: 1000000, sub_counters: 4}
  - key: pen
    rate_limit: {unit: second, requests_per_unit: 1000000, penalty: 10s}
  - key: hybrid
    rate_limit: {unit: second, requests_per_unit: 1000000, placement: hybrid}
`

// BenchmarkCheckPaths is BenchmarkCheck's serial case along each way the
// engine plans a descriptor: a rule two entries deep, a rule with
// sub-counters, one with a penalty, a hybrid placement, a limit given in
// the request, and two descriptors in one request.
func BenchmarkCheckPaths(b *testing.B) {
	snap, err := rules.Parse("paths.yaml", []byte(benchPathRules), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range pathCases() {
		reqs := make([]Request, benchKeys)
		for i := range reqs {
			reqs[i] = c.req(i)
		}
		b.Run(c.name, func(b *testing.B) {
			st := memory.New(memory.Options{})
			defer st.Close()
			eng, err := New(DefaultConfig(), StaticRules{snap}, st, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			cpu := cpuTime(b)
			i := 0
			for b.Loop() {
				if _, err := eng.Check(ctx, reqs[i%benchKeys]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkPlan is the engine's planning of BenchmarkCheckPaths' checks
// alone, without the store call, the metrics or the answer: validating,
// loading the policy, the deny lists, matching, resolving each limit,
// building keys and ops (planOnce). Its instructions per op are
// deterministic (no store, no clock), so scripts/instr-engine.sh counts
// them.
func BenchmarkPlan(b *testing.B) {
	snap, err := rules.Parse("paths.yaml", []byte(benchPathRules), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	st := memory.New(memory.Options{})
	defer st.Close()
	eng, err := New(DefaultConfig(), StaticRules{snap}, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range pathCases() {
		reqs := make([]Request, benchKeys)
		for i := range reqs {
			reqs[i] = c.req(i)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if n := planOnce(b, eng, reqs[i%benchKeys]); n == 0 {
					b.Fatal("no op planned")
				}
				i++
			}
		})
	}
}

// planOnce plans req as Check does and returns how many ops it planned.
func planOnce(b *testing.B, eng *Engine, req Request) int {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := validate(&req, eng.cfg.RequestBounds, sc); err != nil {
		b.Fatal(err)
	}
	pol := eng.policy()
	if _, ok := pol.denied(&req); ok {
		b.Fatal("denied")
	}
	eng.plan(pol, sc, &req, nil)
	return len(sc.ops)
}

type pathCase struct {
	name string
	req  func(i int) Request
}

// pathCases are the checks of BenchmarkCheckPaths and BenchmarkPlan.
func pathCases() []pathCase {
	value := func(i int) string { return "v" + strconv.Itoa(i) }
	one := func(d func(i int) Descriptor) func(i int) Request {
		return func(i int) Request { return Request{Domain: "paths", Descriptors: []Descriptor{d(i)}} }
	}
	return []pathCase{
		{"two-entries", one(func(i int) Descriptor { return desc("tenant", "acme", "user", value(i)) })},
		{"sub-counters", one(func(i int) Descriptor { return desc("sub", value(i)) })},
		{"penalty", one(func(i int) Descriptor { return desc("pen", value(i)) })},
		{"hybrid", one(func(i int) Descriptor { return desc("hybrid", value(i)) })},
		{"request-limit", one(func(i int) Descriptor {
			d := desc("any", value(i))
			d.Limit = &LimitOverride{RequestsPerUnit: 1_000_000, Unit: "second"}
			return d
		})},
		{"two-descriptors", func(i int) Request {
			return Request{Domain: "paths", Descriptors: []Descriptor{desc("tenant", "acme", "user", value(i)), desc("pen", value(i))}}
		}},
	}
}
