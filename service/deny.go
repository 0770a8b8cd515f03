package service

import "github.com/sluice-rl/sluice/rules"

// DenyLists is deny lists kept outside the rule files (the admin API's, in
// PostgreSQL). When Config.Overrides implements it and is not an
// OverlaySource (whose overlays give the deny lists: *tenant.Registry), the
// engine consults the list it returns for a request's domain beside the
// rule file's (step 0 of the order of precedence, precedence.go). DenyList is called once per request on the hot path: it must
// be safe for concurrent use, must not block and should not allocate.
type DenyLists interface {
	DenyList(domain string) *rules.DenyList
}
