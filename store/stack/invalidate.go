package stack

import "context"

// Invalidator is implemented by a store that several instances share (the
// Redis store) and that can tell every instance when counters were given
// units back (Reset or Refund ops, from any instance), so that caches of
// decisions in front of it (store/hybrid's denied-key cache) stop answering
// for those keys. A single-process store needs none: its caches see the ops.
type Invalidator interface {
	// Invalidations calls fn with the keys (as Op.Key names them) that
	// Reset or Refund ops changed, on any instance, including this one; and
	// with all set when announcements may have been missed (at the start, or
	// after a reconnect), in which case every cached decision must be
	// dropped. fn is called from one goroutine at a time and must not block
	// for long. Invalidations returns when ctx is done (with ctx's error) or
	// when the store is closed.
	Invalidations(ctx context.Context, fn func(keys []string, all bool)) error
}

// ResetAnnouncer is implemented by a store that several instances share
// (the Redis store) and that can tell every instance which counters Reset
// ops reset, so that what an instance holds of a counter's old state
// (store/hybrid's allotments: units taken from the counter before the
// reset) is not spent on top of the fresh counter's quota. It hears a part
// of what Invalidator hears: resets, not refunds (a refund leaves units
// already taken from the counter as safe to spend as before). A
// single-process store needs none: its allotments see the ops.
type ResetAnnouncer interface {
	// Resets calls fn with the keys (as Op.Key names them) that Reset ops
	// reset, on any instance, including this one; and with all set when
	// announcements may have been missed (at the start, or after a
	// reconnect), in which case every key must be taken as reset. fn is
	// called from one goroutine at a time and must not block for long.
	// Resets returns when ctx is done (with ctx's error) or when the store
	// is closed.
	Resets(ctx context.Context, fn func(keys []string, all bool)) error
}
