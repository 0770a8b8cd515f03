package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Config configures an Engine. Start from DefaultConfig and change fields;
// New validates it.
type Config struct {
	// ExpectedReplicas is how many Sluice replicas share the store. A limit
	// whose failure_mode is local falls back, per replica, to its quota
	// divided by this (rounded up, at least 1), so the fleet together stays
	// near the limit while the store is down. At least 1; default 1.
	ExpectedReplicas int
	// DefaultFailureMode applies to rules that name no failure_mode and to
	// limits given in the request. Default FailureOpen, as envoy's filter
	// fails open.
	DefaultFailureMode rules.FailureMode
	// NearLimitRatio: an allowed hit that leaves less than (1 − ratio) of the
	// limit counts in sluice_near_limit_total. In (0, 1]; default 0.8.
	NearLimitRatio float64
	// Fallback is the in-process store the local failure mode uses (cmd
	// builds a store/memory store). It is a dependency rather than a setting;
	// nil makes local behave as open (counted as failed_open).
	Fallback sluice.Store
	// Observer, when set, sees every decision of a rule-file limit (see
	// Observer). Nil observes nothing.
	Observer Observer
	// RequestBounds bound the size of requests and of detailed_metric labels; the
	// zero value is DefaultRequestBounds.
	RequestBounds RequestBounds
	// Overrides, if set, resolves each matched rule's limit per request
	// (tenant tiers and overrides, kill switches; see Overrides). An
	// OverlaySource (*tenant.Registry) is compiled with the rules into the
	// engine's policy, one overlay at a time. Nil keeps the rule files'
	// limits.
	Overrides Overrides
	// Sample, when set, records a bounded sample of checks for previews
	// of rule changes (see Sample). Nil records nothing.
	Sample *Sample
	// ShadowMode puts every limit in shadow mode (envoyproxy/ratelimit's
	// SHADOW_MODE): limits count, and nothing is denied: the overall code
	// is OK (outcome shadow_denied). As in the peer, a descriptor over its
	// limit keeps the status OVER_LIMIT (with Status.Shadowed), so Envoy's
	// headers, access logs and stats show what would have been limited; a
	// rule's own shadow_mode: true reports its descriptor OK.
	ShadowMode bool
	// ShadowStatusOK, with ShadowMode, reports each over-limit
	// descriptor's status as OK too, as Sluice did before it matched the
	// peer (as if every rule said shadow_mode: true).
	ShadowStatusOK bool
	// QuotaMode treats every descriptor of every request as quota mode
	// (envoyproxy/ratelimit's QUOTA_MODE; see rules.Rule.QuotaMode): a
	// request is denied only when all its limited descriptors are over.
	QuotaMode bool
	// Notify, when set, hears each level of a rule's notify_at that an
	// admitted check or a charge crosses (see Notifier, Crossing). Nil
	// tells nobody, and the engine looks for no crossing.
	Notify Notifier
	// Now is the clock that places calendar quotas (rules.Calendar) in
	// their month or day; nil means time.Now. Give it the store's clock in
	// tests with a fake one.
	Now func() time.Time
}

// Observer sees the decisions of rule-file limits, one call per limit
// decided (limits given in the request are not observed). The engine calls
// it on the hot path: it must be safe for concurrent use, fast, and must
// not retain key. key is the request's entries for the limit as
// "k1=v1.k2=v2"; rule is the rule's ID; denied is true when the limit
// refused the hit (or would have, for a shadow-mode rule), not when a
// failure mode decided. *observe.Tracker satisfies it.
type Observer interface {
	Observe(now time.Time, domain, rule string, key []byte, denied bool)
}

// DefaultConfig returns the configuration `sluice serve` runs with when no
// flags are given.
func DefaultConfig() Config {
	return Config{
		ExpectedReplicas:   1,
		DefaultFailureMode: rules.FailureOpen,
		NearLimitRatio:     0.8,
	}
}

// Validate reports every invalid field, one error each (errors.Join).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.ExpectedReplicas < 1 {
		bad("service: expected replicas: %d, want at least 1", c.ExpectedReplicas)
	}
	switch c.DefaultFailureMode {
	case rules.FailureOpen, rules.FailureClosed, rules.FailureLocal:
	default:
		bad("service: default failure mode: %d, want open, closed or local", c.DefaultFailureMode)
	}
	if !(c.NearLimitRatio > 0 && c.NearLimitRatio <= 1) {
		bad("service: near-limit ratio: %v, want a number in (0, 1]", c.NearLimitRatio)
	}
	return errors.Join(errs...)
}
