package service

import (
	"github.com/sluice-rl/sluice"
)

// denied answers a request that names an entry on its domain's deny list
// (rules.DenyList): those descriptors are OVER_LIMIT with reason
// sluice.ReasonDenyList, the others OK, and no counter is looked at or
// charged. ok is false when no entry is on the list.
func (e *Engine) denied(req *Request) (resp Response, ok bool) {
	dl := e.src.Current().DenyList(req.Domain)
	if dl == nil {
		return Response{}, false
	}
	for i := range req.Descriptors {
		for _, en := range req.Descriptors[i].Entries {
			if !dl.Denies(en) {
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
