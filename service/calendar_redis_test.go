package service

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestCalendarQuotaRedis: the per-period windows of a calendar quota (about
// 31 days of µs, epoch-aligned far from 1970) decide the same in the Redis
// scripts as in the memory store.
func TestCalendarQuotaRedis(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	srv := redistest.Start(t)
	clock := storetest.NewClock()
	st, err := redis.New(redis.Options{URL: srv.URL(), Now: clock.Now, Timeout: 5 * time.Second}) // a loaded CI machine under -race
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	snap, err := rules.Parse("c.yaml", []byte(`
domain: api
descriptors:
  - key: api_key
    rate_limit: {calendar: month, time_zone: America/New_York, requests_per_unit: 2}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Now = clock.Now
	eng, err := New(cfg, StaticRules{snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Domain: "api", Descriptors: []Descriptor{desc("api_key", "acme")}}
	clock.Set(time.Date(2027, 1, 31, 22, 30, 0, 0, ny))
	var got []Code
	for range 3 {
		resp, err := eng.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.OverallCode)
		if d := resp.Statuses[0].Degraded; d != "" {
			t.Fatalf("the store did not answer: %s", d)
		}
		if resp.OverallCode == CodeOverLimit {
			if st := resp.Statuses[0]; st.Degraded != "" || st.Result.RetryAfter != 90*time.Minute {
				t.Errorf("denied: degraded %q, retry after %v; want the store's answer, 1h30m (midnight on Feb 1 in New York)", st.Degraded, st.Result.RetryAfter)
			}
		}
	}
	if got[0] != CodeOK || got[1] != CodeOK || got[2] != CodeOverLimit {
		t.Errorf("January: %v, want OK OK OVER_LIMIT", got)
	}
	clock.Advance(90 * time.Minute)
	resp, err := eng.Check(context.Background(), req)
	if err != nil || resp.OverallCode != CodeOK {
		t.Errorf("February 1st: %v, %v; want OK", resp.OverallCode, err)
	}
}
