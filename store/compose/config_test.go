package compose

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store/redis"
)

func redisOptionsURL(url string) redis.Options { return redis.Options{URL: url} }

// Validate names the field of each problem; New refuses what Validate
// refuses.
func TestConfigValidate(t *testing.T) {
	redisCfg := func(f func(*Config)) Config {
		c := DefaultConfig()
		c.Kind, c.Redis.URL = KindRedis, "redis://127.0.0.1:6379/0"
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{"default", DefaultConfig(), nil},
		{"zero value", Config{}, nil},
		{"redis", redisCfg(func(*Config) {}), nil},
		{"kind", Config{Kind: "etcd"}, []string{`Kind: "etcd"`}},
		{"redis without URL", Config{Kind: KindRedis}, []string{"Redis.URL: empty"}},
		{"redis bad URL", redisCfg(func(c *Config) { c.Redis.URL = "http://x" }), []string{"Redis.URL:"}},
		{"denied", redisCfg(func(c *Config) { c.Denied = "maybe" }), []string{`Denied: "maybe"`}},
		{"several", redisCfg(func(c *Config) {
			c.Memory.MaxKeys = -1
			c.Hybrid.Horizon = -time.Second
			c.Hybrid.Keep = 1
			c.DeniedOptions.MaxKeys = -2
		}), []string{"Memory.MaxKeys: -1", "Hybrid.Horizon: -1s", "Hybrid.Keep: 1", "DeniedOptions.MaxKeys: -2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
			if _, nerr := New(tc.cfg); nerr == nil {
				t.Error("New accepted a config Validate refuses")
			}
		})
	}
}

// A bad Redis URL's password never appears in the error.
func TestConfigValidateRedacts(t *testing.T) {
	c := Config{Kind: KindRedis, Redis: redisOptionsURL("ftp://user:s3cret@127.0.0.1:6379/0")}
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Validate() = %v, want an error without the password", err)
	}
}
