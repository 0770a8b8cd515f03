package xds

import (
	"google.golang.org/protobuf/proto"

	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

// unmarshal decodes one RateLimitConfig (proto's own recursion limit
// bounds nesting while decoding).
func unmarshal(b []byte, cfg *rlconf.RateLimitConfig) error {
	return proto.Unmarshal(b, cfg)
}
