package rules

// Overlay is run-time state laid over the rule files at one instant: each
// tenant's tier and own overrides, the kill switches and the deny lists kept
// outside the files (tenant.Registry's, from PostgreSQL). An Overlay never
// changes once made: a change of that state makes a new one. The engine
// (service) compiles the Overlay in force with the rule Snapshot into one
// plan and compiles again when either is replaced.
//
// Its methods must be safe for concurrent use, must not block and should
// not allocate: they run on the path of every check.
type Overlay interface {
	// Resolve returns the limit rule r enforces for a request with these
	// entries (nil: r.Limit), the tier of the request's tenant (NumTiers
	// when r is not a tenant's rule) and r's switch state.
	Resolve(r *Rule, entries []Entry) (*TierLimit, Tier, Switch)
	// DenyList returns the deny list kept for domain beside the rule
	// files' (nil: none).
	DenyList(domain string) *DenyList
}
