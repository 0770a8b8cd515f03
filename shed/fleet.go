package shed

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluice-rl/sluice"
)

// Fleet modes.
const (
	// FleetRate: Capacity is requests per Window, counted with GCRA (smooth,
	// exact, a burst of one window's capacity).
	FleetRate = "rate"
	// FleetInFlight: Capacity is requests in flight at once across the
	// fleet, counted with the concurrency algorithm; Window is the lease
	// timeout that frees the slot of a process that died holding it.
	FleetInFlight = "inflight"
)

// FleetConfig configures a Fleet shedder.
//
// Two counters in the store: every admitted request counts against
// Capacity, and every admitted non-critical request also counts against
// ⌊(1 − Reserve) × Capacity⌋, both in one all-or-nothing Take. So once
// non-critical use passes (1 − Reserve) of the capacity, non-critical
// requests are shed, while critical requests are admitted until the whole
// capacity is used: critical work always has at least Reserve of it, and
// may use any capacity the rest leave.
type FleetConfig struct {
	// Name tells fleets sharing one store apart; it is part of the store
	// keys. Default "fleet".
	Name string `yaml:"name" json:"name"`
	// Mode is FleetRate (default) or FleetInFlight.
	Mode string `yaml:"mode" json:"mode"`
	// Capacity is what the whole fleet can serve: requests per Window, or in
	// flight. Required.
	Capacity int64 `yaml:"capacity" json:"capacity"`
	// Window is the rate's period (default 1s), or, in inflight mode, the
	// lease timeout (default 1m).
	Window time.Duration `yaml:"window" json:"window"`
	// Reserve is the share of Capacity kept for critical requests, in
	// [0, 1). Default 0.1.
	Reserve float64 `yaml:"reserve" json:"reserve"`
	// FailClosed sheds non-critical requests when the store cannot answer;
	// by default the fleet shedder then admits everything (shedding is a
	// protection, not a gate: losing it must not take the service down).
	FailClosed bool `yaml:"fail_closed" json:"fail_closed"`
}

func (c FleetConfig) withDefaults() FleetConfig {
	if c.Name == "" {
		c.Name = "fleet"
	}
	if c.Mode == "" {
		c.Mode = FleetRate
	}
	if c.Window == 0 {
		c.Window = time.Second
		if c.Mode == FleetInFlight {
			c.Window = time.Minute
		}
	}
	if c.Reserve == 0 {
		c.Reserve = 0.1
	}
	return c
}

// limits returns the two limits of a defaulted configuration.
func (c FleetConfig) limits() (all, nonCritical sluice.Limit) {
	alg := sluice.GCRA
	if c.Mode == FleetInFlight {
		alg = sluice.Concurrency
	}
	all = sluice.Limit{Algorithm: alg, Quota: c.Capacity, Window: c.Window}
	nonCritical = all
	nonCritical.Quota = int64(math.Floor((1 - c.Reserve) * float64(c.Capacity)))
	return all, nonCritical
}

func (c FleetConfig) validate(path string, errs *FieldErrors) {
	if len(c.Name) > 200 {
		errs.add(path+".name", "%d bytes, more than 200", len(c.Name))
	}
	if c.Mode != FleetRate && c.Mode != FleetInFlight {
		errs.add(path+".mode", "%q is not %s or %s", c.Mode, FleetRate, FleetInFlight)
		return
	}
	if c.Capacity < 1 {
		errs.add(path+".capacity", "%d must be at least 1", c.Capacity)
	}
	if !(c.Reserve >= 0 && c.Reserve < 1) {
		errs.add(path+".reserve", "%v is outside [0, 1)", c.Reserve)
	}
	if len(*errs) > 0 {
		return
	}
	all, nc := c.limits()
	if nc.Quota < 1 {
		errs.add(path+".reserve", "%v of capacity %d leaves nothing for non-critical requests", c.Reserve, c.Capacity)
	}
	for _, l := range []sluice.Limit{all, nc} {
		if err := l.Validate(); err != nil {
			errs.add(path, "capacity %d per %v cannot be counted exactly: %v", l.Quota, c.Window, err)
			return
		}
	}
}

// Fleet is the fleet usage shedder; see FleetConfig. Create it with
// NewFleet; it is safe for concurrent use. The store's clock is its clock
// (Redis TIME for a fleet, an injected one in tests).
type Fleet struct {
	cfg     FleetConfig
	store   sluice.Store
	all, nc sluice.Limit
	keyAll  string
	keyNC   string
}

// NewFleet returns a fleet shedder counting in store; it reports the
// configuration's problems.
func NewFleet(c FleetConfig, store sluice.Store) (*Fleet, error) {
	c = c.withDefaults()
	var errs FieldErrors
	c.validate("fleet", &errs)
	if store == nil {
		errs.add("fleet", "no store")
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	all, nc := c.limits()
	// One hash tag: both counters in one Redis Cluster slot, so a Take is
	// one atomic script call.
	tag := "{shed:" + c.Name + "}"
	return &Fleet{cfg: c, store: store, all: all, nc: nc, keyAll: tag + ":all", keyNC: tag + ":noncritical"}, nil
}

// Config returns the defaulted configuration.
func (f *Fleet) Config() FleetConfig { return f.cfg }

// FleetLease is an admitted request's hold on fleet capacity; in inflight
// mode it must be given back with Release. The zero value holds nothing.
type FleetLease struct {
	f      *Fleet
	leases [2]uint64
	n      int
}

// Release frees the capacity an inflight-mode admission holds. It does
// nothing in rate mode and on the zero value.
func (l FleetLease) Release(ctx context.Context) error {
	if l.f == nil || l.n == 0 {
		return nil
	}
	ops := [2]sluice.Op{
		{Key: l.f.keyAll, Limit: l.f.all, Release: true, Lease: l.leases[0]},
		{Key: l.f.keyNC, Limit: l.f.nc, Release: true, Lease: l.leases[1]},
	}
	var res [2]sluice.Result
	if err := l.f.store.Take(ctx, ops[:l.n], res[:l.n]); err != nil {
		return fmt.Errorf("shed: fleet release: %w", err)
	}
	return nil
}

// Admit asks the store for room for one request of class p. A non-nil
// Refusal means shed. err reports a store failure; the request is then
// admitted (or, with FailClosed, non-critical work is shed), and err is for
// the caller's logs and metrics.
func (f *Fleet) Admit(ctx context.Context, p Priority) (lease FleetLease, refused *Refusal, err error) {
	p = p.norm()
	ops := [2]sluice.Op{
		{Key: f.keyAll, Limit: f.all, Cost: 1},
		{Key: f.keyNC, Limit: f.nc, Cost: 1},
	}
	n := 2
	if p == Critical {
		n = 1
	}
	var res [2]sluice.Result
	if err := f.store.Take(ctx, ops[:n], res[:n]); err != nil {
		err = fmt.Errorf("shed: fleet: %w", err)
		if f.cfg.FailClosed && p != Critical {
			return FleetLease{}, &Refusal{Layer: LayerFleet, Priority: p, RetryAfter: time.Second,
				Detail: "the fleet capacity store is unavailable and non-critical work is shed meanwhile"}, err
		}
		return FleetLease{}, nil, err
	}
	for i := range n {
		if res[i].Allowed {
			continue
		}
		wait := max(res[i].RetryAfter, time.Second)
		if f.cfg.Mode == FleetInFlight {
			wait = time.Second
		}
		detail := "the fleet is at its capacity"
		if i == 1 {
			detail = fmt.Sprintf("the fleet is past %.0f%% of its capacity; the rest is reserved for critical requests", 100*(1-f.cfg.Reserve))
		}
		return FleetLease{}, &Refusal{Layer: LayerFleet, Priority: p, RetryAfter: wait, Detail: detail}, nil
	}
	if f.cfg.Mode == FleetInFlight {
		lease = FleetLease{f: f, n: n}
		for i := range n {
			lease.leases[i] = res[i].Lease
		}
	}
	return lease, nil, nil
}
