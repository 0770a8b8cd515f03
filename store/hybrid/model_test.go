package hybrid

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/proof/model"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The model's parameters for the step tables (allot.pml's defines): a
// fixed_window of modelQ per modelW ticks, a reserve of 1 unit, grants of
// at most half of what stands above it; a lease asks for the whole quota
// (the Go side sets need to the capacity, so want is the capacity too).
const (
	modelQ    = 8
	modelW    = 2 // ticks
	modelKeep = 1
	modelTick = time.Second
)

// modelStep is one step of a table, run both by the model (as Promela) and
// by two store/hybrid instances over one store/memory.
type modelStep struct {
	op   string // see stepPromela
	inst int
}

// stepPromela is each step in the model's terms: the inlines of allot.pml
// that the protocol's steps are, in the order the Go code takes them.
var stepPromela = map[string]string{
	"tick":       "tick()",
	"hit":        "hit(%[1]d)",
	"lease":      "sendLease(%[1]d, WANT); processLease(%[1]d); applyReply(%[1]d)",
	"lease-slow": "sendLease(%[1]d, WANT); tick(); processLease(%[1]d); applyReply(%[1]d)", // processed a tick after it was sent
	"lease-late": "sendLease(%[1]d, WANT); processLease(%[1]d); tick(); applyReply(%[1]d)", // its reply lands a tick later
	"lost":       "sendLease(%[1]d, WANT); processLease(%[1]d); clearLease(%[1]d); lost++", // counted, reply lost
	"give":       "sendGive(%[1]d); processGive(%[1]d)",
	"give-late":  "sendGive(%[1]d); tick(); processGive(%[1]d)", // lands a tick later
	"reset":      "reset(%[1]d)",                                // through instance inst
	"hear":       "hear(%[1]d)",
	"miss":       "pend[%[1]d] = 2; hear(%[1]d)", // told announcements may have been missed
}

// TestModelStepTable ties internal/proof/model's allot.pml to the code it
// models: each table is run by Spin (allot.pml with -DSCRIPT, whose
// assertions check the bounds on the way) and by store/hybrid over
// store/memory on a controllable clock, and after every step both must
// agree on whether a hit was admitted, the units each instance can spend,
// and the store's counter. A change to either that the other does not
// follow fails here.
func TestModelStepTable(t *testing.T) {
	tables := []struct {
		name  string
		steps []modelStep
	}{
		{"lease, spend, run dry, next window", []modelStep{
			{"hit", 0}, {"lease", 0}, {"hit", 0}, {"hit", 0}, {"hit", 0}, {"hit", 0}, {"lease", 1}, {"hit", 1},
			{"hit", 0}, {"hit", 1}, {"hit", 1}, {"hit", 1}, {"tick", 0}, {"hit", 0}, {"tick", 0}, {"hit", 0}, {"hit", 1},
		}},
		{"a late reply lands in the next window", []modelStep{
			{"tick", 0}, {"lease-late", 0}, {"hit", 0}, {"hit", 0}, {"lease", 0}, {"hit", 0},
		}},
		{"a slow lease: its deadline counts from when it was sent", []modelStep{
			{"lease-slow", 0}, {"hit", 0}, {"lease", 1}, {"hit", 1}, {"tick", 0}, {"hit", 1},
		}},
		{"a reset whose announcement comes late", []modelStep{
			{"lease", 0}, {"lease", 1}, {"reset", 0}, {"hit", 0}, {"hit", 1}, {"hear", 1}, {"hit", 1}, {"lease", 1}, {"hit", 1},
		}},
		{"a reset never announced, then all voided", []modelStep{
			{"lease", 0}, {"lease", 1}, {"reset", 1}, {"hit", 0}, {"miss", 0}, {"hit", 0}, {"lease", 0}, {"hit", 0},
		}},
		{"give-backs, one landing in the next window", []modelStep{
			{"lease", 0}, {"hit", 0}, {"give", 0}, {"hit", 1}, {"tick", 0}, {"lease", 0}, {"give-late", 0}, {"hit", 0}, {"lease", 1}, {"hit", 1},
		}},
		{"a lost reply: counted, never spent", []modelStep{
			{"lost", 0}, {"hit", 0}, {"lease", 0}, {"hit", 0}, {"lost", 1}, {"lease", 1}, {"hit", 1},
		}},
	}
	defines := []string{fmt.Sprintf("-DQ=%d", modelQ), fmt.Sprintf("-DW=%d", modelW), fmt.Sprintf("-DKEEP=%d", modelKeep),
		"-DSPLIT=2", fmt.Sprintf("-DWANT=%d", modelQ), "-DTMAX=4"}
	for _, tb := range tables {
		t.Run(tb.name, func(t *testing.T) {
			want, err := runModel(t, tb.steps, defines)
			if errors.Is(err, model.ErrNoSpin) {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%v (CI=true: .ci/run installs them)", err)
				}
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			got := runGo(t, tb.steps)
			for i := range tb.steps {
				if got[i] != want[i] {
					t.Errorf("step %d (%s %d): store/hybrid %+v, the model %+v", i, tb.steps[i].op, tb.steps[i].inst, got[i], want[i])
				}
			}
		})
	}
}

// observed is what a step left: whether the hit was admitted (hits only),
// the units each instance can spend, the store's count in the window.
type observed struct {
	admitted     int // -1: not a hit
	held0, held1 int
	cur          int
}

var reObserved = regexp.MustCompile(`(?m)^\s*S (-?\d+) (\d+) (\d+) (\d+)$`)

// runModel runs steps through allot.pml and returns what it printed after
// each.
func runModel(t *testing.T, steps []modelStep, defines []string) ([]observed, error) {
	t.Helper()
	var b strings.Builder
	for _, s := range steps {
		p, ok := stepPromela[s.op]
		if !ok {
			t.Fatalf("unknown step %q", s.op)
		}
		admitted := "-1"
		if s.op == "hit" {
			admitted = "lastAdmit"
		}
		fmt.Fprintf(&b, "\tatomic { %s; scrub() };\n", strings.ReplaceAll(p, "%[1]d", strconv.Itoa(s.inst)))
		fmt.Fprintf(&b, "\tprintf(\"S %%d %%d %%d %%d\\n\", %s, (now < deadline[0] -> held[0] : 0), (now < deadline[1] -> held[1] : 0), cur);\n", admitted)
	}
	out, err := model.Simulate(t.TempDir(), []byte(b.String()), defines)
	if err != nil {
		return nil, err
	}
	ms := reObserved.FindAllStringSubmatch(out, -1)
	if len(ms) != len(steps) {
		t.Fatalf("the model printed %d step lines for %d steps:\n%s", len(ms), len(steps), out)
	}
	obs := make([]observed, len(ms))
	for i, m := range ms {
		v := make([]int, 4)
		for j := range v {
			v[j], _ = strconv.Atoi(m[j+1])
		}
		obs[i] = observed{v[0], v[1], v[2], v[3]}
	}
	return obs, nil
}

// stepAllotter is the global store between the instances and
// store/memory: before runs before a call reaches the store (a slow
// lease: the clock moves first), after once it answered (a late or lost
// reply).
type stepAllotter struct {
	*memory.Store
	before func()
	after  func() error
}

func (a *stepAllotter) Allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	if a.before != nil {
		a.before()
	}
	err := a.Store.Allot(ctx, reqs, out)
	if err == nil && a.after != nil {
		err = a.after()
	}
	return err
}

// runGo runs steps through two store/hybrid instances and returns what
// each step left.
func runGo(t *testing.T, steps []modelStep) []observed {
	t.Helper()
	ctx := context.Background()
	clock := storetest.NewClock() // storetest.Epoch: a multiple of the window
	mem := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { mem.Close() })
	g := &stepAllotter{Store: mem}
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: modelQ, Window: modelW * modelTick}
	var hs [2]*Store
	for i := range hs {
		// Horizon 1µs: every key is too cold to lease on its own (hits
		// are 1µs apart at least), so leases happen only where the table
		// says. Keep: one unit of the quota, as the model's KEEP.
		h, err := New(g, Options{Now: clock.Now, Horizon: time.Microsecond, Split: 2, Keep: float64(modelKeep) / modelQ, Idle: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs[i] = h
	}
	op := sluice.Op{Key: "k", Limit: l, Cost: 1}
	k := entryKey{op.Key, normalize(op).Limit}
	lost := errors.New("the reply was lost")
	var obs []observed
	for _, s := range steps {
		h := hs[s.inst]
		res := make([]sluice.Result, 1)
		o := observed{admitted: -1}
		lease := func() {
			sh := h.shardOf(k)
			sh.mu.Lock()
			e := h.lookup(sh, k, true, h.now())
			e.need, e.refilling = modelQ, true
			sh.mu.Unlock()
			h.allot(ctx, []entryKey{k}, h.now())
		}
		tick := func() { clock.Advance(modelTick) }
		switch s.op {
		case "tick":
			tick()
		case "hit":
			if err := h.Take(ctx, []sluice.Op{op}, res); err != nil {
				t.Fatalf("hit: %v", err)
			}
			o.admitted = 0
			if res[0].Allowed {
				o.admitted = 1
			}
			clock.Advance(time.Microsecond) // keeps the key cold (see New above)
		case "lease":
			lease()
		case "lease-slow":
			g.before = tick
			lease()
		case "lease-late":
			g.after = func() error { tick(); return nil }
			lease()
		case "lost":
			g.after = func() error { return lost }
			lease()
		case "give":
			h.Sweep(ctx, true)
		case "give-late":
			g.before = tick
			h.Sweep(ctx, true)
		case "reset":
			if err := h.Take(ctx, []sluice.Op{{Key: op.Key, Limit: l, Action: sluice.Reset}}, res); err != nil {
				t.Fatalf("reset: %v", err)
			}
		case "hear":
			h.heardResets([]string{op.Key}, false)
		case "miss":
			h.heardResets(nil, true)
		default:
			t.Fatalf("unknown step %q", s.op)
		}
		g.before, g.after = nil, nil
		h.wg.Wait()
		for i, h := range hs {
			sh := h.shardOf(k)
			sh.mu.Lock()
			var live int64
			if e := sh.m[k]; e != nil {
				live = e.live(h.now())
			}
			sh.mu.Unlock()
			if i == 0 {
				o.held0 = int(live)
			} else {
				o.held1 = int(live)
			}
		}
		peek := make([]sluice.Result, 1)
		if err := mem.Take(ctx, []sluice.Op{{Key: op.Key, Limit: l, Cost: 0}}, peek); err != nil {
			t.Fatalf("peek: %v", err)
		}
		o.cur = int(modelQ - peek[0].Remaining)
		obs = append(obs, o)
	}
	return obs
}
