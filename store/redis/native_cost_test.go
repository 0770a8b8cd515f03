package redis

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestRedisCostPerDecision measures what Redis spends per fixed-window
// decision on the script path (scripts/fast.lua), on the native path
// (Options.NativeFixedWindow) and with envoyproxy/ratelimit's pattern
// (INCRBY and EXPIRE per decision, pipelined, issued here): a fresh
// redis-server per mode, CONFIG RESETSTAT, a fixed number of decisions
// from many goroutines over many keys, then INFO commandstats (usec of
// every command, SCRIPT LOAD included) and INFO cpu (used_cpu_user) per
// decision. Run by scripts/redis-native-cost.sh; skipped unless
// SLUICE_REDIS_COST=1 (it asserts nothing about time: it reports).
func TestRedisCostPerDecision(t *testing.T) {
	if os.Getenv("SLUICE_REDIS_COST") != "1" {
		t.Skip("set SLUICE_REDIS_COST=1 (scripts/redis-native-cost.sh) to measure")
	}
	decisions := 200_000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_REDIS_COST_N")); err == nil && v > 0 {
		decisions = v
	}
	const (
		workers = 64
		keys    = 1000
	)
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1 << 40, Window: time.Minute}
	t.Logf("%d decisions, %d goroutines, %d keys, fixed_window %v", decisions, workers, keys, limit)
	t.Logf("%-8s %12s %12s %12s %12s", "mode", "cmds/dec", "cmd-usec/dec", "cpu-usec/dec", "decisions/s")
	for _, mode := range []string{"script", "native", "envoy"} {
		srv := redistest.Start(t)
		admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		var take func(i int) error
		switch mode {
		case "script", "native":
			s, err := New(Options{URL: srv.URL(), NativeFixedWindow: mode == "native"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			take = func(i int) error {
				res := make([]sluice.Result, 1)
				err := s.Take(context.Background(), []sluice.Op{{Key: "k" + strconv.Itoa(i%keys), Limit: limit, Cost: 1}}, res)
				if err == nil && !res[0].Allowed {
					err = fmt.Errorf("denied: %+v", res[0])
				}
				return err
			}
		case "envoy":
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			take = func(i int) error {
				key := "envoy_k" + strconv.Itoa(i%keys) + "_" + strconv.FormatInt(time.Now().Unix()/60, 10)
				for _, r := range c.DoMulti(context.Background(),
					c.B().Incrby().Key(key).Increment(1).Build(),
					c.B().Expire().Key(key).Seconds(60).Build()) {
					if err := r.Error(); err != nil {
						return err
					}
				}
				return nil
			}
		}
		// Warm up (scripts loaded, clock sampled), then reset the counters.
		for i := range 100 {
			if err := take(i); err != nil {
				t.Fatal(err)
			}
		}
		ctx := context.Background()
		if err := admin.Do(ctx, admin.B().ConfigResetstat().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		cpu0 := infoField(t, admin, "cpu", "used_cpu_user")
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1))
					if i > decisions {
						return
					}
					if err := take(i); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		cpu1 := infoField(t, admin, "cpu", "used_cpu_user")
		calls, usec := costStats(t, admin)
		d := float64(decisions)
		t.Logf("%-8s %12.3f %12.3f %12.3f %12.0f", mode, calls/d, usec/d, (cpu1-cpu0)*1e6/d, d/took.Seconds())
		admin.Close()
	}
}

// infoField reads a numeric field of an INFO section.
func infoField(t *testing.T, c rueidis.Client, section, field string) float64 {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// costStats sums calls and usec over INFO commandstats, but for the
// INFO and CONFIG commands the measurement itself sends.
func costStats(t *testing.T, c rueidis.Client) (calls, usec float64) {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(s, "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok || strings.HasPrefix(rest, "info:") || strings.HasPrefix(rest, "config") {
			continue
		}
		_, fields, _ := strings.Cut(rest, ":")
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}
