package redis_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/redis"
)

// Two limits of one request, checked together: both keys carry the hash tag
// {tenant-42}, so in a Redis Cluster they share a slot and one script call
// decides them all-or-nothing.
func ExampleNew() {
	opts, err := redis.ParseURL("redis://127.0.0.1:6379/0?prefix=myapp:&timeout=50ms")
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := redis.New(opts)
	if err != nil {
		fmt.Println(err) // Redis is not running here; the service retries
		return
	}
	defer st.Close()
	ops := []sluice.Op{
		{Key: "{tenant-42}:user:alice", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Second}, Cost: 1},
		{Key: "{tenant-42}", Limit: sluice.Limit{Algorithm: sluice.SlidingWindow, Quota: 1000, Window: time.Minute}, Cost: 1},
	}
	res := make([]sluice.Result, len(ops))
	if err := st.Take(context.Background(), ops, res); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res[0].Allowed && res[1].Allowed, res[0].Remaining)
}
