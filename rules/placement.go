package rules

import (
	"strings"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Placement says where a rule's counters are decided (rate_limit.placement).
type Placement uint8

const (
	// PlacementGlobal (the default): every hit is decided by the service's
	// store (Redis, for a fleet).
	PlacementGlobal Placement = iota
	// PlacementHybrid: hits are decided locally from allotments leased from
	// the global store (store/hybrid); only fixed_window, gcra and
	// token_bucket may be placed so.
	PlacementHybrid
	// PlacementLocal: each instance enforces the whole limit on its own, in
	// process, with no global view.
	PlacementLocal
)

// String returns the rule-file spelling.
func (p Placement) String() string {
	switch p {
	case PlacementHybrid:
		return "hybrid"
	case PlacementLocal:
		return "local"
	}
	return "global"
}

func parsePlacement(s string) (Placement, bool) {
	switch strings.ToLower(s) {
	case "global":
		return PlacementGlobal, true
	case "hybrid":
		return PlacementHybrid, true
	case "local":
		return PlacementLocal, true
	}
	return 0, false
}

// HybridAlgorithm reports whether a rule with algorithm a may be placed
// hybrid: its quota can be leased in allotments with a stated bound.
func HybridAlgorithm(a sluice.Algorithm) bool {
	return stack.AllotAlgorithm(a) || a == sluice.TokenBucket
}

// MaxSubCounters bounds rate_limit.sub_counters.
const MaxSubCounters = 64
