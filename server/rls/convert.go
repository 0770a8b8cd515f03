package rls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/sluice-rl/sluice/headers/edge"
	"github.com/sluice-rl/sluice/internal/rlsproto"
	"github.com/sluice-rl/sluice/service"
)

// ErrInvalidRequest marks a RateLimitRequest the server rejects (see
// rlsproto.FromProto).
var ErrInvalidRequest = rlsproto.ErrInvalidRequest

// response renders resp, with the RateLimit, RateLimit-Policy and
// Retry-After fields of edge.Decision in response_headers_to_add when
// withHeaders is set.
func response(resp service.Response, withHeaders bool) *rlsv3.RateLimitResponse {
	out := rlsproto.ToProto(resp)
	if withHeaders {
		var d edge.Decision
		d.Add(&resp)
		for _, f := range d.Fields() {
			out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: f.Key, Value: f.Value})
		}
	}
	return out
}

// FromProto converts an envoy RateLimitRequest into a service.Request,
// enforcing the default service.RequestBounds (see rlsproto.FromProto).
func FromProto(req *rlsv3.RateLimitRequest) (service.Request, error) {
	return rlsproto.FromProto(req)
}

// FromProtoLimits is FromProto enforcing lim (see rlsproto.FromProtoLimits).
func FromProtoLimits(req *rlsv3.RateLimitRequest, lim service.RequestBounds) (service.Request, error) {
	return rlsproto.FromProtoLimits(req, lim)
}
