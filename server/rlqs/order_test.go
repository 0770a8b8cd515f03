package rlqs

import (
	"context"
	"slices"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestBucketOrder: a bucket's keys are put in the rule tree's order (tenant
// above route, though route sorts first), whatever their order in the map;
// a key set that is no rule's path, or a value no rule matches, is
// unmatched (Options.Unmatched).
func TestBucketOrder(t *testing.T) {
	clock := storetest.NewClock()
	eng, src := simEngine(t, redistest.Start(t).URL(), clock, simRules)
	srv, err := New(eng, src, Options{Unmatched: DenyUnmatched, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		bucket map[string]string
		want   []rules.Entry
		kind   kind
	}{
		{map[string]string{"route": "api", "tenant": "acme"}, []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "api"}}, kindLease},
		{map[string]string{"tenant": "acme", "route": "api"}, []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "api"}}, kindLease},
		{map[string]string{"route": "x", "tenant": "free"}, []rules.Entry{{Key: "tenant", Value: "free"}, {Key: "route", Value: "x"}}, kindAllow},
		{map[string]string{"route": "x", "tenant": "other"}, []rules.Entry{{Key: "route", Value: "x"}, {Key: "tenant", Value: "other"}}, kindDeny},
		{map[string]string{"tenant": "acme"}, []rules.Entry{{Key: "tenant", Value: "acme"}}, kindDeny},
		{map[string]string{"a": "1", "b": "2", "route": "api"}, []rules.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "route", Value: "api"}}, kindDeny},
	}
	ss := srv.newSession()
	ss.domain = simDomain
	for _, tt := range tests {
		b := &bucket{id: usage(tt.bucket, 0, 0).GetBucketId()}
		if err := ss.resolve(b); err != nil {
			t.Fatalf("%v: resolve: %v", tt.bucket, err)
		}
		if !slices.Equal(b.entries, tt.want) || b.kind != tt.kind {
			t.Errorf("%v: got entries %v kind %d, want %v kind %d", tt.bucket, b.entries, b.kind, tt.want, tt.kind)
		}
	}
}

// TestGrantIsChecksCounter: the units granted to an Envoy are taken from
// the counter Check charges for the same descriptor: after a grant, Check
// sees the limit less the grant remaining.
func TestGrantIsChecksCounter(t *testing.T) {
	clock := storetest.NewClock()
	eng, src := simEngine(t, redistest.Start(t).URL(), clock, simRules)
	srv, err := New(eng, src, Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := newSimEnvoy("envoy", func() *Server { return srv }, clock.Now())
	id := map[string]string{"route": "api", "tenant": "acme"}
	e.request(t, clock.Now(), id)
	granted := int64(e.buckets[canonical(id)].strategy.GetTokenBucket().GetMaxTokens())
	if granted == 0 {
		t.Fatal("no grant")
	}
	resp, err := eng.Check(context.Background(), service.Request{Domain: simDomain,
		Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "api"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	// Check took one more unit.
	if got, want := resp.Statuses[0].Result.Remaining, 60000-granted-1; got != want {
		t.Errorf("Check after a grant of %d: remaining %d, want %d", granted, got, want)
	}
}
