package service_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

func Example() {
	snap, err := rules.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`), rules.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A fixed clock keeps the example's window from rolling over mid-run.
	now := time.Date(2026, 1, 1, 12, 0, 30, 0, time.UTC)
	store := memory.New(memory.Options{Now: func() time.Time { return now }})
	defer store.Close()
	eng, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, store, nil, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req := service.Request{Domain: "edge", Descriptors: []service.Descriptor{
		{Entries: []rules.Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
	}}
	for range 3 {
		resp, err := eng.Check(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.CurrentLimit.RequestsPerUnit, st.CurrentLimit.Unit, st.Result.Remaining)
	}
	_, err = eng.Check(context.Background(), service.Request{Domain: "edge"})
	fmt.Println(err)
	// Output:
	// OK 2 minute 1
	// OK 2 minute 0
	// OVER_LIMIT 2 minute 0
	// service: invalid request: no descriptors
}
