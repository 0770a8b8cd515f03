// Command quickstart embeds Sluice as a library: a keyed limiter over the
// in-process store, and a batch that applies two limits all-or-nothing.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/compose"
)

func main() {
	// The store stack every Sluice program gets (store/compose): in
	// process by default; set Kind "redis" and Redis.URL to share counters
	// with a fleet (placement hybrid and local then work as in sluice serve).
	store, err := compose.New(compose.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()

	// 5 requests per second per user, with bursts of up to 5.
	perUser, err := sluice.NewLimiter(store, sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 5, Window: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for i := 1; i <= 7; i++ {
		r, err := perUser.Allow(ctx, "user:alice")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("alice #%d: allowed=%-5v remaining=%d retry_after=%v\n", i, r.Allowed, r.Remaining, r.RetryAfter)
	}

	// Wait blocks until the limiter admits the request.
	start := time.Now()
	if err := perUser.Wait(ctx, "user:alice"); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("alice waited %v for her next token\n", time.Since(start).Round(10*time.Millisecond))

	// Two limits on one request, all-or-nothing: the per-tenant quota is
	// not charged when the per-user limit denies.
	ops := []sluice.Op{
		{Key: "tenant:acme", Limit: sluice.Limit{Algorithm: sluice.SlidingWindow, Quota: 1000, Window: time.Minute}, Cost: 1},
		{Key: "user:alice", Limit: perUser.Limit(), Cost: 1},
	}
	res := make([]sluice.Result, len(ops))
	if err := store.Take(ctx, ops, res); err != nil {
		log.Fatal(err)
	}
	// The batch is allowed only if every op is; res[0].Allowed alone says
	// the tenant limit would have admitted it, not that anything was taken.
	allowed := res[0].Allowed && res[1].Allowed
	charged := "both limits charged"
	if !allowed {
		charged = "nothing charged"
	}
	fmt.Printf("batch: allowed=%v (user: allowed=%v retry_after=%v); tenant remaining=%d, %s\n",
		allowed, res[1].Allowed, res[1].RetryAfter.Round(time.Millisecond), res[0].Remaining, charged)
}
