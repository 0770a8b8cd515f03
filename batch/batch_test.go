package batch_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/batch"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// counting counts the calls Run makes to the store below it.
type counting struct {
	sluice.Store
	calls int
}

func (c *counting) Take(ctx context.Context, ops []sluice.Op, res []sluice.Result) error {
	c.calls++
	return c.Store.Take(ctx, ops, res)
}

var one = sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute}

func take(key string) sluice.Op { return sluice.Op{Key: key, Limit: one, Cost: 1} }

// TestRun: each role decides as its doc says, in both modes, and Run
// calls the store below once unless a role needs more.
func TestRun(t *testing.T) {
	pen := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10_000_000, Window: 10 * time.Second, Burst: 10_000_000}
	for _, tc := range []struct {
		name    string
		spent   []string // keys spent before the batch
		ops     []sluice.Op
		roles   []batch.Role
		of      []int
		charged bool
		shadow  []bool
		calls   [2]int          // Atomic, Split
		after   map[string]bool // key: whether a Take of 1 is admitted after the batch
	}{
		{name: "enforced, admitted", ops: []sluice.Op{take("a"), take("b")}, charged: true, shadow: []bool{false, false},
			calls: [2]int{1, 1}, after: map[string]bool{"a": false, "b": false}},
		{name: "enforced, denied", spent: []string{"b"}, ops: []sluice.Op{take("a"), take("b")}, charged: false, shadow: []bool{false, false},
			calls: [2]int{1, 1}, after: map[string]bool{"a": true}},
		{name: "shadow denied: a look, the rest charged", spent: []string{"s"}, ops: []sluice.Op{take("a"), take("s")}, roles: []batch.Role{batch.Enforce, batch.Shadow},
			charged: true, shadow: []bool{false, true}, calls: [2]int{2, 2}, after: map[string]bool{"a": false}},
		{name: "one quota op denied: admitted", spent: []string{"q1"}, ops: []sluice.Op{take("q1"), take("q2")}, roles: []batch.Role{batch.Quota, batch.Quota},
			charged: true, shadow: []bool{true, false}, calls: [2]int{2, 2}, after: map[string]bool{"q2": false}},
		{name: "every quota op denied: denied", spent: []string{"q1", "q2"}, ops: []sluice.Op{take("q1"), take("q2"), take("a")}, roles: []batch.Role{batch.Quota, batch.Quota, batch.Enforce},
			charged: false, shadow: []bool{false, false, false}, calls: [2]int{1, 1}, after: map[string]bool{"a": true}},
		{name: "settle applied in a denied batch", spent: []string{"b"}, ops: []sluice.Op{{Key: "c", Limit: one, Cost: 1, Action: sluice.Charge}, take("b")}, roles: []batch.Role{batch.Settle, batch.Enforce},
			charged: false, shadow: []bool{false, false}, calls: [2]int{2, 2}, after: map[string]bool{"c": false}},
		{name: "probe refund undoes its take", ops: []sluice.Op{take("p"), {Key: "p", Limit: one, Cost: 1, Action: sluice.Refund}, take("a")}, roles: []batch.Role{batch.Enforce, batch.Probe, batch.Enforce}, of: []int{0, 0, 0},
			charged: true, shadow: []bool{false, false, false}, calls: [2]int{1, 2}, after: map[string]bool{"p": true, "a": false}},
		{name: "penalty starts when its op is limited", spent: []string{"x"}, ops: []sluice.Op{take("x"), {Key: "x|penalty", Limit: pen, Cost: 1}}, roles: []batch.Role{batch.Enforce, batch.Penalty}, of: []int{0, 0},
			charged: false, shadow: []bool{false, false}, calls: [2]int{2, 2}},
	} {
		for m, mode := range []batch.Mode{batch.Atomic, batch.Split} {
			clock := storetest.NewClock()
			st := memory.New(memory.Options{Now: clock.Now})
			ctx := context.Background()
			for _, k := range tc.spent {
				if err := st.Take(ctx, []sluice.Op{take(k)}, make([]sluice.Result, 1)); err != nil {
					t.Fatal(err)
				}
			}
			c := &counting{Store: st}
			ops := append([]sluice.Op(nil), tc.ops...)
			b := &batch.Batch{Ops: ops, Results: make([]sluice.Result, len(ops)), Roles: tc.roles, Of: tc.of, Shadowed: make([]bool, len(ops))}
			if err := batch.Run(ctx, c, b, mode); err != nil {
				t.Fatalf("%s, mode %d: Run: %v", tc.name, mode, err)
			}
			if b.Charged != tc.charged {
				t.Errorf("%s, mode %d: Charged %v, want %v", tc.name, mode, b.Charged, tc.charged)
			}
			for i := range tc.shadow {
				if b.Shadowed[i] != tc.shadow[i] {
					t.Errorf("%s, mode %d: Shadowed[%d] %v, want %v", tc.name, mode, i, b.Shadowed[i], tc.shadow[i])
				}
				if b.Shadowed[i] && b.Results[i].Allowed {
					t.Errorf("%s, mode %d: Results[%d] allowed, want the denial of a shadowed op", tc.name, mode, i)
				}
			}
			if c.calls != tc.calls[m] {
				t.Errorf("%s, mode %d: %d calls below, want %d", tc.name, mode, c.calls, tc.calls[m])
			}
			for k, want := range tc.after {
				res := make([]sluice.Result, 1)
				if err := st.Take(ctx, []sluice.Op{{Key: k, Limit: one, Cost: 1}}, res); err != nil {
					t.Fatal(err)
				}
				if res[0].Allowed != want {
					t.Errorf("%s, mode %d: a Take of %q after: allowed %v, want %v", tc.name, mode, k, res[0].Allowed, want)
				}
			}
			if tc.name == "penalty starts when its op is limited" {
				res := make([]sluice.Result, 1)
				if err := st.Take(ctx, []sluice.Op{{Key: "x|penalty", Limit: pen, Cost: 1}}, res); err != nil {
					t.Fatal(err)
				}
				if res[0].Allowed {
					t.Errorf("%s, mode %d: penalty look admitted, want denied (the penalty started)", tc.name, mode)
				}
			}
			st.Close()
		}
	}
}

// TestRunShape: slices that do not match Ops are refused.
func TestRunShape(t *testing.T) {
	st := memory.New(memory.Options{})
	defer st.Close()
	b := &batch.Batch{Ops: []sluice.Op{take("a")}, Results: make([]sluice.Result, 1)}
	if err := batch.Run(context.Background(), st, b, batch.Atomic); err != batch.ErrBatchShape {
		t.Fatalf("Run without Shadowed: %v, want ErrBatchShape", err)
	}
}

// TestRunVoidsReservations: a batch denied by another op voids, in one
// more call, the reservations it admitted and undid (sluice.Op.Lease), so
// that their later ops are looks; one admitted in a re-decided pass (a
// shadow denial decided as a look) is charged, not voided.
func TestRunVoidsReservations(t *testing.T) {
	for _, mode := range []batch.Mode{batch.Atomic, batch.Split} {
		clock := storetest.NewClock()
		mem := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { mem.Close() })
		st := &counting{Store: mem}
		budget := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}
		pair := func(lease uint64, cost int64) sluice.Op {
			return sluice.Op{Key: "budget", Limit: budget, Cost: cost, Lease: lease, SettleWithin: time.Minute}
		}
		run := func(ops []sluice.Op, roles []batch.Role) *batch.Batch {
			t.Helper()
			b := &batch.Batch{Ops: ops, Results: make([]sluice.Result, len(ops)), Shadowed: make([]bool, len(ops)), Roles: roles}
			if err := batch.Run(context.Background(), st, b, mode); err != nil || b.SettleErr != nil {
				t.Fatalf("mode %d: Run: %v, %v", mode, err, b.SettleErr)
			}
			return b
		}
		run([]sluice.Op{take("full")}, nil)
		st.calls = 0
		if b := run([]sluice.Op{pair(1, 4), take("full")}, nil); b.Charged || st.calls != 2 {
			t.Fatalf("mode %d: reservation with a denied Take: charged %v in %d calls, want denied in 2 (the decision, the void)", mode, b.Charged, st.calls)
		}
		if b := run([]sluice.Op{pair(1, 0)}, nil); !b.Charged || b.Results[0].Remaining != 10 {
			t.Errorf("mode %d: the voided reservation's next op: %+v, want a look (10 left)", mode, b.Results[0])
		}
		if b := run([]sluice.Op{pair(2, 4), take("full")}, []batch.Role{batch.Enforce, batch.Shadow}); !b.Charged || b.Results[0].Remaining != 6 {
			t.Fatalf("mode %d: reservation with a shadow denial: %+v charged %v, want charged, 6 left", mode, b.Results[0], b.Charged)
		}
		if b := run([]sluice.Op{pair(2, 5)}, nil); b.Results[0].Remaining != 5 {
			t.Errorf("mode %d: the settle of 2 (usage 5): %+v, want 5 left", mode, b.Results[0])
		}
	}
}
