package shedload

import (
	"fmt"
	"net/http"

	"github.com/sluice-rl/sluice/httplimit/gateway"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/shed"
	"github.com/sluice-rl/sluice/store/memory"
)

// benchRules checks every request against a rate-limit rule that never
// refuses, so the rate-limit stage runs as it would in production.
const benchRules = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unlimited: true}
`

// Gateway returns Sluice's gateway as `sluice proxy` builds it, forwarding
// to upstream and shedding with cfg (nil: no shedding), the header
// Sluice-Priority giving the class (callers may ask for any). close frees
// it.
func Gateway(upstream string, cfg *shed.Config) (h http.Handler, s *shed.Shedder, close func(), err error) {
	snap, err := rules.Parse("bench.yaml", []byte(benchRules), rules.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	mem := memory.New(memory.Options{})
	engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	if err != nil {
		mem.Close()
		return nil, nil, nil, err
	}
	c := gateway.Config{Upstream: upstream, Rules: "unused", Domain: "bench"}
	if cfg != nil {
		sc := *cfg
		sc.Priority.Max = shed.Critical
		c.Shed = &gateway.Shed{PriorityFrom: "header:Sluice-Priority", Config: sc}
	}
	c.Default()
	h, s, err = gateway.NewHandler(c, engine, mem, shed.Options{}, nil)
	if err != nil {
		mem.Close()
		return nil, nil, nil, fmt.Errorf("gateway: %w", err)
	}
	return h, s, func() { mem.Close() }, nil
}
