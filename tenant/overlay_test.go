package tenant

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

// TestRegistryOverlay: Registry.Overlay is one value while the snapshot in
// force is, a new one once it is replaced, and answers as the registry
// does for that snapshot, on the registry's clock.
func TestRegistryOverlay(t *testing.T) {
	rs := testSnapshot(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := t0
	g := NewRegistry(nil, Options{Now: func() time.Time { return clock }})
	first := g.Overlay()
	if again := g.Overlay(); again != first {
		t.Fatalf("Overlay twice without a change: %p then %p, want one value", first, again)
	}
	g.Set(NewSnapshot([]Record{{Tenant: "soon", Tier: rules.TierPro, EffectiveAt: t0.Add(time.Hour)}}, nil, t0).
		WithDeny([]DenyEntry{{Domain: "api", Key: "user", Value: "mallory"}}))
	ov := g.Overlay()
	if ov == first {
		t.Fatal("Overlay after Set: the overlay of the snapshot replaced, want a new one")
	}
	r, es := match(t, rs, "api_key", "soon")
	for _, c := range []struct {
		at   time.Time
		tier rules.Tier
	}{{t0, rules.TierFree}, {t0.Add(2 * time.Hour), rules.TierPro}} { // effective after 1h
		clock = c.at
		gotL, gotT, gotS := ov.Resolve(r, es)
		wantL, wantT, wantS := g.Resolve(r, es)
		if gotL != wantL || gotT != wantT || gotS != wantS {
			t.Errorf("at %v: overlay resolves (%v, %v, %v), registry (%v, %v, %v)", c.at, gotL, gotT, gotS, wantL, wantT, wantS)
		}
		if gotT != c.tier {
			t.Errorf("at %v: tier %v, want %v", c.at, gotT, c.tier)
		}
	}
	if !ov.DenyList("api").Denies(rules.Entry{Key: "user", Value: "mallory"}) {
		t.Error("overlay's deny list of api does not deny user=mallory")
	}
	if ov.DenyList("web") != nil {
		t.Error("overlay's deny list of web: want none")
	}
}
