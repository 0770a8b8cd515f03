package tenant

import (
	"time"

	"github.com/sluice-rl/sluice/rules"
)

// overlay is one Snapshot with the registry's clock: a rules.Overlay.
type overlay struct {
	s   *Snapshot
	now func() time.Time
}

// Resolve is Snapshot.ResolveTier on the registry's clock.
func (o *overlay) Resolve(r *rules.Rule, entries []rules.Entry) (*rules.TierLimit, rules.Tier, rules.Switch) {
	return o.s.ResolveTier(r, entries, o.now)
}

// DenyList is Snapshot.DenyList.
func (o *overlay) DenyList(domain string) *rules.DenyList { return o.s.DenyList(domain) }

// Overlay returns the snapshot in force as a rules.Overlay: the same value
// (==) until the snapshot is replaced, then a new one. Its answers are those
// Resolve and DenyList give while that snapshot is in force. It allocates
// only on the first call after a change, and it satisfies
// service.OverlaySource, so the engine compiles each snapshot once into its
// plan instead of asking the registry per check.
func (g *Registry) Overlay() rules.Overlay {
	for {
		s, v := g.snap.Load(), g.view.Load()
		if v != nil && v.s == s {
			return v
		}
		n := &overlay{s: s, now: g.opts.Now}
		if g.view.CompareAndSwap(v, n) {
			return n
		}
	}
}
