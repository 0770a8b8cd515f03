package memory

import (
	"context"
	"sync"
	"time"
)

// claims holds the names Claim handed out, each with its expiry (µs).
// Claims are rare (a threshold crossed), so one lock serves them all; the
// expired ones are dropped when the map has doubled since the last drop
// and at each Sweep.
type claims struct {
	mu    sync.Mutex
	until map[string]int64
	purge int // drop the expired ones when len reaches this
}

// Claim implements stack.Claimer: it reports whether key was free (never
// claimed, or its claim expired by the store's clock) and, if so, holds it
// for ttl (at least 1ms).
func (s *store) Claim(_ context.Context, key string, ttl time.Duration) (bool, error) {
	now := s.clock()
	d := max(ttl.Microseconds(), 1000)
	c := &s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until, c.purge = make(map[string]int64), 64
	}
	if u, ok := c.until[key]; ok && u > now {
		return false, nil
	}
	c.until[key] = now + d
	if len(c.until) >= c.purge {
		c.dropExpired(now)
		c.purge = max(64, 2*len(c.until))
	}
	return true, nil
}

// dropExpired deletes the claims expired at now; c.mu is held.
func (c *claims) dropExpired(now int64) {
	for k, u := range c.until {
		if u <= now {
			delete(c.until, k)
		}
	}
}

// Claims returns the number of claims held (expired ones not yet dropped
// included).
func (s *store) Claims() int {
	s.claims.mu.Lock()
	defer s.claims.mu.Unlock()
	return len(s.claims.until)
}
