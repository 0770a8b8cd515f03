package service

import "time"

// Outcomes, the values of the outcome label of sluice_decisions_total.
const (
	// OutcomeAllowed: the store admitted the hit (or the rule is unlimited).
	OutcomeAllowed = "allowed"
	// OutcomeDenied: the store denied the hit.
	OutcomeDenied = "denied"
	// OutcomeShadowDenied: the rule would have denied, but is in shadow mode.
	OutcomeShadowDenied = "shadow_denied"
	// OutcomeFailedOpen: the store failed and the failure mode allowed.
	OutcomeFailedOpen = "failed_open"
	// OutcomeFailedClosed: the store failed and the failure mode denied.
	OutcomeFailedClosed = "failed_closed"
	// OutcomeLocalAllowed: the store failed and the local fallback admitted.
	OutcomeLocalAllowed = "local_allowed"
	// OutcomeLocalDenied: the store failed and the local fallback denied.
	OutcomeLocalDenied = "local_denied"
	// OutcomeQuotaDenied: a quota-mode rule (rules.Rule.QuotaMode, or
	// Config.QuotaMode) was over its limit; its status is OVER_LIMIT, but the
	// request was denied for it only if every quota-mode limit of the
	// request was over (then the request's other limits charged nothing).
	OutcomeQuotaDenied = "quota_denied"
)

const (
	outAllowed = iota
	outDenied
	outShadowDenied
	outFailedOpen
	outFailedClosed
	outLocalAllowed
	outLocalDenied
	outQuotaDenied
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	OutcomeAllowed, OutcomeDenied, OutcomeShadowDenied, OutcomeFailedOpen,
	OutcomeFailedClosed, OutcomeLocalAllowed, OutcomeLocalDenied, OutcomeQuotaDenied,
}

// Metrics receives what an Engine counts. *promstats.Metrics (package
// service/promstats) keeps them in Prometheus; nil, in New, discards them.
// Implementations must be safe for concurrent use and cheap: Rule's
// recorders and Decision run on every check.
//
// Label values are bounded by the rule files: domain is a domain some rule
// file declares, rule a rule ID (or "override" for limits given in the
// request). Descriptor values from requests become label values only for
// rules with detailed_metric: true, whose rule label is then the request's
// entries ("tenant=acme.route=/x"). outcome is one of the Outcome* values.
type Metrics interface {
	// Rule returns the recorder of one rule's decisions: outcome, and
	// whether an allowed hit used more than Config.NearLimitRatio of the
	// limit. The engine calls it once per rule and rule snapshot, so the
	// recorder may hold ready-made series.
	Rule(domain, rule string) func(outcome string, near bool)
	// DropRule says a reload removed a rule: its series may go.
	DropRule(domain, rule string)
	// Decision records a decision not made by a rule's own recorder: of a
	// limit given in the request (rule "override") or of a detailed_metric
	// rule (rule = the request's entries).
	Decision(domain, rule, outcome string, near bool)
	// StoreError counts a check the store did not decide: reason is
	// "error", "timeout" or "breaker_open".
	StoreError(reason string)
	// Abandoned counts a check whose caller gave up before the store
	// answered (backpressure, not a store failure).
	Abandoned()
	// CheckDuration records how long one Check took, store call included.
	CheckDuration(d time.Duration)
	// Tier records one decision of a tenant's rule by the tenant's tier
	// ("free", "pro", "enterprise", "custom"): quota use by tier.
	Tier(tier, outcome string)
	// Adjusted counts after-the-fact changes in a domain (one the rule
	// files declare): n units charged or asked back (action ActionCharge,
	// ActionRefund; Engine.Charge), or n counters reset (ActionReset;
	// Engine.Reset, Engine.ResetTenant).
	Adjusted(domain, action string, n uint64)
}

// discard is the Metrics of an Engine given none.
type discard struct{}

func (discard) Rule(string, string) func(string, bool) { return func(string, bool) {} }
func (discard) DropRule(string, string)                {}
func (discard) Decision(string, string, string, bool)  {}
func (discard) StoreError(string)                      {}
func (discard) Abandoned()                             {}
func (discard) CheckDuration(time.Duration)            {}
func (discard) Tier(string, string)                    {}
func (discard) Adjusted(string, string, uint64)        {}
