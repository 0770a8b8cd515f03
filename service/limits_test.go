package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Each limit refuses a request just over it, names itself and the field,
// and admits a request exactly at it.
func TestLimits(t *testing.T) {
	lim := RequestBounds{MaxKeyBytes: 8, MaxValueBytes: 16, MaxDescriptors: 3, MaxEntries: 2}
	cfg := DefaultConfig()
	cfg.RequestBounds = lim
	h := newHarness(t, testRules, cfg)
	many := func(n int) []Descriptor {
		ds := make([]Descriptor, n)
		for i := range ds {
			ds[i] = desc("big", "v")
		}
		return ds
	}
	tests := []struct {
		name    string
		req     Request
		wantErr string // "" means accepted
	}{
		{"key at limit", req(desc(strings.Repeat("k", 8), "v")), ""},
		{"key over", req(desc("ip", "1"), desc(strings.Repeat("k", 9), "v")),
			"descriptors[1].entries[0].key: 9 bytes exceeds the limit max-key-bytes=8"},
		{"value at limit", req(desc("big", strings.Repeat("v", 16))), ""},
		{"value over", req(desc("big", "x", "ip", strings.Repeat("v", 17))),
			"descriptors[0].entries[1].value: 17 bytes exceeds the limit max-value-bytes=16"},
		{"descriptors at limit", Request{Domain: "test", Descriptors: many(3)}, ""},
		{"descriptors over", Request{Domain: "test", Descriptors: many(4)},
			"descriptors: 4 exceeds the limit max-descriptors=3"},
		{"entries at limit", req(desc("a", "1", "b", "2")), ""},
		{"entries over", req(desc("a", "1", "b", "2", "c", "3")),
			"descriptors[0].entries: 3 exceeds the limit max-entries=2"},
		{"domain over", Request{Domain: "123456789", Descriptors: many(1)},
			"domain: 9 bytes exceeds the limit max-key-bytes=8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.eng.Check(context.Background(), tt.req)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Check = %v, want accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Check error = %v, want it to contain %q", err, tt.wantErr)
			}
			var le *LimitError
			if !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &le) {
				t.Errorf("Check error %v: want ErrInvalidRequest and a *LimitError", err)
			}
			leases := make([]uint64, len(tt.req.Descriptors))
			if err := h.eng.ReleaseLeases(context.Background(), tt.req, leases); !errors.As(err, &le) {
				t.Errorf("ReleaseLeases error = %v, want a *LimitError", err)
			}
		})
	}
	if got := h.store.Stats().Keys; got > 12 {
		t.Errorf("store holds %d keys: refused requests must create none", got)
	}
}

// A domain, key or value that is not valid UTF-8 is refused, naming the
// field, whatever the limits (even with every limit lifted); each check a
// transport calls refuses it as Check does.
func TestNotUTF8Refused(t *testing.T) {
	for _, lim := range []RequestBounds{{}, {MaxKeyBytes: -1, MaxValueBytes: -1, MaxDescriptors: -1, MaxEntries: -1}} {
		cfg := DefaultConfig()
		cfg.RequestBounds = lim
		h := newHarness(t, testRules, cfg)
		for _, tc := range []struct {
			name, field string
			req         Request
		}{
			{"domain", "domain", Request{Domain: "te\xffst", Descriptors: []Descriptor{desc("ip", "1")}}},
			{"key", "descriptors[0].entries[1].key", req(desc("ip", "1", "\xc0", "v"))},
			{"value", "descriptors[1].entries[1].value", req(desc("ip", "1"), desc("big", "x", "ip", "a\xffb"))},
			{"lone surrogate", "descriptors[0].entries[0].value", req(desc("ip", "\xed\xb0\x80"))},
			{"truncated rune", "descriptors[0].entries[0].value", req(desc("ip", "\xe2\x82"))},
		} {
			want := tc.field + ": not valid UTF-8"
			_, err := h.eng.Check(context.Background(), tc.req)
			var fe *FieldError
			if !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &fe) || fe.Error() != want {
				t.Errorf("limits %+v, %s: Check error = %v, want ErrInvalidRequest and a *FieldError %q", lim, tc.name, err, want)
			}
			r := tc.req
			got := lim.CheckDomain(r.Domain)
			for i := range r.Descriptors {
				if got != nil {
					break
				}
				es := r.Descriptors[i].Entries
				got = lim.CheckEntries(i, len(es), func(j int) (string, string) { return es[j].Key, es[j].Value })
			}
			if got == nil || got.Error() != want {
				t.Errorf("limits %+v, %s: CheckDomain/CheckEntries = %v, want %q", lim, tc.name, got, want)
			}
		}
		if _, err := h.eng.Check(context.Background(), req(desc("ip", "ünïcode ✓"))); err != nil {
			t.Errorf("limits %+v: valid UTF-8 refused: %v", lim, err)
		}
		if keys := h.store.Stats().Keys; keys != 1 {
			t.Errorf("limits %+v: store holds %d keys, want 1 (refused requests create none)", lim, keys)
		}
	}
}

// The zero Limits are the defaults, and a negative field lifts its limit.
func TestLimitsDefaultsAndOff(t *testing.T) {
	big := req(desc("big", strings.Repeat("v", DefaultMaxValueBytes+1)))
	h := newHarness(t, testRules, DefaultConfig())
	if _, err := h.eng.Check(context.Background(), big); err == nil || !strings.Contains(err.Error(), "max-value-bytes=4096") {
		t.Errorf("default limits: Check of a %d-byte value = %v, want max-value-bytes=4096", DefaultMaxValueBytes+1, err)
	}
	cfg := DefaultConfig()
	cfg.RequestBounds.MaxValueBytes = -1
	h = newHarness(t, testRules, cfg)
	if _, err := h.eng.Check(context.Background(), big); err != nil {
		t.Errorf("MaxValueBytes -1: Check = %v, want accepted", err)
	}
	if err := (RequestBounds{}).CheckCount(DefaultMaxDescriptors + 1); err == nil {
		t.Errorf("zero Limits accept %d descriptors, want max-descriptors=%d", DefaultMaxDescriptors+1, DefaultMaxDescriptors)
	}
}

// The request that cost 1.7 s of CPU (150,000 descriptors) is refused before
// any work is done for it.
func TestLimitsHugeRequestIsCheap(t *testing.T) {
	h := newHarness(t, testRules, DefaultConfig())
	ds := make([]Descriptor, 150_000)
	for i := range ds {
		ds[i] = desc("ip", fmt.Sprint(i))
	}
	start := time.Now()
	_, err := h.eng.Check(context.Background(), Request{Domain: "test", Descriptors: ds})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "max-descriptors=64") {
		t.Fatalf("Check of 150,000 descriptors = %v, want max-descriptors=64", err)
	}
	if keys := h.store.Stats().Keys; keys != 0 {
		t.Errorf("store holds %d keys after a refused request, want 0", keys)
	}
	t.Logf("refused in %v", took)
}

// Past MaxDetailedMetricValues, new values of a detailed_metric rule go to
// the rule's own series, and the overflow is counted; values already in use
// keep their series.
func TestDetailedMetricCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RequestBounds.MaxDetailedMetricValues = 3
	h := newHarness(t, testRules, cfg)
	before := testutil.CollectAndCount(h.m.Decisions)
	for i := range 10 {
		h.check(t, req(desc("detail", fmt.Sprint("d", i))))
	}
	h.check(t, req(desc("detail", "d0"))) // in use: keeps its series
	if n := testutil.CollectAndCount(h.m.Decisions); n != before+3 {
		t.Errorf("%d decision series after 10 values, want %d (the rules' own plus 3 values)", n, before+3)
	}
	for _, c := range []struct {
		rule string
		want float64
	}{
		{"detail=d0", 2}, {"detail=d1", 1}, {"detail=d2", 1}, {"detail=d3", 0}, {"detail", 7},
	} {
		if got := h.decisions("test", c.rule, OutcomeAllowed); got != c.want {
			t.Errorf("decisions{rule=%q} = %v, want %v", c.rule, got, c.want)
		}
	}
	if got := h.eng.DetailedMetricValues(); got != 3 {
		t.Errorf("DetailedMetricValues = %d, want 3", got)
	}
	if got := h.eng.DetailedMetricOverflow(); got != 7 {
		t.Errorf("DetailedMetricOverflow = %d, want 7", got)
	}
}

// BenchmarkLimitsCheck is what the request limits add to every check: one
// pass over the request's entries (compare with BenchmarkCheck).
func BenchmarkLimitsCheck(b *testing.B) {
	reqs := benchRequests()
	lim := DefaultRequestBounds()
	b.ReportAllocs()
	cpu := cpuTime(b)
	i := 0
	for b.Loop() {
		if err := lim.Check(&reqs[i%benchKeys]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportCPU(b, cpu)
}
