package hybrid_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/hybrid"
	"github.com/sluice-rl/sluice/store/redis"
)

// A hybrid store over Redis, behind the denied-key cache: most hits are
// decided in this process from allotments; the limit holds across every
// process that shares the Redis.
func Example() {
	global, err := redis.New(redis.Options{URL: "redis://127.0.0.1:6379/0"})
	if err != nil {
		log.Print(err) // no Redis here
		return
	}
	defer global.Close()
	h, err := hybrid.New(global, hybrid.Options{Horizon: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close() // gives back what it holds
	store := hybrid.NewDenied(h, hybrid.DeniedOptions{})

	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 6000, Window: time.Minute}
	ops := []sluice.Op{{Key: "api-key-alice", Limit: limit, Cost: 1}}
	res := make([]sluice.Result, 1)
	if err := store.Take(context.Background(), ops, res); err != nil {
		log.Print(err) // the rule's failure mode applies
		return
	}
	fmt.Println(res[0].Allowed)
}
