package service

import (
	"context"
	"reflect"
	"testing"

	"github.com/sluice-rl/sluice/rules"
)

func TestSampleRing(t *testing.T) {
	h := newHarness(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", DefaultConfig())
	s := NewSample(4, 2)
	h.eng.cfg.Sample = s
	for i := range 12 {
		v := string(rune('a' + i))
		if _, err := h.eng.Check(context.Background(), Request{Domain: "d", Descriptors: []Descriptor{desc("k", v)}}); err != nil {
			t.Fatal(err)
		}
	}
	got := s.Requests()
	// Checks 2, 4, …, 12 were sampled (one in 2); the ring keeps the last 4.
	want := []string{"f", "h", "j", "l"}
	if len(got) != len(want) {
		t.Fatalf("%d sampled requests, want %d", len(got), len(want))
	}
	for i, w := range want {
		if v := got[i].Request.Descriptors[0].Entries[0].Value; v != w {
			t.Errorf("sample %d: value %q, want %q", i, v, w)
		}
		if m := got[i].Matched[0]; m.Rule != "k" || m.Limit.Quota != 1 || m.Denied {
			t.Errorf("sample %d: match %+v, want rule k, quota 1, allowed", i, m)
		}
	}
}

func TestPreview(t *testing.T) {
	old := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 5}\n  - key: c\n    rate_limit: {unlimited: true}\n"
	h := newHarness(t, old, DefaultConfig())
	s := NewSample(100, 1)
	h.eng.cfg.Sample = s
	send := func(domain, key string, n int) {
		for range n {
			if _, err := h.eng.Check(context.Background(), Request{Domain: domain, Descriptors: []Descriptor{desc(key, "v")}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("d", "a", 3) // 1 allowed, 2 denied
	send("d", "b", 4)
	send("d", "c", 2)
	send("d", "x", 1) // no rule
	send("gone", "a", 2)
	next, err := rules.Parse("n.yaml", []byte("domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 50}\n  - key: c\n    rate_limit: {unit: hour, requests_per_unit: 7}\n  - key: x\n    rate_limit: {unlimited: true}\n"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep := Preview(s.Requests(), next)
	if rep.Requests != 12 || rep.Descriptors != 12 || len(rep.Domains) != 2 {
		t.Fatalf("report = %+v, want 12 requests in 2 domains", rep)
	}
	d := rep.Domains[0]
	want := DomainPreview{Domain: "d", Descriptors: 10, NewlyUnlimited: 3, DeniedNowUnlimited: 2, LimitChanged: 4, NewlyLimited: 2, RuleChanged: 1}
	d.Moves = nil
	if !reflect.DeepEqual(d, want) {
		t.Errorf("domain d = %+v, want %+v", d, want)
	}
	if mv := rep.Domains[0].Moves[0]; mv.Count != 4 || mv.From != "b" || mv.Change != ChangeLimitChanged {
		t.Errorf("first move = %+v, want 4 of b with a changed limit", mv)
	}
	if g := rep.Domains[1]; g.Domain != "gone" || g.Descriptors != 2 || g.Unchanged != 2 {
		t.Errorf("domain gone = %+v, want 2 unchanged (no rules before or after)", g)
	}
}
