package service

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
)

const lateRules = `
domain: test
descriptors:
  - {key: dflt, rate_limit: {unit: hour, requests_per_unit: 4}}
  - {key: open, rate_limit: {unit: hour, requests_per_unit: 4, failure_mode: open}}
  - {key: closed, rate_limit: {unit: hour, requests_per_unit: 4, failure_mode: closed}}
  - {key: local, rate_limit: {unit: hour, requests_per_unit: 4, failure_mode: local}}
  - {key: shadowclosed, shadow_mode: true, rate_limit: {unit: hour, requests_per_unit: 4, failure_mode: closed}}
`

// TestUndoIfUnknownPlanned: the Takes a store timeout would not leave
// admitted ask the store to undo a charge it learns of late; the others
// (failing open, looks) do not.
func TestUndoIfUnknownPlanned(t *testing.T) {
	over := func(d Descriptor) Descriptor {
		d.Limit = &LimitOverride{RequestsPerUnit: 9, Unit: "second"}
		return d
	}
	look := func(d Descriptor) Descriptor {
		d.Hits = u64(0)
		return d
	}
	tests := []struct {
		name     string
		dflt     rules.FailureMode
		fallback bool
		req      Request
		want     []bool // per op, in descriptor order
	}{
		{"open", rules.FailureOpen, true, req(desc("open", "a")), []bool{false}},
		{"closed", rules.FailureOpen, true, req(desc("closed", "a")), []bool{true}},
		{"closed look", rules.FailureOpen, true, req(look(desc("closed", "a"))), []bool{false}},
		{"local", rules.FailureOpen, true, req(desc("local", "a")), []bool{true}},
		{"local without a fallback fails open", rules.FailureOpen, false, req(desc("local", "a")), []bool{false}},
		{"shadow closed does not deny", rules.FailureOpen, true, req(desc("shadowclosed", "a")), []bool{false}},
		{"a closed limit denies the whole request", rules.FailureOpen, true,
			req(desc("open", "a"), desc("closed", "a"), desc("local", "a")), []bool{true, true, true}},
		{"open and local", rules.FailureOpen, true, req(desc("open", "a"), desc("local", "a")), []bool{false, true}},
		{"default mode closed", rules.FailureClosed, true, req(desc("dflt", "a")), []bool{true}},
		{"default mode open", rules.FailureOpen, true, req(desc("dflt", "a")), []bool{false}},
		{"override under default closed", rules.FailureClosed, true, req(over(desc("dflt", "a"))), []bool{true}},
	}
	snap, err := rules.Parse("test.yaml", []byte(lateRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := &countingStore{}
			cfg := DefaultConfig()
			cfg.DefaultFailureMode = tt.dflt
			h := newHarnessSnap(t, snap, cfg, cs)
			cs.next = h.store
			if tt.fallback {
				h.eng.cfg.Fallback = memory.New(memory.Options{})
			}
			h.check(t, tt.req)
			if len(cs.ops) != 1 || len(cs.ops[0]) != len(tt.want) {
				t.Fatalf("store saw %v, want one Take of %d ops", cs.ops, len(tt.want))
			}
			for i, op := range cs.ops[0] {
				if op.UndoIfUnknown != tt.want[i] {
					t.Errorf("op %d (%s): UndoIfUnknown %v, want %v", i, op.Key, op.UndoIfUnknown, tt.want[i])
				}
			}
		})
	}
}

// TestLateReplyRedis: a request whose store call runs in Redis but answers
// after the store timeout (a proxy holds the reply) is decided by its
// failure mode, and the charge made anyway is taken back for closed and
// local limits, kept for open ones: the quota left afterwards says so.
// Each case has its own proxy (its replies are the ones held), store (its
// Stats are the case's), engine and key prefix on one server, and mostly
// waits for its late reply: the cases run side by side.
func TestLateReplyRedis(t *testing.T) {
	t.Parallel() // its own server; it mostly waits for held replies
	srv := redistest.Start(t)
	// Long enough that no call but the held one times out on a loaded
	// machine (the held reply comes at 3 × timeout).
	const timeout = time.Second
	patient := redis.BreakerOptions{ConsecutiveTimeouts: 1 << 20, FailureRatio: 1, MinCalls: 1 << 20}
	snap, err := rules.Parse("test.yaml", []byte(lateRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// open returns a proxy to the server, a store behind it with keys
	// under prefix, and an engine over the store that has loaded the
	// script and learnt the node's clock.
	open := func(t *testing.T, prefix string) (*redistest.Proxy, *redis.Store, *Engine) {
		t.Helper()
		proxy := redistest.StartProxy(t, srv.Addr())
		st, err := redis.New(redis.Options{URL: proxy.URL(), Prefix: prefix, Timeout: timeout, Breaker: patient})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		fallback := memory.New(memory.Options{})
		t.Cleanup(func() { fallback.Close() })
		cfg := DefaultConfig()
		cfg.Fallback = fallback
		eng, err := New(cfg, StaticRules{snap}, st, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 { // load the script, teach the store the node's clock
			if _, err := eng.Check(ctx, req(desc("open", "warm"))); err != nil {
				t.Fatal(err)
			}
		}
		return proxy, st, eng
	}

	tests := []struct {
		key      string
		degraded Degraded
		code     Code
		refunded uint64
		left     []int // requests the store may admit afterwards
	}{
		{"closed", FailedClosed, CodeOverLimit, 1, []int{4}},
		{"local", Local, CodeOK, 1, []int{4}},
		// open undoes nothing: the held call keeps its charge if it ran (3
		// left), but on a loaded host the call can reach Redis after its
		// deadline, and the script's deadline guard then runs nothing (4).
		// Either way no refund may be sent (LateRefunded +0, above).
		{"open", FailedOpen, CodeOK, 0, []int{3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel() // a proxy, store, engine and keys of its own
			proxy, st, eng := open(t, "late-"+tt.key+":")
			before := st.Stats()
			proxy.SetReplyDelay(3 * timeout)
			start := time.Now()
			resp, err := eng.Check(ctx, req(desc(tt.key, "late")))
			proxy.SetReplyDelay(0)
			if err != nil {
				t.Fatal(err)
			}
			if s := resp.Statuses[0]; s.Degraded != tt.degraded || resp.OverallCode != tt.code {
				t.Fatalf("with the reply held: %v, degraded %q; want %v, %q", resp.OverallCode, s.Degraded, tt.code, tt.degraded)
			}
			for time.Since(start) < 4*timeout ||
				st.Stats().LateRefunded-before.LateRefunded < tt.refunded && time.Since(start) < time.Minute {
				time.Sleep(10 * time.Millisecond)
			}
			got := st.Stats()
			if d := got.LateRefunded - before.LateRefunded; d != tt.refunded {
				t.Errorf("LateRefunded +%d, want +%d", d, tt.refunded)
			}
			if d := got.RefundFailures - before.RefundFailures; d != 0 {
				t.Errorf("RefundFailures +%d, want +0", d)
			}
			admitted := 0
			for range 5 {
				resp, err := eng.Check(ctx, req(desc(tt.key, "late")))
				if err != nil {
					t.Fatal(err)
				}
				if d := resp.Statuses[0].Degraded; d != NotDegraded {
					t.Fatalf("the store did not answer: %q", d)
				}
				if resp.OverallCode == CodeOK {
					admitted++
				}
			}
			if !slices.Contains(tt.left, admitted) {
				t.Errorf("%d of 5 requests admitted after the late reply, want one of %v (quota 4)", admitted, tt.left)
			}
		})
	}
}
