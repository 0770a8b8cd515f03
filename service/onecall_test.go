package service

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/batch"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
)

// callCounter counts every call the engine makes to a store: Takes and
// Decides alike. It passes Decide through to a store that is a
// batch.Decider (as store/compose's layers pass optional interfaces).
type callCounter struct {
	next  sluice.Store
	calls atomic.Int64
}

func (c *callCounter) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	c.calls.Add(1)
	return c.next.Take(ctx, ops, res)
}

func (c *callCounter) Decide(ctx context.Context, b *batch.Batch) error {
	c.calls.Add(1)
	return c.next.(batch.Decider).Decide(ctx, b)
}

const oneCallRules = `domain: one
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 100}}
  - {key: h, rate_limit: {unit: minute, requests_per_unit: 100, placement: hybrid}}
  - {key: l, rate_limit: {unit: minute, requests_per_unit: 100, placement: local}}
  - {key: c, rate_limit: {algorithm: concurrency, unit: minute, requests_per_unit: 1}}
  - {key: s, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 100}}
  - {key: after, rate_limit: {unit: minute, requests_per_unit: 1, settle: after}}
  - {key: pen, rate_limit: {unit: minute, requests_per_unit: 1, penalty: 10s}}
  - {key: open, rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: open}}
  - {key: closed, rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: closed}}
  - {key: local, rate_limit: {unit: minute, requests_per_unit: 100, failure_mode: local}}
`

// oneCallStep is one check of the scenario and what it must decide.
type oneCallStep struct {
	name string
	req  Request
	want Code
	down bool // the store is down for this step (Redis only)
}

// oneCallSteps runs in order: later steps find the counters earlier
// steps charged (a is spent after "several", s and q after their first
// use, pen's penalty starts on its second use).
func oneCallSteps(prefix string) []oneCallStep {
	d := func(kv ...string) Descriptor {
		kv[1] = prefix + kv[1]
		return desc(kv...)
	}
	refund := d("b", "x")
	refund.Refund = true
	look := d("after", "x")
	look.Hits = u64(0)
	return []oneCallStep{
		{name: "one descriptor", req: Request{Domain: "one", Descriptors: []Descriptor{d("b", "x")}}, want: CodeOK},
		{name: "several descriptors", req: Request{Domain: "one", Descriptors: []Descriptor{d("a", "x"), d("b", "x"), d("b", "y")}}, want: CodeOK},
		{name: "denied", req: Request{Domain: "one", Descriptors: []Descriptor{d("a", "x"), d("b", "x")}}, want: CodeOverLimit},
		{name: "global, hybrid and local placements", req: Request{Domain: "one", Descriptors: []Descriptor{d("b", "x"), d("h", "x"), d("l", "x")}}, want: CodeOK},
		{name: "placements, one denied", req: Request{Domain: "one", Descriptors: []Descriptor{d("a", "x"), d("h", "x"), d("l", "x")}}, want: CodeOverLimit},
		{name: "concurrency acquired", req: Request{Domain: "one", Descriptors: []Descriptor{d("c", "x"), d("b", "x")}}, want: CodeOK},
		{name: "concurrency full", req: Request{Domain: "one", Descriptors: []Descriptor{d("c", "x")}}, want: CodeOverLimit},
		{name: "shadow fits", req: Request{Domain: "one", Descriptors: []Descriptor{d("s", "x"), d("b", "x")}}, want: CodeOK},
		{name: "shadow denies alone (retried as a look before)", req: Request{Domain: "one", Descriptors: []Descriptor{d("s", "x"), d("b", "x")}}, want: CodeOK},
		{name: "quota fits", req: Request{Domain: "one", Descriptors: []Descriptor{d("q", "x"), d("q2", "x")}}, want: CodeOK},
		{name: "one quota limit over: admitted (retried before)", req: Request{Domain: "one", Descriptors: []Descriptor{d("q", "x"), d("q2", "x")}}, want: CodeOK},
		{name: "every quota limit over", req: Request{Domain: "one", Descriptors: []Descriptor{d("q", "x")}}, want: CodeOverLimit},
		{name: "refund beside a take (split before)", req: Request{Domain: "one", Descriptors: []Descriptor{refund, d("h", "x")}}, want: CodeOK},
		{name: "settle-after charge in a denied request (settled alone before)", req: Request{Domain: "one", Descriptors: []Descriptor{d("after", "x"), d("a", "x")}}, want: CodeOverLimit},
		{name: "settle-after look", req: Request{Domain: "one", Descriptors: []Descriptor{look, d("b", "x")}}, want: CodeOverLimit},
		{name: "penalty look", req: Request{Domain: "one", Descriptors: []Descriptor{d("pen", "x")}}, want: CodeOK},
		{name: "penalty starts (a call of its own before)", req: Request{Domain: "one", Descriptors: []Descriptor{d("pen", "x"), d("b", "x")}}, want: CodeOverLimit},
		{name: "in the penalty box", req: Request{Domain: "one", Descriptors: []Descriptor{d("pen", "x")}}, want: CodeOverLimit},
		{name: "store down: open", req: Request{Domain: "one", Descriptors: []Descriptor{d("open", "x")}}, want: CodeOK, down: true},
		{name: "store down: closed", req: Request{Domain: "one", Descriptors: []Descriptor{d("closed", "x"), d("open", "x")}}, want: CodeOverLimit, down: true},
		{name: "store down: local", req: Request{Domain: "one", Descriptors: []Descriptor{d("local", "x"), d("open", "x")}}, want: CodeOK, down: true},
	}
}

// TestOneStoreCallPerCheck: whatever the rule shapes of a request, the
// engine makes exactly one call to its store per check, over the memory
// store and over a Redis-backed compose stack (where the store is down,
// the failure modes decide after that one call; a limit failing to local
// adds one call to the fallback store, and only then).
func TestOneStoreCallPerCheck(t *testing.T) {
	snap, err := rules.Parse("one.yaml", []byte(oneCallRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, st sluice.Store, fallback sluice.Store, down func(bool)) {
		t.Helper()
		c := &callCounter{next: st}
		var fb *callCounter
		cfg := DefaultConfig()
		if fallback != nil {
			fb = &callCounter{next: fallback}
			cfg.Fallback = fb
		}
		e, err := New(cfg, StaticRules{snap}, c, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range oneCallSteps(time.Now().Format("150405.000000")) {
			if s.down && down == nil {
				continue
			}
			if down != nil {
				down(s.down)
			}
			before, fbBefore := c.calls.Load(), int64(0)
			if fb != nil {
				fbBefore = fb.calls.Load()
			}
			resp, err := e.Check(context.Background(), s.req)
			if err != nil {
				t.Fatalf("%s: Check: %v", s.name, err)
			}
			if got := c.calls.Load() - before; got != 1 {
				t.Errorf("%s: %d store calls, want 1", s.name, got)
			}
			if resp.OverallCode != s.want {
				t.Errorf("%s: code %v, want %v (statuses %+v)", s.name, resp.OverallCode, s.want, resp.Statuses)
			}
			if fb != nil {
				wantFB := int64(0)
				for _, d := range s.req.Descriptors {
					if s.down && d.Entries[0].Key == "local" {
						wantFB = 1
					}
				}
				if got := fb.calls.Load() - fbBefore; got != wantFB {
					t.Errorf("%s: %d fallback calls, want %d", s.name, got, wantFB)
				}
			}
		}
	}
	t.Run("memory", func(t *testing.T) {
		st := memory.New(memory.Options{})
		t.Cleanup(func() { st.Close() })
		run(t, st, nil, nil)
	})
	t.Run("redis stack", func(t *testing.T) {
		srv := redistest.Start(t)
		cfg := compose.DefaultConfig()
		cfg.Kind = compose.KindRedis
		cfg.Redis = redis.Options{URL: srv.URL(), Timeout: 2 * time.Second}
		st, err := compose.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		isDown := false
		run(t, st, st.Fallback(), func(down bool) {
			if down && !isDown {
				srv.Kill()
			}
			isDown = down
		})
	})
}
