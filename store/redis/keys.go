package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

var _ stack.KeyLister = (*Store)(nil)

// scanCount is the COUNT hint of each SCAN: keys a node looks at per call.
const scanCount = 1000

// Keys implements stack.KeyLister: up to max (≥ 1) keys of this store's
// prefix that start with prefix, as Op.Key names them (a key used under
// several algorithms is listed once), and whether there are more. It SCANs
// with MATCH, COUNT 1000 a call, on every master of a cluster, and stops
// as soon as it has found one key more than max; it never blocks Redis for
// longer than one SCAN call, and a listing is not a snapshot (keys written
// meanwhile may or may not appear). A key that expires or is reset as it
// runs may still be listed.
//
// One name is ambiguous: an op key that is a whole hash tag, "{x}", has
// the same Redis key (and so the same state) as "x", and is listed as "x".
func (s *Store) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	if max < 1 {
		return nil, false, fmt.Errorf("redis: keys: max %d, want ≥ 1", max)
	}
	if s.closed.Load() {
		return nil, false, ErrClosed
	}
	clients, err := s.masters(ctx)
	if err != nil {
		return nil, false, err
	}
	var letters strings.Builder
	for _, a := range stack.Algorithms() {
		letters.WriteString(algLetter[a])
	}
	letters.WriteString(nativeLetters)
	head := globEscape(s.prefix) + "[" + letters.String() + "]"
	// A key with no hash tag of its own is stored wrapped in one; a key
	// with a tag is stored as it is (redisKey).
	patterns := []string{head + "{" + globEscape(prefix) + "*", head + globEscape(prefix) + "*"}
	if prefix == "" {
		patterns = []string{head + "*"}
	}
	var keys []string
	seen := map[string]bool{}
	for _, c := range clients {
		for _, pat := range patterns {
			var cursor uint64
			for {
				cctx, cancel := context.WithTimeout(ctx, s.timeout)
				e, err := c.Do(cctx, c.B().Scan().Cursor(cursor).Match(pat).Count(scanCount).Build()).AsScanEntry()
				cancel()
				if err != nil {
					return nil, false, fmt.Errorf("redis: keys: SCAN: %w", err)
				}
				for _, rk := range e.Elements {
					k, ok := s.opKey(rk)
					if !ok || !strings.HasPrefix(k, prefix) || seen[k] {
						continue
					}
					if len(keys) == max {
						return keys, true, nil
					}
					seen[k] = true
					keys = append(keys, k)
				}
				if cursor = e.Cursor; cursor == 0 {
					break
				}
			}
		}
	}
	return keys, false, nil
}

// masters returns a client for each node holding keys: the one server (or
// Sentinel's master), or every master of a cluster (ROLE tells them from
// replicas, which hold the same keys).
func (s *Store) masters(ctx context.Context) ([]rueidis.Client, error) {
	if !s.cluster {
		return []rueidis.Client{s.client}, nil
	}
	var out []rueidis.Client
	var errs []error
	for addr, c := range s.client.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		role, err := c.Do(cctx, c.B().Role().Build()).ToArray()
		cancel()
		if err != nil || len(role) == 0 {
			errs = append(errs, fmt.Errorf("%s: ROLE: %w", addr, err))
			continue
		}
		if r, _ := role[0].ToString(); r == "master" {
			out = append(out, c)
		}
	}
	if len(errs) > 0 {
		// A master that cannot answer would leave its keys out unseen.
		return nil, fmt.Errorf("redis: keys: %w", errors.Join(errs...))
	}
	return out, nil
}

// opKey maps a Redis key back to the op key redisKey made it from; false
// for a key this store did not write.
func (s *Store) opKey(rk string) (string, bool) {
	if base, ok := nativeBase(s.prefix, rk); ok {
		rk = base // a per-window key of the native path (native.go)
	}
	rest, ok := strings.CutPrefix(rk, s.prefix)
	if !ok || rest == "" {
		return "", false
	}
	var alg sluice.Algorithm
	for _, a := range stack.Algorithms() {
		if algLetter[a][0] == rest[0] {
			alg = a
		}
	}
	if alg == 0 {
		return "", false
	}
	k := rest[1:]
	if n := len(k); n >= 2 && k[0] == '{' && k[n-1] == '}' {
		if _, tagged := hashTag(k[1 : n-1]); !tagged {
			k = k[1 : n-1]
		}
	}
	if redisKey(s.prefix, alg, k) != rk {
		return "", false
	}
	return k, true
}

// globEscape escapes the characters Redis glob patterns (MATCH) treat as
// special, so that s matches only itself.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
