package redis

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Instance snapshots for a fleet-wide view (the dashboard's): one hash, in
// one slot ({sluice}), one field per instance holding "<unix ms>|<blob>".
// Publish costs one HSET and one PEXPIRE per instance per interval; nothing
// of it is on the check path.

// exchangeTTL is how long the hash outlives the last Publish; staleAfter is
// how old a field may be before Collect removes it (an instance that
// stopped).
const (
	exchangeTTL = 10 * time.Minute
	staleAfter  = 5 * time.Minute
)

func (s *Store) exchangeKey() string { return s.prefix + "{sluice}:dashboard" }

// Publish stores blob as instance's latest snapshot.
func (s *Store) Publish(ctx context.Context, instance string, blob []byte) error {
	now := time.Now().UnixMilli()
	v := make([]byte, 0, len(blob)+16)
	v = strconv.AppendInt(v, now, 10)
	v = append(v, '|')
	v = append(v, blob...)
	key := s.exchangeKey()
	cmds := []rueidis.Completed{
		s.client.B().Hset().Key(key).FieldValue().FieldValue(instance, string(v)).Build(),
		s.client.B().Pexpire().Key(key).Milliseconds(exchangeTTL.Milliseconds()).Build(),
	}
	for _, r := range s.client.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("redis: publish: %w", err)
		}
	}
	return nil
}

// Collect returns every instance's latest snapshot published within the
// last five minutes, and removes older ones.
func (s *Store) Collect(ctx context.Context) (map[string][]byte, error) {
	key := s.exchangeKey()
	m, err := s.client.Do(ctx, s.client.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("redis: collect: %w", err)
	}
	cutoff := time.Now().Add(-staleAfter).UnixMilli()
	out := make(map[string][]byte, len(m))
	var stale []string
	for inst, v := range m {
		b := []byte(v)
		i := bytes.IndexByte(b, '|')
		at, perr := strconv.ParseInt(string(b[:max(i, 0)]), 10, 64)
		if i < 0 || perr != nil || at < cutoff {
			stale = append(stale, inst)
			continue
		}
		out[inst] = b[i+1:]
	}
	if len(stale) > 0 {
		_ = s.client.Do(ctx, s.client.B().Hdel().Key(key).Field(stale...).Build()).Error()
	}
	return out, nil
}
