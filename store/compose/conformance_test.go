package compose

import (
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The conformance suite over every composition New ships, each on real
// stores (a real redis-server shared by the test binary, a real 3-master
// Redis Cluster). A composition that cannot honour a part of the suite
// names it, with the reason, in its skip list.

// composition is one way the stack is put together, and the suite's ops
// placed in it.
type composition struct {
	name   string
	denied string
	bytes  []byte // placements the suite's keys are spread over
	skip   map[string]string
}

// hybridSkips are what a stack with placement hybrid cannot honour: its
// hits are decided from allotments, whose Results are estimates of the
// global state and whose bounds are the hybrid store's (README, "Hybrid
// placement"), not an exact step table's.
var hybridSkips = map[string]string{
	"Steps":             "hybrid: Remaining and ResetAfter of a hit decided from an allotment are estimates of the global state",
	"RetryAfter":        "hybrid: a denial decided globally is exact, but the hits before it were decided from allotments whose units stay taken until spent or given back",
	"RetryAfterSettle":  "hybrid: as RetryAfter",
	"Differential":      "hybrid: admits within the hybrid store's stated bound, not hit for hit as the exact algorithm",
	"BoundaryBurst":     "hybrid: as Differential",
	"BucketsAgree":      "hybrid: token_bucket is decided as gcra from allotments; its Results are estimates",
	"Concurrency":       "hybrid: never admits more than the quota, but may admit fewer while an allotment is on its way (units leased and not yet spendable)",
	"BatchConcurrency":  "hybrid: as Concurrency (with the denied cache, a denial remembered just before a grant lands strands the grant's units until RetryAfter)",
	"SettleConcurrency": "hybrid: a look decided from an allotment reports ResetAfter as last estimated, not as the global store would now",
}

// compositions are those run over a single Redis. The Redis store alone
// (placement global, no cache) runs the suite in store/redis; here each
// composition adds a layer to it.
func compositions() []composition {
	return []composition{
		{name: "global+denied", denied: DeniedOn, bytes: []byte{'g'}},
		{name: "local", denied: DeniedOff, bytes: []byte{stack.KeyLocal}},
		{name: "global+local", denied: DeniedAuto, bytes: []byte{'g', stack.KeyLocal}},
		{name: "hybrid", denied: DeniedOff, bytes: []byte{stack.KeyHybrid}, skip: hybridSkips},
		{name: "hybrid+denied", denied: DeniedOn, bytes: []byte{stack.KeyHybrid}, skip: hybridSkips},
		{name: "global+hybrid+local", denied: DeniedAuto, bytes: []byte{'g', stack.KeyHybrid, stack.KeyLocal}, skip: hybridSkips},
	}
}

func (c composition) run(t *testing.T, url string) {
	storetest.RunWith(t, func(t *testing.T, clock *storetest.Clock) sluice.Store {
		s := newStack(t, stackConfig(url, clock, c.denied))
		return &placing{s: s, bytes: c.bytes, place: func(op *sluice.Op) byte { return keyByte(op, c.bytes) }}
	}, storetest.Options{Skip: c.skip})
}

func TestConformanceMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock *storetest.Clock) sluice.Store {
		c := DefaultConfig()
		c.Memory = memory.Options{Now: clock.Now}
		return newStack(t, c)
	})
}

func TestConformanceRedis(t *testing.T) {
	t.Parallel() // fresh key prefixes on the shared server, fake clocks, 5 s timeouts
	srv := sharedRedis(t)
	for _, c := range compositions() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // its stacks' own key prefixes and fake clocks
			c.run(t, srv.URL())
		})
	}
}

// Over a real 3-master Redis Cluster (the Redis store alone runs the suite
// over one in store/redis): the denied cache is bypassed there
// (DeniedAuto), the keys of one batch land in different slots and
// placements.
func TestConformanceCluster(t *testing.T) {
	t.Parallel() // its own Cluster (its start-up overlaps TestConformanceRedis), fake clocks
	cl := redistest.StartCluster(t)
	for _, c := range []composition{
		{name: "global+local", denied: DeniedAuto, bytes: []byte{'g', stack.KeyLocal}},
		{name: "global+hybrid+local", denied: DeniedAuto, bytes: []byte{'g', stack.KeyHybrid, stack.KeyLocal}, skip: hybridSkips},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // its stacks' own key prefixes and fake clocks
			c.run(t, cl.URL())
		})
	}
}
