package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// choiceRules: a key's own limit (a requirement), per-model limits of
// choice group "model" (the alternatives: big 2, mid 1, any other 5), a
// team limit (another requirement) and a second group, "backend".
const choiceRules = `domain: llm
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: model
        value: big
        rate_limit: {unit: minute, requests_per_unit: 2, choice: model}
      - key: model
        value: mid
        rate_limit: {unit: minute, requests_per_unit: 1, choice: model}
      - key: model
        rate_limit: {unit: minute, requests_per_unit: 5, choice: model}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: backend
    rate_limit: {unit: minute, requests_per_unit: 1, choice: backend}
  - key: tokens
    descriptors:
      - key: request_id
        rate_limit: {unit: hour, requests_per_unit: 100, settle: reserve, pair_by: request_id}
`

// choiceEngine is an engine over one of the stores the tests run on, its
// store calls counted.
type choiceEngine struct {
	eng   *Engine
	calls *callCounter
}

// choiceStores builds, per store, an engine deciding choiceRules with a
// fake clock: memory, and the compose stack over Redis, single and
// Cluster (shared, each engine its own key prefix).
func choiceStores(t *testing.T) map[string]func(t *testing.T) choiceEngine {
	t.Helper()
	snap, err := rules.Parse("llm.yaml", []byte(choiceRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	build := func(t *testing.T, st sluice.Store, clock *storetest.Clock) choiceEngine {
		c := &callCounter{next: st}
		cfg := DefaultConfig()
		cfg.Now = clock.Now
		e, err := New(cfg, StaticRules{snap}, c, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return choiceEngine{eng: e, calls: c}
	}
	overRedis := func(url func() string) func(t *testing.T) choiceEngine {
		return func(t *testing.T) choiceEngine {
			clock := storetest.NewClock()
			cfg := compose.DefaultConfig()
			cfg.Kind = compose.KindRedis
			cfg.Redis = redis.Options{URL: url(), Timeout: 5 * time.Second, Now: clock.Now, Prefix: fmt.Sprintf("c%d:", time.Now().UnixNano())}
			st, err := compose.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return build(t, st, clock)
		}
	}
	var single, cluster string
	var once, onceC sync.Once
	return map[string]func(t *testing.T) choiceEngine{
		"memory": func(t *testing.T) choiceEngine {
			clock := storetest.NewClock()
			st := memory.New(memory.Options{Now: clock.Now})
			t.Cleanup(func() { st.Close() })
			return build(t, st, clock)
		},
		"redis": overRedis(func() string {
			once.Do(func() { single = redistest.Start(t).URL() })
			return single
		}),
		"redis cluster": overRedis(func() string {
			onceC.Do(func() { cluster = redistest.StartCluster(t).URL() })
			return cluster
		}),
	}
}

// choiceStep is one check and what it must answer: the overall code, the
// chosen alternative's descriptor index (-1: none), each status's code
// and Untried, and the store calls it makes.
type choiceStep struct {
	descs   []Descriptor
	code    Code
	chosen  int
	codes   []Code
	untried []bool
	calls   int64
	// passed, when set, is each status's PassedOver; nil: the over
	// statuses of an admitted request.
	passed []bool
}

// TestChoice: first with quota, table-driven, on memory and Redis (single
// and Cluster): the first alternative that admits with the requirements
// is charged and named, one store call per try; one over, the next is
// tried; a requirement over ends the tries with nothing charged on any
// alternative; all over, the request is denied with each alternative's
// denial in its status. The counters read afterwards show what was
// charged.
func TestChoice(t *testing.T) {
	key := func(k string) Descriptor { return desc("api_key", k) }
	model := func(k, m string) Descriptor { return desc("api_key", k, "model", m) }
	team := desc("team", "t")
	ok, over := CodeOK, CodeOverLimit
	tests := []struct {
		name  string
		steps []choiceStep
		// look: descriptors looked at after the steps, and the count each
		// must have left.
		look []Descriptor
		want []int64
	}{
		{name: "first admits",
			steps: []choiceStep{{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: ok, chosen: 1,
				codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1}},
			look: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, want: []int64{99, 1, 1}},
		{name: "first over, second charged",
			steps: []choiceStep{
				{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: ok, chosen: 1, codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1},
				{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: ok, chosen: 1, codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1},
				{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: ok, chosen: 2, codes: []Code{ok, over, ok}, untried: []bool{false, false, false}, calls: 2},
			},
			look: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, want: []int64{97, 0, 0}},
		{name: "order is the request's",
			steps: []choiceStep{{descs: []Descriptor{model("k", "mid"), key("k"), model("k", "big")}, code: ok, chosen: 0,
				codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1}},
			look: []Descriptor{model("k", "mid"), model("k", "big")}, want: []int64{0, 2}},
		{name: "requirement over: none tried further, nothing charged",
			steps: []choiceStep{
				{descs: []Descriptor{team, model("a", "big"), model("a", "mid")}, code: ok, chosen: 1, codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1},
				{descs: []Descriptor{team, model("b", "big"), model("b", "mid")}, code: ok, chosen: 1, codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1},
				{descs: []Descriptor{team, model("c", "big"), model("c", "mid")}, code: ok, chosen: 1, codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1},
				// team is spent: the first try is denied by it, so mid is
				// not tried and big, admitted by its own limit, is not
				// charged (all-or-nothing).
				{descs: []Descriptor{team, model("d", "big"), model("d", "mid")}, code: over, chosen: -1, codes: []Code{over, ok, ok}, untried: []bool{false, false, true}, calls: 1},
			},
			look: []Descriptor{model("d", "big"), model("d", "mid"), key("d")}, want: []int64{2, 1, 100}},
		{name: "all over",
			steps: []choiceStep{
				{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: ok, chosen: 1, codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1},
				{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: ok, chosen: 1, codes: []Code{ok, ok, ok}, untried: []bool{false, false, true}, calls: 1},
				{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: ok, chosen: 2, codes: []Code{ok, over, ok}, untried: []bool{false, false, false}, calls: 2},
				// Both windows end together: the earlier alternative is
				// the one the request waits for, the other is passed over.
				{descs: []Descriptor{key("k"), model("k", "big"), model("k", "mid")}, code: over, chosen: -1, codes: []Code{ok, over, over}, untried: []bool{false, false, false}, calls: 2,
					passed: []bool{false, false, true}},
			},
			// the denied fourth request charged the key nothing
			look: []Descriptor{key("k")}, want: []int64{97}},
		{name: "one alternative is named",
			steps: []choiceStep{{descs: []Descriptor{model("k", "other")}, code: ok, chosen: 0, codes: []Code{ok}, untried: []bool{false}, calls: 1}},
			look:  []Descriptor{model("k", "other")}, want: []int64{4}},
		{name: "no alternatives: one call",
			steps: []choiceStep{{descs: []Descriptor{key("k"), team}, code: ok, chosen: -1, codes: []Code{ok, ok}, untried: []bool{false, false}, calls: 1}},
			look:  []Descriptor{key("k")}, want: []int64{99}},
	}
	for name, mk := range choiceStores(t) {
		t.Run(name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ce := mk(t)
					ctx := context.Background()
					for i, s := range tt.steps {
						before := ce.calls.calls.Load()
						resp, err := ce.eng.Check(ctx, Request{Domain: "llm", Descriptors: s.descs})
						if err != nil {
							t.Fatalf("step %d: %v", i, err)
						}
						if got := ce.calls.calls.Load() - before; got != s.calls {
							t.Errorf("step %d: %d store calls, want %d", i, got, s.calls)
						}
						if resp.OverallCode != s.code {
							t.Errorf("step %d: code %v, want %v", i, resp.OverallCode, s.code)
						}
						switch c := resp.Choice; {
						case s.chosen < 0 && c != nil:
							t.Errorf("step %d: choice %+v, want none", i, *c)
						case s.chosen >= 0 && c == nil:
							t.Errorf("step %d: no choice, want descriptor %d", i, s.chosen)
						case s.chosen >= 0:
							en := s.descs[s.chosen].Entries[len(s.descs[s.chosen].Entries)-1]
							if c.Group != "model" || c.Descriptor != s.chosen || c.Key != en.Key || c.Value != en.Value {
								t.Errorf("step %d: choice %+v, want group model, descriptor %d, %s=%s", i, *c, s.chosen, en.Key, en.Value)
							}
						}
						for j, st := range resp.Statuses {
							if st.Code != s.codes[j] || st.Untried != s.untried[j] {
								t.Errorf("step %d: status %d: code %v untried %v, want %v %v", i, j, st.Code, st.Untried, s.codes[j], s.untried[j])
							}
							want := resp.Choice != nil && st.Code == CodeOverLimit
							if s.passed != nil {
								want = s.passed[j]
							}
							if st.PassedOver != want {
								t.Errorf("step %d: status %d: passed over %v, want %v", i, j, st.PassedOver, want)
							}
							if st.Untried && (st.CurrentLimit != nil || st.Rule == nil) {
								t.Errorf("step %d: untried status %d: %+v, want its rule and no current limit", i, j, st)
							}
						}
					}
					for i, d := range tt.look {
						d.Hits = u64(0)
						resp, err := ce.eng.Check(ctx, Request{Domain: "llm", Descriptors: []Descriptor{d}})
						if err != nil {
							t.Fatal(err)
						}
						if got := resp.Statuses[0].Result.Remaining; got != tt.want[i] {
							t.Errorf("after: %v has %d left, want %d", d.Entries, got, tt.want[i])
						}
					}
				})
			}
		})
	}
}

// TestChoiceIndex: Choice.Index counts the group's alternatives only (a
// requirement between them is not one).
func TestChoiceIndex(t *testing.T) {
	h := newHarness(t, choiceRules, DefaultConfig())
	d := []Descriptor{desc("api_key", "k", "model", "mid"), desc("api_key", "k"), desc("api_key", "k", "model", "big")}
	h.check(t, Request{Domain: "llm", Descriptors: d}) // mid spent
	resp := h.check(t, Request{Domain: "llm", Descriptors: d})
	if c := resp.Choice; c == nil || c.Index != 1 || c.Descriptor != 2 || c.Value != "big" {
		t.Fatalf("choice %+v, want index 1, descriptor 2, big", c)
	}
	if got := h.decisions("llm", "api_key.model=mid", OutcomeDenied); got != 1 {
		t.Errorf("mid's denied decisions: %v, want 1 (counted at its try)", got)
	}
}

// TestChoiceTwoGroups: a request with alternatives of two groups is
// invalid, and charges nothing.
func TestChoiceTwoGroups(t *testing.T) {
	h := newHarness(t, choiceRules, DefaultConfig())
	req := Request{Domain: "llm", Descriptors: []Descriptor{desc("api_key", "k", "model", "big"), desc("backend", "b1")}}
	if _, err := h.eng.Check(context.Background(), req); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Check = %v, want ErrInvalidRequest", err)
	}
	look := desc("backend", "b1")
	look.Hits = u64(0)
	if st := h.check(t, Request{Domain: "llm", Descriptors: []Descriptor{look}}).Statuses[0]; st.Result.Remaining != 1 {
		t.Errorf("backend b1 has %d left, want 1 (nothing charged)", st.Result.Remaining)
	}
}

// TestChoiceConcurrent: many goroutines choose among alternatives with
// small limits beside a requirement with room for all: each alternative
// admits exactly its limit, and the admissions total their sum, on memory
// and Redis (single and Cluster).
func TestChoiceConcurrent(t *testing.T) {
	for name, mk := range choiceStores(t) {
		t.Run(name, func(t *testing.T) {
			ce := mk(t)
			const workers, each = 16, 4 // 64 requests for 2 + 1 + 5 = 8 admissions
			descs := []Descriptor{desc("api_key", "k"), desc("api_key", "k", "model", "big"), desc("api_key", "k", "model", "mid"), desc("api_key", "k", "model", "other")}
			var mu sync.Mutex
			chosen := map[string]int{}
			denied := 0
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						resp, err := ce.eng.Check(context.Background(), Request{Domain: "llm", Descriptors: descs})
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						if resp.Choice != nil {
							chosen[resp.Choice.Value]++
						} else {
							denied++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			want := map[string]int{"big": 2, "mid": 1, "other": 5}
			for m, n := range want {
				if chosen[m] != n {
					t.Errorf("%s admitted %d times, want %d (its limit)", m, chosen[m], n)
				}
			}
			if total := chosen["big"] + chosen["mid"] + chosen["other"]; total != 8 || denied != workers*each-8 {
				t.Errorf("admitted %d, denied %d; want 8 (the sum of the limits) and %d", total, denied, workers*each-8)
			}
			look := desc("api_key", "k")
			look.Hits = u64(0)
			resp, err := ce.eng.Check(context.Background(), Request{Domain: "llm", Descriptors: []Descriptor{look}})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Statuses[0].Result.Remaining; got != 92 {
				t.Errorf("the key has %d left, want 92 (charged once per admission, never for a denial)", got)
			}
		})
	}
}

// TestChoiceStoreDown: when the store fails at a try, that try's failure
// modes decide and no further alternative is tried: failing open admits
// with the first alternative (named, nothing charged), failing closed
// denies without a choice; one store call either way.
func TestChoiceStoreDown(t *testing.T) {
	snap, err := rules.Parse("llm.yaml", []byte(choiceRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []rules.FailureMode{rules.FailureOpen, rules.FailureClosed} {
		fs := &failingStore{err: errStoreDown}
		fs.fail.Store(true)
		cfg := DefaultConfig()
		cfg.DefaultFailureMode = mode
		e, err := New(cfg, StaticRules{snap}, fs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.Check(context.Background(), Request{Domain: "llm", Descriptors: []Descriptor{
			desc("api_key", "k"), desc("api_key", "k", "model", "big"), desc("api_key", "k", "model", "mid")}})
		if err != nil {
			t.Fatal(err)
		}
		if got := fs.calls.Load(); got != 1 {
			t.Errorf("%v: %d store calls, want 1 (no second try after a failure)", mode, got)
		}
		open := mode == rules.FailureOpen
		if (resp.OverallCode == CodeOK) != open || (resp.Choice != nil) != open {
			t.Errorf("%v: code %v, choice %+v; want admitted with a choice: %v", mode, resp.OverallCode, resp.Choice, open)
		}
		if open && (resp.Choice.Descriptor != 1 || resp.Statuses[1].Degraded != FailedOpen) {
			t.Errorf("open: choice %+v, status %+v; want big, failed open", resp.Choice, resp.Statuses[1])
		}
		if !resp.Statuses[2].Untried {
			t.Errorf("%v: mid's status %+v, want untried", mode, resp.Statuses[2])
		}
	}
}

// TestChoiceWithReservation: a reservation (settle: reserve) among a
// choice's requirements is taken once however many alternatives are
// tried (a try denied by its alternative voids nothing), settles as any
// reservation, and is voided when every alternative is over, so that the
// request's stream-done call charges nothing. On memory, Redis and
// Cluster.
func TestChoiceWithReservation(t *testing.T) {
	ctx := context.Background()
	for name, mk := range choiceStores(t) {
		t.Run(name, func(t *testing.T) {
			ce := mk(t)
			// The reservation of id (hits given), then mid and big.
			req := func(id string, hits uint64, models ...string) Request {
				d := desc("tokens", "k", "request_id", id)
				d.Hits = &hits
				r := Request{Domain: "llm", Descriptors: []Descriptor{d}}
				for _, m := range models {
					r.Descriptors = append(r.Descriptors, desc("api_key", "a", "model", m))
				}
				return r
			}
			steps := []struct {
				what      string
				req       Request
				code      Code
				chosen    string // "" when none
				remaining int64  // of the token budget, after the step
			}{
				{"R1: mid admits, 10 reserved", req("r1", 10, "mid", "big"), CodeOK, "mid", 90},
				{"R2: mid over, big admits; 10 reserved once", req("r2", 10, "mid", "big"), CodeOK, "big", 80},
				{"R2's settle of 4 refunds 6", req("r2", 4), CodeOK, "", 86},
				{"R3: big admits", req("r3", 10, "mid", "big"), CodeOK, "big", 76},
				{"R4: every alternative over: denied, nothing reserved", req("r4", 10, "mid", "big"), CodeOverLimit, "", 76},
				{"R4's stream-done call: ignored (voided)", req("r4", 50), CodeOK, "", 76},
			}
			for _, st := range steps {
				resp, err := ce.eng.Check(ctx, st.req)
				if err != nil {
					t.Fatalf("%s: %v", st.what, err)
				}
				chosen := ""
				if resp.Choice != nil {
					chosen = resp.Choice.Value
				}
				if resp.OverallCode != st.code || chosen != st.chosen || resp.Statuses[0].Result.Remaining != st.remaining {
					t.Errorf("%s: code %v, chosen %q, budget remaining %d; want %v, %q, %d",
						st.what, resp.OverallCode, chosen, resp.Statuses[0].Result.Remaining, st.code, st.chosen, st.remaining)
				}
			}
		})
	}
}
