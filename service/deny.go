package service

import (
	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// DenyLists is deny lists kept outside the rule files (the admin API's, in
// PostgreSQL). When Config.Overrides implements it (*tenant.Registry does),
// the engine consults the list it returns for a request's domain beside the
// rule file's. DenyList is called once per request on the hot path: it must
// be safe for concurrent use, must not block and should not allocate.
type DenyLists interface {
	DenyList(domain string) *rules.DenyList
}

// denied answers a request that names an entry on its domain's deny list
// (the rule file's rules.DenyList, or the one of DenyLists): those
// descriptors are OVER_LIMIT with reason sluice.ReasonDenyList, the others
// OK, and no counter is looked at or charged. ok is false when no entry is
// on a list.
func (e *Engine) denied(req *Request) (resp Response, ok bool) {
	dl := e.src.Current().DenyList(req.Domain)
	var extra *rules.DenyList
	if d, isDeny := e.cfg.Overrides.(DenyLists); isDeny {
		extra = d.DenyList(req.Domain)
	}
	if dl == nil && extra == nil {
		return Response{}, false
	}
	for i := range req.Descriptors {
		for _, en := range req.Descriptors[i].Entries {
			if !dl.Denies(en) && !extra.Denies(en) {
				continue
			}
			if !ok {
				ok = true
				resp = Response{OverallCode: CodeOverLimit, Statuses: make([]Status, len(req.Descriptors))}
				for j := range resp.Statuses {
					resp.Statuses[j].Code = CodeOK
				}
			}
			resp.Statuses[i].Code = CodeOverLimit
			resp.Statuses[i].Result = sluice.Result{Reason: sluice.ReasonDenyList}
			break
		}
	}
	return resp, ok
}
