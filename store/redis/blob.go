package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Blobs: a value the instances of a fleet share through the store's Redis
// (the tenant snapshot's copy, for instances started while PostgreSQL is
// down), one per name. Nothing of it is on the check path.
//
// A blob is one hash at Prefix + "{sluice:" + name + "}": field v holds
// its version, d its data. Every limiter key is Prefix + an algorithm
// letter + the op key, so no blob shares a name with a counter; the name
// is its own hash tag, so on a Redis Cluster each blob is one key in one
// slot, and not in the slot of {sluice} (the readiness probe's and the
// dashboard's), which a large write would hold up.

// ErrBlobTooLarge is returned by Blob.Get for a blob over its bound.
var ErrBlobTooLarge = errors.New("redis: blob larger than its bound")

// putBlob writes v and d unless the version held is v or more; it sets or
// clears the expiry. It returns 1 when it wrote, 0 when not.
var putBlob = rueidis.NewLuaScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('PERSIST', KEYS[1]) end
return 1
`)

// getBlob returns {} (none), {v, n} (data over ARGV[1] bytes, not sent) or
// {v, n, d}.
var getBlob = rueidis.NewLuaScript(`
local v = redis.call('HGET', KEYS[1], 'v')
if not v then return {} end
local n = redis.call('HSTRLEN', KEYS[1], 'd')
if n > tonumber(ARGV[1]) then return {v, n} end
return {v, n, redis.call('HGET', KEYS[1], 'd')}
`)

// Blob is one named value shared through the store, with a version: a
// write never replaces a version with an older or equal one. Get it from
// Store.Blob; it is safe for concurrent use. Its methods satisfy
// tenant.Copy.
type Blob struct {
	s   *Store
	key string
	ttl time.Duration
}

// Blob returns the blob called name (letters, digits, ':', '-', '_' and
// '.', at most 200 bytes). Each write sets its expiry to ttl (<= 0: none),
// so a blob no instance writes any more goes away.
func (s *Store) Blob(name string, ttl time.Duration) (*Blob, error) {
	if name == "" || len(name) > 200 || strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":-_.", r))
	}) >= 0 {
		return nil, fmt.Errorf("redis: blob name %q: want 1 to 200 bytes, each a letter, a digit or one of \":-_.\" (got %d bytes)", name, len(name))
	}
	return &Blob{s: s, key: s.prefix + "{sluice:" + name + "}", ttl: ttl}, nil
}

// Key is the blob's Redis key.
func (b *Blob) Key() string { return b.key }

// Version returns the version held; 0 when the blob does not exist.
func (b *Blob) Version(ctx context.Context) (int64, error) {
	if b.s.closed.Load() {
		return 0, ErrClosed
	}
	c := b.s.client
	v, err := c.Do(ctx, c.B().Hget().Key(b.key).Field("v").Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redis: blob version: %w", redactErr(err))
	}
	return v, nil
}

// Put writes data with version v (> 0) unless the version held is v or
// more; stored reports whether it wrote.
func (b *Blob) Put(ctx context.Context, v int64, data []byte) (stored bool, err error) {
	if v <= 0 {
		return false, fmt.Errorf("redis: blob put: version %d, want > 0", v)
	}
	if b.s.closed.Load() {
		return false, ErrClosed
	}
	n, err := putBlob.Exec(ctx, b.s.client, []string{b.key},
		[]string{strconv.FormatInt(v, 10), rueidis.BinaryString(data), strconv.FormatInt(b.ttl.Milliseconds(), 10)}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("redis: blob put: %w", redactErr(err))
	}
	return n == 1, nil
}

// Get returns the data and version held (nil and 0: none). A blob of more
// than maxBytes is not transferred: Get returns an error wrapping
// ErrBlobTooLarge that gives its size.
func (b *Blob) Get(ctx context.Context, maxBytes int64) (int64, []byte, error) {
	if b.s.closed.Load() {
		return 0, nil, ErrClosed
	}
	vals, err := getBlob.Exec(ctx, b.s.client, []string{b.key}, []string{strconv.FormatInt(max(maxBytes, 0), 10)}).ToArray()
	if err != nil {
		return 0, nil, fmt.Errorf("redis: blob get: %w", redactErr(err))
	}
	if len(vals) == 0 {
		return 0, nil, nil
	}
	if len(vals) < 2 {
		return 0, nil, fmt.Errorf("redis: blob get: %d values in the reply, want 0, 2 or 3", len(vals))
	}
	vs, err := vals[0].ToString()
	if err != nil {
		return 0, nil, fmt.Errorf("redis: blob get: version: %w", err)
	}
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("redis: blob get: version %q: %w", vs, err)
	}
	n, err := vals[1].AsInt64()
	if err != nil {
		return 0, nil, fmt.Errorf("redis: blob get: size: %w", err)
	}
	if len(vals) == 2 {
		return v, nil, fmt.Errorf("%w: %d bytes, the bound is %d", ErrBlobTooLarge, n, maxBytes)
	}
	d, err := vals[2].ToString()
	if err != nil {
		return 0, nil, fmt.Errorf("redis: blob get: data: %w", err)
	}
	if int64(len(d)) > maxBytes { // written between HSTRLEN and HGET cannot be, but say so if it were
		return v, nil, fmt.Errorf("%w: %d bytes, the bound is %d", ErrBlobTooLarge, len(d), maxBytes)
	}
	return v, []byte(d), nil
}
