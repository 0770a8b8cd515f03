package main

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/store/redis"
)

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
	ropts.AllowEviction = cfg.AllowEviction
	ropts.NativeFixedWindow = cfg.NativeFixedWindow
	ropts.NativeSlidingWindow = cfg.NativeSlidingWindow
	return ropts, nil
}
