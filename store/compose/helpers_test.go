package compose

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// One redis-server for the whole test binary (the tests give each stack a
// key prefix of its own); the 3-master cluster is started by the one test
// that runs every cluster composition.
var shared struct {
	once sync.Once
	srv  *redistest.Server
	stop func()
	err  error
}

// TestMain runs up to four parallel tests per CPU (go test's default is
// one; an explicit -parallel wins): the compositions' conformance runs own
// their key prefixes and fake clocks, and each waits on its round trips to
// Redis while the others compute.
func TestMain(m *testing.M) {
	proctest.RaiseParallel(4)
	code := m.Run()
	if shared.stop != nil {
		shared.stop()
	}
	proctest.Exit(code)
}

// sharedRedis returns the binary's redis-server, starting it on first use;
// without a redis-server binary it skips the test (fails it with CI=true).
func sharedRedis(t *testing.T) *redistest.Server {
	t.Helper()
	shared.once.Do(func() { shared.srv, shared.stop, shared.err = redistest.StartProcess() })
	if shared.err != nil {
		proctest.Missing(t, "redis-server", fmt.Sprintf("redis-server could not be started (%v): the store/compose tests that need a real Redis are skipped; install it (apt-get install -y redis-server redis-tools) or see .ci/run", shared.err))
	}
	return shared.srv
}

// stackConfig is a Config of Kind redis over url with every layer on
// clock (nil: real time) and keys under a fresh prefix.
func stackConfig(url string, clock *storetest.Clock, denied string) Config {
	c := DefaultConfig()
	c.Kind = KindRedis
	c.Denied = denied
	c.Redis = redis.Options{URL: url, Prefix: fmt.Sprintf("t%x:", rand.Uint64()), Timeout: 5 * time.Second}
	if clock != nil {
		c.Redis.Now = clock.Now
		c.Memory = memory.Options{Now: clock.Now}
		c.Hybrid = hybrid.Options{Now: clock.Now}
		c.DeniedOptions = hybrid.DeniedOptions{Now: clock.Now}
	}
	return c
}

// newStack builds c and closes it when the test ends. A stack with a
// hybrid store over a connected Redis is returned once the hybrid store
// follows the Redis store's reset announcements: the "all" that confirms
// the subscription voids every allotment held (units taken and never
// spent), which would make counts of what the counters used inexact.
func newStack(t testing.TB, c Config) *Stack {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if s.hyb != nil && s.Redis() != nil {
		deadline := time.Now().Add(20 * time.Second)
		for s.Stats().Hybrid.ResetFlushes == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the hybrid store heard no confirmed subscription to reset announcements after 20s")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return s
}

// placing puts each op of the suite in the placement place chooses for
// it, by prefixing its key with the placement's byte ('g' for global: a
// key of the suite may start with 'h' or 'l' itself), so that the suite's
// ops reach the stack's layers as the engine's keys do. Keys lists every
// placement used and strips the byte again.
type placing struct {
	s     *Stack
	place func(op *sluice.Op) byte
	bytes []byte // the placements place may choose
}

func (p *placing) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	placed := make([]sluice.Op, len(ops))
	for i, op := range ops {
		op.Key = string(p.place(&op)) + op.Key
		placed[i] = op
	}
	return p.s.Take(ctx, placed, results)
}

func (p *placing) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	if max < 1 {
		return p.s.Keys(ctx, prefix, max) // the stack names the error
	}
	var out []string
	more := false
	bytes := p.bytes
	if slices.Contains(bytes, stack.KeyHybrid) && !slices.Contains(bytes, 'g') {
		bytes = append(slices.Clip(bytes), 'g') // where keyByte puts what hybrid cannot decide
	}
	for _, b := range bytes {
		n := max - len(out)
		if n == 0 {
			n = 1 // only to learn whether there are more
		}
		keys, m, err := p.s.Keys(ctx, string(b)+prefix, n)
		if err != nil {
			return nil, false, err
		}
		if len(out) == max {
			more = more || len(keys) > 0 || m
			continue
		}
		for _, k := range keys {
			out = append(out, k[1:])
		}
		more = more || m
	}
	return out, more, nil
}

// keyByte is the placement byte of a key of the suite, spread over bytes
// by a hash of the key (so that one batch spans placements), hybrid only
// for the algorithms it decides.
func keyByte(op *sluice.Op, bytes []byte) byte {
	h := uint32(2166136261)
	for i := 0; i < len(op.Key); i++ {
		h = (h ^ uint32(op.Key[i])) * 16777619
	}
	b := bytes[h%uint32(len(bytes))]
	if b == stack.KeyHybrid && !hybrid.Supported(op.Limit.Algorithm) {
		return 'g'
	}
	return b
}
