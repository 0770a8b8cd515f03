package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/store/stack"
)

// Invalidation across a fleet
//
// Every script call that applies a sluice.Refund (of cost > 0) or a
// sluice.Reset PUBLISHes the Redis keys it changed on the channel
// Options.Prefix + "invalidate", in the same atomic script call as the
// writes (scripts/driver.lua): an announcement cannot be lost to a crash
// between the write and the publish, and is never sent for a write that
// did not happen (a denied group, a call refused by the deadline guard).
// Every Store subscribes to that channel once (on the first Invalidations
// or Resets call) and passes what it hears to its Invalidations callers,
// and the keys reset (marked so in the message) to its Resets callers. Redis
// Pub/Sub is fire-and-forget, so a message published while a subscriber
// is not connected is lost to it: each time the subscription is lost and
// each time it is (re)confirmed, callers are told to drop everything. In a
// Cluster, PUBLISH reaches the subscribers of every node, so one
// subscription (to any node) hears every master's calls.
//
// A per-key generation read with each decision would survive lost messages
// too, but it costs a read per op on the hot path, which is what a cache
// of denials exists to avoid; announcements cost nothing until a refund
// or reset happens.

var (
	_ stack.Invalidator    = (*Store)(nil)
	_ stack.ResetAnnouncer = (*Store)(nil)
)

// invalidateChannel follows Options.Prefix in the name of the channel.
const invalidateChannel = "invalidate"

// maxPendingKeys bounds the keys queued for one Invalidations caller that
// has not taken them yet; beyond it the caller is told to drop everything.
const maxPendingKeys = 1 << 14

// resubscribeMax bounds the wait between attempts to subscribe again.
const resubscribeMax = time.Second

// invHub is the store's one subscription and its listeners.
type invHub struct {
	mu      sync.Mutex
	started bool
	up      bool // subscribed and confirmed
	// confirmed: a subscription was confirmed since wasConfirmed last
	// looked.
	confirmed bool
	subs      map[*invQueue]struct{}
}

// invQueue is what one Invalidations (or Resets) caller has yet to be
// told: keys, or everything.
type invQueue struct {
	resets bool // a Resets caller: hears the keys reset only
	mu     sync.Mutex
	keys   []string
	all    bool
	wake   chan struct{} // capacity 1
}

// push queues keys (or everything) and wakes the caller. It never blocks.
func (q *invQueue) push(keys []string, all bool) {
	q.mu.Lock()
	switch {
	case q.all:
	case all || len(q.keys)+len(keys) > maxPendingKeys:
		q.all, q.keys = true, nil
	default:
		q.keys = append(q.keys, keys...)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (q *invQueue) take() ([]string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	keys, all := q.keys, q.all
	q.keys, q.all = nil, false
	return keys, all
}

// broadcast pushes the keys of one message to every listener: all of
// them to Invalidations callers, those reset to Resets callers.
func (h *invHub) broadcast(keys, resets []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for q := range h.subs {
		switch {
		case !q.resets:
			q.push(keys, false)
		case len(resets) > 0:
			q.push(resets, false)
		}
	}
}

// setUp records whether the subscription is confirmed; every change tells
// the listeners to drop everything (on loss: they may miss messages from
// now on; on confirmation: they may have missed some before).
func (h *invHub) setUp(up bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up == up {
		return
	}
	h.up = up
	h.confirmed = h.confirmed || up
	for q := range h.subs {
		q.push(nil, true)
	}
}

// Invalidations implements stack.Invalidator: fn hears, for every script
// call on any Store sharing this Redis and prefix (this one included) that
// applied Refund ops of cost > 0 or Reset ops, the op keys they changed;
// and (nil, true) each time the store's subscription to the announcements
// is confirmed (at the start, and after each reconnection) or lost. The
// store keeps one subscription, however many callers; it resubscribes
// after a loss within at most a second of Redis answering again. A caller
// too slow to take its keys (more than 16,384 queued) is told to drop
// everything instead. A key is passed as Op.Key names it; a key without a
// hash tag of its own is passed both bare and wrapped ("x" and "{x}",
// which are one Redis key).
//
// An announcement reaches every subscriber at about the time the call
// returns (one Pub/Sub delivery); a refund or reset whose call failed or
// timed out may have been applied unannounced only if it was applied at
// all after the call gave up (see the deadline guard). It returns ctx's
// error when ctx is done, or ErrClosed once the store is closed.
func (s *Store) Invalidations(ctx context.Context, fn func(keys []string, all bool)) error {
	return s.listen(ctx, false, fn)
}

// Resets implements stack.ResetAnnouncer: fn hears, for every script call
// on any Store sharing this Redis and prefix (this one included) that
// applied Reset ops, the op keys they reset (not those only refunded); and
// (nil, true) each time the subscription is confirmed or lost, exactly as
// Invalidations (the same one subscription serves both, and everything
// Invalidations says of delivery, names and errors holds). A message from
// a store of an older version, which does not mark resets, names none.
func (s *Store) Resets(ctx context.Context, fn func(keys []string, all bool)) error {
	return s.listen(ctx, true, fn)
}

// listen serves one Invalidations (resets false) or Resets caller.
func (s *Store) listen(ctx context.Context, resets bool, fn func(keys []string, all bool)) error {
	if s.closed.Load() {
		return ErrClosed
	}
	q := &invQueue{resets: resets, wake: make(chan struct{}, 1)}
	h := &s.inv
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*invQueue]struct{}{}
	}
	h.subs[q] = struct{}{}
	if h.up {
		q.push(nil, true) // at the start
	}
	if !h.started {
		h.started = true
		go s.subscribe()
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.subs, q)
		h.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return ErrClosed
		case <-q.wake:
			if keys, all := q.take(); all {
				fn(nil, true)
			} else if len(keys) > 0 {
				fn(keys, false)
			}
		}
	}
}

// subscribe keeps the store's subscription to its invalidation channel
// until the store is closed, resubscribing after each loss (waits from
// 50ms doubling to resubscribeMax).
func (s *Store) subscribe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	wait := 50 * time.Millisecond
	for {
		hctx := rueidis.WithOnSubscriptionHook(ctx, func(sub rueidis.PubSubSubscription) {
			if sub.Kind == "subscribe" && sub.Channel == s.channel {
				s.subscriptions.Add(1)
				s.inv.setUp(true)
			}
		})
		_ = s.client.Receive(hctx, s.client.B().Subscribe().Channel(s.channel).Build(), func(m rueidis.PubSubMessage) {
			if keys, resets := s.decodeInvalidation(m.Message); len(keys) > 0 {
				s.inv.broadcast(keys, resets)
			}
		})
		s.inv.setUp(false)
		if s.inv.wasConfirmed() {
			wait = 50 * time.Millisecond
		}
		select {
		case <-s.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, resubscribeMax)
	}
}

// wasConfirmed reports, once, whether a subscription was confirmed since
// the last call (so that the wait before resubscribing starts short again).
func (h *invHub) wasConfirmed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.confirmed
	h.confirmed = false
	return c
}

// decodeInvalidation reads a message of scripts/driver.lua ("<length>:<key>"
// items, Redis keys, the keys reset first, then "r<count>" when count of
// them were reset) into op keys: every key the message names, and those of
// them that were reset (a prefix of keys). Items it cannot read or keys of
// another prefix are skipped; a message without the "r" trailer (a store
// of an older version) names no resets.
func (s *Store) decodeInvalidation(msg string) (keys, resets []string) {
	var ends []int // ends[i]: len(keys) after item i
	for len(msg) > 0 {
		if msg[0] == 'r' {
			n, err := strconv.Atoi(msg[1:])
			if err != nil || n <= 0 {
				return keys, nil
			}
			n = min(n, len(ends))
			if n == 0 {
				return keys, nil
			}
			return keys, keys[:ends[n-1]:ends[n-1]]
		}
		colon := strings.IndexByte(msg, ':')
		if colon <= 0 {
			return keys, nil
		}
		n, err := strconv.Atoi(msg[:colon])
		if err != nil || n < 0 || n > len(msg)-colon-1 {
			return keys, nil
		}
		rk := msg[colon+1 : colon+1+n]
		msg = msg[colon+1+n:]
		if k, ok := s.opKey(rk); ok {
			keys = append(keys, k)
			if _, tagged := hashTag(k); !tagged {
				keys = append(keys, "{"+k+"}")
			}
		}
		ends = append(ends, len(keys))
	}
	return keys, nil
}
