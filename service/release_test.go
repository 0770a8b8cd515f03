package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

const concurrencyRules = `
domain: test
descriptors:
  - key: conc
    rate_limit: {algorithm: concurrency, requests_per_unit: 2, window: 1m}
  - key: conc_shadow
    shadow_mode: true
    rate_limit: {algorithm: concurrency, requests_per_unit: 1, window: 1m}
  - key: local
    rate_limit: {algorithm: concurrency, requests_per_unit: 2, window: 1m, failure_mode: local}
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// leaseStep is one call in a release trace: a check of req (or, with
// release >= 0, a Release of the response of step release), and whether the
// check is admitted and holds a lease per status.
type leaseStep struct {
	req     Request
	release int // index of the step whose response to release; -1: check
	ok      bool
	leased  []bool
}

func TestConcurrencyRelease(t *testing.T) {
	req := func(ds ...Descriptor) Request { return Request{Domain: "test", Descriptors: ds} }
	conc := req(desc("conc", "a"))
	tests := []struct {
		name  string
		steps []leaseStep
	}{
		{"quota 2: third denied, release one, next admitted", []leaseStep{
			{conc, -1, true, []bool{true}},
			{conc, -1, true, []bool{true}},
			{conc, -1, false, []bool{false}},
			{release: 0},
			{conc, -1, true, []bool{true}},
			{conc, -1, false, []bool{false}},
		}},
		{"release twice is harmless", []leaseStep{
			{conc, -1, true, []bool{true}},
			{conc, -1, true, []bool{true}},
			{release: 0},
			{release: 0},
			{conc, -1, true, []bool{true}},
			{conc, -1, false, []bool{false}},
		}},
		{"a denied response holds and releases nothing", []leaseStep{
			{conc, -1, true, []bool{true}},
			{conc, -1, true, []bool{true}},
			{conc, -1, false, []bool{false}},
			{release: 2},
			{conc, -1, false, []bool{false}},
		}},
		{"another limit denies: the concurrency limit takes no lease", []leaseStep{
			{req(desc("conc", "b"), desc("one", "x")), -1, true, []bool{true, false}},
			{req(desc("conc", "b"), desc("one", "x")), -1, false, []bool{false, false}},
			{req(desc("conc", "b")), -1, true, []bool{true}},
			{req(desc("conc", "b")), -1, false, []bool{false}},
		}},
		{"several leases in one response", []leaseStep{
			{req(desc("conc", "c"), desc("conc", "d")), -1, true, []bool{true, true}},
			{req(desc("conc", "c"), desc("conc", "d")), -1, true, []bool{true, true}},
			{req(desc("conc", "c")), -1, false, []bool{false}},
			{release: 0},
			{req(desc("conc", "c"), desc("conc", "d")), -1, true, []bool{true, true}},
		}},
		{"shadow-mode concurrency limits hold leases too", []leaseStep{
			{req(desc("conc_shadow", "a")), -1, true, []bool{true}},
			{req(desc("conc_shadow", "a")), -1, true, []bool{false}}, // shadow denied
			{release: 0},
			{req(desc("conc_shadow", "a")), -1, true, []bool{true}},
		}},
		{"no rule, no lease", []leaseStep{
			{req(desc("nothing", "a")), -1, true, []bool{false}},
			{release: 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, concurrencyRules, DefaultConfig())
			resps := make([]Response, len(tt.steps))
			for i, s := range tt.steps {
				h.clock.Advance(time.Second) // well inside the lease timeout
				if s.req.Domain == "" {
					if err := h.eng.Release(context.Background(), resps[s.release]); err != nil {
						t.Fatalf("step %d: Release(step %d) = %v", i, s.release, err)
					}
					continue
				}
				resp := h.check(t, s.req)
				resps[i] = resp
				if got := resp.OverallCode == CodeOK; got != s.ok {
					t.Errorf("step %d: Check(%v) ok = %v, want %v", i, s.req.Descriptors, got, s.ok)
				}
				for j, st := range resp.Statuses {
					if got := st.Lease != 0; got != s.leased[j] {
						t.Errorf("step %d: status %d: lease %d, want leased %v", i, j, st.Lease, s.leased[j])
					}
					if st.Lease == 0 && st.Result.Lease != 0 {
						t.Errorf("step %d: status %d: Result.Lease %d without Status.Lease", i, j, st.Result.Lease)
					}
				}
				if got, want := resp.Leases(), contains(s.leased, true); got != want {
					t.Errorf("step %d: Leases() = %v, want %v", i, got, want)
				}
			}
		})
	}
}

func contains(bs []bool, v bool) bool {
	for _, b := range bs {
		if b == v {
			return true
		}
	}
	return false
}

func TestReleaseOneStoreCall(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(concurrencyRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{}
	h := newHarnessSnap(t, snap, DefaultConfig(), cs)
	cs.next = h.store
	resp := h.check(t, Request{Domain: "test", Descriptors: []Descriptor{desc("conc", "a"), desc("one", "x"), desc("conc", "b")}})
	if err := h.eng.Release(context.Background(), resp); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if cs.calls != 2 {
		t.Fatalf("store calls = %d, want 2 (check, release)", cs.calls)
	}
	rel := cs.ops[1]
	if len(rel) != 2 {
		t.Fatalf("release ops = %+v, want 2", rel)
	}
	for i, j := range []int{0, 2} {
		check := cs.ops[0][j]
		want := sluice.Op{Key: check.Key, Limit: check.Limit, Release: true, Lease: resp.Statuses[j].Lease}
		if rel[i] != want {
			t.Errorf("release op %d = %+v, want %+v", i, rel[i], want)
		}
	}
	// Nothing to release: no store call at all.
	if err := h.eng.Release(context.Background(), Response{}); err != nil || cs.calls != 2 {
		t.Errorf("Release(empty) = %v with %d store calls, want nil and 2", err, cs.calls)
	}
}

func TestReleaseFailingStore(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(concurrencyRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &failingStore{err: errStoreDown}
	h := newHarnessSnap(t, snap, DefaultConfig(), fs)
	fs.next = h.store
	resp := h.check(t, Request{Domain: "test", Descriptors: []Descriptor{desc("conc", "a")}})
	if resp.Statuses[0].Lease == 0 {
		t.Fatal("no lease taken")
	}
	fs.fail.Store(true)
	if err := h.eng.Release(context.Background(), resp); !errors.Is(err, errStoreDown) {
		t.Fatalf("Release on a failing store = %v, want %v", err, errStoreDown)
	}
	// The lease stays until it expires: one slot left now, both after the
	// window.
	fs.fail.Store(false)
	conc := Request{Domain: "test", Descriptors: []Descriptor{desc("conc", "a")}}
	if r := h.check(t, conc); r.OverallCode != CodeOK {
		t.Fatalf("second acquire denied")
	}
	if r := h.check(t, conc); r.OverallCode != CodeOverLimit {
		t.Fatalf("third acquire admitted; the failed release freed the slot?")
	}
	h.clock.Advance(time.Minute + time.Second)
	if r := h.check(t, conc); r.OverallCode != CodeOK || r.Statuses[0].Lease == 0 {
		t.Fatalf("acquire after the lease timeout: %v, lease %d", r.OverallCode, r.Statuses[0].Lease)
	}
}

func TestReleaseLocalFallback(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(concurrencyRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &failingStore{err: errStoreDown}
	fs.fail.Store(true)
	cfg := DefaultConfig()
	cfg.ExpectedReplicas = 2 // the fallback admits 1 of the rule's 2
	h := newHarnessSnap(t, snap, cfg, fs)
	h.eng.cfg.Fallback = h.store
	local := Request{Domain: "test", Descriptors: []Descriptor{desc("local", "a")}}
	r1 := h.check(t, local)
	if r1.OverallCode != CodeOK || r1.Statuses[0].Degraded != "local" || r1.Statuses[0].Lease == 0 {
		t.Fatalf("first local acquire: %v %q lease %d", r1.OverallCode, r1.Statuses[0].Degraded, r1.Statuses[0].Lease)
	}
	if r := h.check(t, local); r.OverallCode != CodeOverLimit || r.Statuses[0].Lease != 0 {
		t.Fatalf("second local acquire: %v lease %d, want denied without lease", r.OverallCode, r.Statuses[0].Lease)
	}
	// The lease came from the fallback, so the release goes there, not to
	// the failing main store.
	if err := h.eng.Release(context.Background(), r1); err != nil {
		t.Fatalf("Release of a local lease: %v", err)
	}
	if r := h.check(t, local); r.OverallCode != CodeOK {
		t.Fatalf("local acquire after release denied")
	}
}

func TestReleaseLeases(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(concurrencyRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{}
	h := newHarnessSnap(t, snap, DefaultConfig(), cs)
	cs.next = h.store
	ctx := context.Background()
	req := Request{Domain: "test", Descriptors: []Descriptor{desc("one", "x"), desc("conc", "a|{b}")}}
	conc := Request{Domain: "test", Descriptors: req.Descriptors[1:]}
	r1 := h.check(t, req)
	h.check(t, conc)
	if r := h.check(t, conc); r.OverallCode != CodeOverLimit {
		t.Fatalf("third acquire admitted")
	}
	lease := r1.Statuses[1].Lease
	if lease == 0 {
		t.Fatal("no lease taken")
	}

	calls := cs.calls
	for _, tt := range []struct {
		name   string
		req    Request
		leases []uint64
	}{
		{"too few leases", req, []uint64{lease}},
		{"too many leases", req, []uint64{0, lease, 0}},
		{"invalid request", Request{Domain: "test"}, nil},
	} {
		if err := h.eng.ReleaseLeases(ctx, tt.req, tt.leases); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: ReleaseLeases = %v, want ErrInvalidRequest", tt.name, err)
		}
	}
	// Zero leases, and leases of descriptors without a concurrency rule,
	// need no store call.
	for _, leases := range [][]uint64{{0, 0}, {lease, 0}} {
		if err := h.eng.ReleaseLeases(ctx, req, leases); err != nil {
			t.Errorf("ReleaseLeases(%v) = %v", leases, err)
		}
	}
	if cs.calls != calls {
		t.Errorf("%d store calls for nothing to release, want 0", cs.calls-calls)
	}

	if err := h.eng.ReleaseLeases(ctx, req, []uint64{0, lease}); err != nil {
		t.Fatalf("ReleaseLeases: %v", err)
	}
	if err := h.eng.ReleaseLeases(ctx, req, []uint64{0, lease}); err != nil {
		t.Fatalf("ReleaseLeases again: %v", err)
	}
	if r := h.check(t, conc); r.OverallCode != CodeOK {
		t.Fatalf("acquire after ReleaseLeases denied")
	}
	if r := h.check(t, conc); r.OverallCode != CodeOverLimit {
		t.Fatalf("releasing twice freed two slots")
	}
}
