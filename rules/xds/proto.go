package xds

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/rules"
)

// maxMessages bounds the descriptors, rate limits and replaces of one
// RateLimitConfig. Each renders as a line of at least 8 bytes, so a
// resource with more could not become a rule file of rules.MaxFileBytes;
// the protobuf library holds some 150 bytes for each (an empty descriptor
// is 2 bytes on the wire), so without the bound a 16 MiB message of empty
// descriptors took 1.2 GiB to decode.
const maxMessages = rules.MaxFileBytes / 8

// unmarshal decodes one RateLimitConfig, after scan has checked that its
// messages are few enough and nested no deeper than MaxDepth.
func unmarshal(b []byte, cfg *rlconf.RateLimitConfig) error {
	n := 0
	if err := scan(b, 0, &n); err != nil {
		return err
	}
	return proto.Unmarshal(b, cfg)
}

// Field numbers of the messages scan descends into: RateLimitConfig's
// descriptors, RateLimitDescriptor's rate_limit and descriptors,
// RateLimitPolicy's replaces.
const (
	configDescriptors     = 3
	descriptorRateLimit   = 3
	descriptorDescriptors = 4
	policyReplaces        = 5
)

// scan walks the wire bytes b of a message at depth (0: a
// RateLimitConfig, 1 and deeper: a RateLimitDescriptor at that depth, -1:
// a RateLimitPolicy, -2: a RateLimitReplace), counting the messages in *n,
// without allocating.
func scan(b []byte, depth int, n *int) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil // malformed: proto.Unmarshal says so
		}
		b = b[l:]
		if typ != protowire.BytesType {
			l = protowire.ConsumeFieldValue(num, typ, b)
			if l < 0 {
				return nil
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		sub := 0 // the kind of message v is, when one scan descends into
		switch {
		case depth == 0 && num == configDescriptors:
			sub = 1
		case depth > 0 && num == descriptorDescriptors:
			sub = depth + 1
		case depth > 0 && num == descriptorRateLimit:
			sub = -1
		case depth == -1 && num == policyReplaces:
			sub = -2
		default:
			continue
		}
		if *n++; *n > maxMessages {
			return fmt.Errorf("more than %d descriptors, rate limits and replaces: more than a rule file of %d bytes holds (rules.MaxFileBytes)", maxMessages, rules.MaxFileBytes)
		}
		if sub > MaxDepth {
			return fmt.Errorf("descriptors nested deeper than %d", MaxDepth)
		}
		if sub != -2 {
			if err := scan(v, sub, n); err != nil {
				return err
			}
		}
	}
	return nil
}
