package service

import "github.com/sluice-rl/sluice"

// The engine's own reasons, beside the stores' (sluice.ReasonAllowed,
// ReasonLimited, ReasonCostTooHigh): set by the engine, never by a store.
// sluice.Reason's String names them "penalty" and "deny_list".
const (
	// ReasonPenalty: the key exceeded its limit lately and is kept denied
	// for the rule's penalty time (rules' rate_limit.penalty), whatever its
	// counter says.
	ReasonPenalty = sluice.ReasonCostTooHigh + 1 + iota
	// ReasonDenyList: an entry of the request is on its domain's deny list
	// (rules' deny); waiting will not help.
	ReasonDenyList
)
