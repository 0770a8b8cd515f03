package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	"github.com/sluice-rl/sluice/store/stack"
)

// claimLetter starts the Redis key of a claim (Claim): no counter's key
// starts with it (algLetter, nativeLetters), so Keys never lists a claim
// and no claim shares a name with a counter.
const claimLetter = "!"

var _ stack.Claimer = (*Store)(nil)

// Claim implements stack.Claimer with one SET key NX PX ttl (ttl rounded
// up to whole milliseconds, at least 1) on the node of key's hash tag:
// the instance whose SET succeeds holds the name until it expires, by
// Redis's clock, and every other instance of the fleet is told it is
// held. The Redis key is Prefix + "!" + key (wrapped in a hash tag of its
// own when key has none), in the slot of the counter key names. Claim
// bounds its wait by Options.Timeout; it is not a part of any batch.
func (s *Store) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	ms := max((ttl+time.Millisecond-1)/time.Millisecond, 1)
	rk := redisClaimKey(s.prefix, key)
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c := s.client
	err := c.Do(cctx, c.B().Set().Key(rk).Value("1").Nx().PxMilliseconds(int64(ms)).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil // NX: held
	}
	if err != nil {
		return false, fmt.Errorf("redis: claim: %w", redactErr(err))
	}
	return true, nil
}

// redisClaimKey is the Redis key of Claim's name key: like redisKey's,
// with claimLetter for the algorithm's letter.
func redisClaimKey(prefix, key string) string {
	if _, ok := hashTag(key); ok {
		return prefix + claimLetter + key
	}
	return prefix + claimLetter + "{" + key + "}"
}
