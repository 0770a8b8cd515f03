package sluice_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
)

// A keyed limiter: 3 requests per second per API key, in process.
func Example() {
	// A fixed clock keeps the output stable; leave Now unset in real code.
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memory.New(memory.Options{Now: func() time.Time { return now }})
	defer store.Close()

	limiter, err := sluice.NewLimiter(store, sluice.Limit{
		Algorithm: sluice.GCRA,
		Quota:     3,
		Window:    time.Second,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		r, err := limiter.Allow(ctx, "api-key-alice")
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: allowed=%v remaining=%d retry-after=%v\n", i, r.Allowed, r.Remaining, r.RetryAfter)
	}
	r, _ := limiter.Allow(ctx, "api-key-bob") // another key, its own quota
	fmt.Printf("bob: allowed=%v remaining=%d\n", r.Allowed, r.Remaining)
	// Output:
	// request 1: allowed=true remaining=2 retry-after=0s
	// request 2: allowed=true remaining=1 retry-after=0s
	// request 3: allowed=true remaining=0 retry-after=0s
	// request 4: allowed=false remaining=0 retry-after=333.334ms
	// bob: allowed=true remaining=2
}
