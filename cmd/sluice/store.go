package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/redis"
)

// errNotConnected is what a connectingStore answers until Redis is reached.
var errNotConnected = fmt.Errorf("redis store not connected yet: %w", sluice.ErrStoreUnavailable)

// connectingStore stands in for the Redis store when Redis cannot be reached
// at start: instead of exiting (and crash-looping under an orchestrator, as
// envoyproxy/ratelimit does), `sluice serve` starts, every check fails over
// to its limit's failure mode at once (sluice.ErrStoreUnavailable), and
// /readyz says not ready; meanwhile it keeps dialling, and once connected it
// passes every Take to the real store.
//
// It is safe for concurrent use.
type connectingStore struct {
	opts redis.Options
	log  *slog.Logger
	dial func(redis.Options) (*redis.Store, error)

	mu     sync.RWMutex
	store  *redis.Store // nil until connected
	closed bool
	done   chan struct{}
}

// connectRedis returns the Redis store for opts: connected at once if Redis
// answers, else a connectingStore that keeps trying in the background.
func connectRedis(opts redis.Options, log *slog.Logger) (globalStore, func() error) {
	rs, err := redis.New(opts)
	if err == nil {
		return rs, rs.Close
	}
	log.Warn("Redis unreachable at start; serving with each limit's failure mode until it answers", "err", err)
	c := &connectingStore{opts: opts, log: log, dial: redis.New, done: make(chan struct{})}
	go c.connect()
	return c, c.Close
}

// Take passes to the real store once connected, else fails.
func (c *connectingStore) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	s := c.current()
	if s == nil {
		return errNotConnected
	}
	return s.Take(ctx, ops, results)
}

// current returns the real store, or nil until connected.
func (c *connectingStore) current() *redis.Store {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.store
}

// Health reports the real store's nodes once connected; before, one node
// "redis" that is out.
func (c *connectingStore) Health() []sluice.NodeHealth {
	s := c.current()
	if s == nil {
		return []sluice.NodeHealth{{Node: "redis", State: "open", LastError: "not connected yet"}}
	}
	if hr, ok := any(s).(sluice.HealthReporter); ok {
		return hr.Health()
	}
	return nil
}

// connect dials with exponential backoff (100ms to 5s) until it succeeds or
// the store is closed.
func (c *connectingStore) connect() {
	wait := 100 * time.Millisecond
	for {
		select {
		case <-c.done:
			return
		case <-time.After(wait):
		}
		rs, err := c.dial(c.opts)
		if err != nil {
			c.log.Debug("Redis still unreachable", "err", err, "retry_in", wait)
			wait = min(2*wait, 5*time.Second)
			continue
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = rs.Close()
			return
		}
		c.store = rs
		c.mu.Unlock()
		c.log.Info("Redis connected")
		return
	}
}

// Close stops dialling and closes the store if it connected.
func (c *connectingStore) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	close(c.done)
	if c.store != nil {
		return c.store.Close()
	}
	return nil
}

// closerFunc adapts a func to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// redisOptions builds the store options from the configuration.
func redisOptions(cfg redisConfig, now func() time.Time) (redis.Options, error) {
	ropts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return ropts, fmt.Errorf("--redis-url: %w", err)
	}
	if cfg.Prefix != "" {
		ropts.Prefix = cfg.Prefix
	}
	if cfg.Timeout > 0 {
		ropts.Timeout = cfg.Timeout
	}
	ropts.Now = now
	return ropts, nil
}
