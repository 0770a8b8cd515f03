package stack

import (
	"context"
	"errors"
	"time"
)

// ErrNoClaimer: the store cannot claim names (it is not a Claimer, or a
// layer of it forwards Claim to a store that is not). Test with errors.Is.
var ErrNoClaimer = errors.New("sluice: the store cannot claim names")

// Claimer is implemented by stores that can hand a name to exactly one
// caller until it expires: on a store several instances share (the Redis
// store's SET NX PX, in the slot of key's hash tag), to exactly one
// instance of the fleet; on the memory store, to one caller of this
// process. The engine claims "a threshold fired in this period" with it
// (rules.Rule.NotifyAt), never on the hot path: only when a level is
// crossed.
//
// Claim reports whether this call took the name key (an Op.Key, with its
// placement byte; a suffix of the caller's own keeps its hash tag) for
// ttl (at least 1ms: rounded up); false when it is held. Safe for
// concurrent use.
type Claimer interface {
	Claim(ctx context.Context, key string, ttl time.Duration) (bool, error)
}
