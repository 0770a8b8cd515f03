package fleet

import (
	"errors"
	"net/http"
	"time"
)

// Schedules returns the matrix's rows: every schedule, each marked Short
// when the short matrix (the test suite) runs it too.
func Schedules() []Schedule {
	ms := time.Millisecond
	sigstop := Fault{At: 1500 * ms, Name: "SIGSTOP redis", Do: func(f *Fleet) error {
		f.Redis.Pause()
		t := now()
		time.Sleep(1500 * ms)
		f.Redis.Resume()
		f.Record("SIGSTOP redis", "pause", t, now())
		return nil
	}}
	return []Schedule{
		// 3 s: no fault to recover from (traffic still goes on until every
		// rule has been denied).
		{Name: "no fault", Store: "single", Short: true, Duration: 3 * time.Second},
		{Name: "Redis SIGSTOP 1.5 s", Store: "single", Short: true, Degrades: true, Faults: []Fault{
			sigstop,
		}},
		{Name: "Redis killed, restarted empty", Store: "single", Short: true, Degrades: true, Duration: 6 * time.Second, Faults: []Fault{
			{At: 1500 * ms, Name: "kill redis, restart after 1 s", Do: func(f *Fleet) error {
				t := now()
				f.Redis.Kill()
				time.Sleep(time.Second)
				f.Redis.Restart()
				// No persistence: every charge made before is forgotten.
				f.Record("redis killed and restarted empty", "loss", t, now())
				return nil
			}},
		}},
		// Replies read during the hold come back 1.5 s late, and a reply
		// read after it waits behind them on its connection: the fleet is
		// slow until ~3 s after the hold began, every call meanwhile taking
		// the store timeout (1 s). 6 s leaves traffic after that.
		{Name: "replies held 1.5 s", Store: "single", Short: true, Degrades: true, Duration: 6 * time.Second, Faults: []Fault{
			{At: 1500 * ms, Name: "hold replies 1.5 s", Do: func(f *Fleet) error {
				t := now()
				f.Proxy.SetReplyDelay(1500 * ms)
				time.Sleep(1500 * ms)
				f.Proxy.SetReplyDelay(0)
				f.Record("replies held 1.5 s", "latency", t, now())
				return nil
			}},
		}},
		// Redis at maxmemory under noeviction (the only policy store/redis
		// accepts; an evicting one is refused at start, cmd/sluice
		// TestRedisEviction*): every write refused with OOM for 1.5 s.
		{Name: "Redis full (maxmemory, noeviction) 1.5 s", Store: "single", Short: true, Degrades: true, Faults: []Fault{
			{At: 1500 * ms, Name: "maxmemory 1 byte for 1.5 s", Do: func(f *Fleet) error { return f.Full(1500 * ms) }},
		}},
		// LLM traffic alone: reservations paired with their settles by
		// request ID, settles smaller and larger than the reservation,
		// clients that vanish, duplicate settles; Redis stopped while
		// requests are between their reservation and their settle.
		{Name: "LLM budgets, Redis SIGSTOP 1.5 s between reserve and settle", Store: "single", Short: true, Degrades: true, LLM: true, Clients: 12, Faults: []Fault{
			sigstop,
		}},
		{Name: "connections dropped 6× in 1.5 s", Store: "single", Short: true, Faults: []Fault{
			{At: 1500 * ms, Name: "drop every Redis connection every 250 ms", Do: func(f *Fleet) error {
				t := now()
				for range 6 {
					f.Proxy.Drop()
					time.Sleep(250 * ms)
				}
				f.Record("Redis connections dropped 6 times", "network", t, now())
				return nil
			}},
		}},
		// A partition, not a reset: instance 1 runs in a network namespace
		// and its packets to Redis go into a blackhole route for 2 s; its
		// calls time out while the others decide as usual.
		{Name: "instance 1 cut from Redis 2 s (netns)", Store: "single", Short: true, Degrades: true, Partition: true, Duration: 6 * time.Second, Faults: []Fault{
			{At: 1500 * ms, Name: "blackhole instance 1's route to Redis for 2 s", Do: func(f *Fleet) error { return f.Cut(2 * time.Second) }},
		}},
		// The native path for fixed and sliding windows (INCRBY on
		// per-window keys, no script) under the faults that test its retries and its
		// take-backs: a pause, and connections dropped mid-call.
		{Name: "native counters, Redis SIGSTOP 1.5 s", Store: "single", Short: true, Degrades: true, Native: true, Faults: []Fault{
			sigstop,
		}},
		{Name: "native counters, connections dropped 6× in 1.5 s", Store: "single", Native: true, Faults: []Fault{
			{At: 1500 * ms, Name: "drop every Redis connection every 250 ms", Do: func(f *Fleet) error {
				t := now()
				for range 6 {
					f.Proxy.Drop()
					time.Sleep(250 * ms)
				}
				f.Record("Redis connections dropped 6 times", "network", t, now())
				return nil
			}},
		}},
		{Name: "an instance SIGKILLed", Store: "single", Short: true, Faults: []Fault{
			{At: 2 * time.Second, Name: "SIGKILL instance 2", Do: func(f *Fleet) error {
				t := now()
				err := f.Kill(2)
				f.Record("SIGKILL instance 2", "instance", t, now())
				return err
			}},
		}},
		{Name: "key resets during traffic", Store: "single", Short: true, Faults: []Fault{
			{At: 1200 * ms, Name: "reset fw u0", Do: func(f *Fleet) error { return f.Reset("fw", "u0") }},
			{At: 2200 * ms, Name: "reset log u1", Do: func(f *Fleet) error { return f.Reset("log", "u1") }},
			{At: 3200 * ms, Name: "reset gcra u0", Do: func(f *Fleet) error { return f.Reset("gcra", "u0") }},
		}},
		{Name: "rule reload mid-window (fw 20→10)", Store: "single", Short: true, Duration: 3 * time.Second, Faults: []Fault{
			{At: 500 * ms, Name: "rewrite the rules at x.5 s", Do: func(f *Fleet) error { return f.Reload(fwReloaded) }},
		}},
		// The tenant's hourly quota is spent at once (Setup), the tenant reset at
		// 1.2 s: for the hour after, a denial more than 1 s after the reset
		// with less than the quota admitted since contradicts it. Then
		// PostgreSQL goes down (a reset needs it: its audit row is written
		// first) and the override must hold from the snapshot.
		{Name: "tenant reset, PostgreSQL down 2 s", Store: "single", Tenants: true, Short: true, Duration: 6 * time.Second,
			Setup: func(f *Fleet) error { return f.SpendHourly() }, Faults: []Fault{
				{At: 1200 * ms, Name: "reset tenant acme", Do: func(f *Fleet) error { return f.Reset("acme", Tenant) }},
				{At: 2500 * ms, Name: "stop PostgreSQL for 2 s", Do: func(f *Fleet) error {
					t := now()
					f.PG.Stop()
					// The outage must reach the fleet: an admin write fails.
					werr := f.admin(http.MethodPut, "/admin/v1/quotas/"+Tenant, acmeRecord)
					time.Sleep(2 * time.Second)
					f.PG.Start()
					f.Record("PostgreSQL stopped", "outage", t, now())
					if werr == nil {
						return errors.New("an admin write succeeded while PostgreSQL was down: the outage did not reach the fleet")
					}
					return nil
				}},
			}},
		{Name: "instance 2 clock 2.5 s ahead, Redis down 2.5 s", Store: "single", Short: true, Degrades: true, Skew: 2500 * ms, Duration: 6 * time.Second, Faults: []Fault{
			{At: 1200 * ms, Name: "kill redis, restart after 2.5 s", Do: func(f *Fleet) error {
				t := now()
				f.Redis.Kill()
				time.Sleep(2500 * ms)
				f.Redis.Restart()
				f.Record("redis killed and restarted empty", "loss", t, now())
				return nil
			}},
		}},
		// Many callers in flight on a loaded host: 120 clients over the three
		// instances while every core spins, so calls queue in the kernel,
		// the instances and Redis. Every rule, every bound as strict as in
		// the other rows.
		{Name: "120 callers in flight, cores busy", Store: "single", Short: true, Clients: 120, Busy: true},
		{Name: "no fault", Store: "cluster"},
		{Name: "one master SIGSTOP 1.5 s", Store: "cluster", Short: true, Degrades: true, Faults: []Fault{
			{At: 1500 * ms, Name: "SIGSTOP master 1", Do: func(f *Fleet) error {
				s := f.Cluster.Servers[1]
				s.Pause()
				t := now()
				time.Sleep(1500 * ms)
				s.Resume()
				f.Record("SIGSTOP cluster master 1", "pause", t, now())
				return nil
			}},
		}},
		{Name: "master killed, replica promoted", Store: "cluster+replicas", Degrades: true, Duration: 8 * time.Second, Faults: []Fault{
			{At: 1500 * ms, Name: "SIGKILL cluster master 1", Do: func(f *Fleet) error { return f.KillMaster(1) }},
		}},
		{Name: "no fault", Store: "sentinel"},
		{Name: "failover, replica 1 s behind", Store: "sentinel", Duration: 8 * time.Second, Faults: []Fault{
			{At: 1500 * ms, Name: "replication 1 s late", Do: func(f *Fleet) error {
				f.ReplProxy.SetReplyDelay(time.Second)
				return nil
			}},
			{At: 3 * time.Second, Name: "SENTINEL FAILOVER", Do: func(f *Fleet) error { return f.Failover() }},
		}},
	}
}
