package service

import "github.com/sluice-rl/sluice"

// The engine's own reasons, beside the stores' (sluice.ReasonAllowed,
// ReasonLimited, ReasonCostTooHigh): set by the engine, never by a store.
// sluice.Reason's String names them "penalty", "deny_list" and
// "unknown_model".
const (
	// ReasonPenalty: the key exceeded its limit lately and is kept denied
	// for the rule's penalty time (rules' rate_limit.penalty), whatever its
	// counter says.
	ReasonPenalty = sluice.ReasonCostTooHigh + 1 + iota
	// ReasonDenyList: an entry of the request is on its domain's deny list
	// (rules' deny); waiting will not help.
	ReasonDenyList
	// ReasonUnknownModel: a money rule (rules.Rule.Usage) matched, but the
	// price table prices no model the request's model entry names (and
	// has no default_model); waiting will not help.
	ReasonUnknownModel
)
