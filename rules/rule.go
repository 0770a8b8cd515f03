// Package rules reads rate-limit rule files — envoyproxy/ratelimit's YAML,
// unchanged, plus Sluice's extensions inside rate_limit (algorithm, burst,
// window, failure_mode) — validates them with file:line:field errors, and
// compiles a directory of them into an immutable Snapshot that matches request
// descriptors to rules. It also reads price tables (ParsePrices), which a
// snapshot carries for its money budgets.
package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
)

// Entry is one key/value pair of a request descriptor.
type Entry struct {
	Key   string
	Value string
}

// FailureMode says what a check does with a limit whose store is failing.
type FailureMode uint8

const (
	// FailureDefault: the rule names none; the service's default applies.
	FailureDefault FailureMode = iota
	// FailureOpen allows the request and counts the bypass.
	FailureOpen
	// FailureClosed denies the request.
	FailureClosed
	// FailureLocal falls back to an in-process limiter at the limit divided by
	// the expected number of replicas.
	FailureLocal
)

// String returns the rule-file spelling ("open", "closed", "local", "").
func (m FailureMode) String() string {
	switch m {
	case FailureOpen:
		return "open"
	case FailureClosed:
		return "closed"
	case FailureLocal:
		return "local"
	}
	return ""
}

// ParseFailureMode returns the FailureMode spelled s (case-insensitive):
// "open", "closed" or "local".
func ParseFailureMode(s string) (FailureMode, error) {
	for _, m := range []FailureMode{FailureOpen, FailureClosed, FailureLocal} {
		if strings.EqualFold(m.String(), s) {
			return m, nil
		}
	}
	return FailureDefault, fmt.Errorf("unknown failure mode %q (want open, closed or local)", s)
}

// Rule is one compiled rate_limit: where it is, what it limits, and how.
// Rules are immutable once in a Snapshot; share them freely.
type Rule struct {
	// Domain is the rule file's domain.
	Domain string
	// ID identifies the rule within its domain, stable across reloads while
	// the rule's place in the descriptor tree is unchanged: the path of
	// key[=value] steps from the top, joined by "." (for example
	// "tenant=acme.user"). IDs are unique within a domain: a file in which
	// two rules would get the same ID (keys or values containing '.' or '=')
	// is rejected. The service puts the ID in store keys and, bounded, in
	// metric labels.
	ID string
	// Name is rate_limit.name, possibly empty.
	Name string
	// Limit is the limit to enforce (zero when Unlimited).
	Limit sluice.Limit
	// Unit and RequestsPerUnit are the envoy spelling of the limit, as the
	// file gave it, for RateLimitResponse.current_limit. Unit is "" when the
	// rule used Sluice's window extension instead of unit.
	Unit            string
	RequestsPerUnit uint32
	// Unlimited: requests matching this rule are never limited.
	Unlimited bool
	// ShadowMode: the rule counts, but a denial is reported as allowed.
	ShadowMode bool
	// DetailedMetric: metrics may carry the descriptor values of this rule.
	DetailedMetric bool
	// FailureMode is what to do when the store fails for this rule.
	FailureMode FailureMode
	// Placement is where the rule is decided (rate_limit.placement).
	Placement Placement
	// SubCounters, when above 1, splits the limit over that many counters
	// (rate_limit.sub_counters), each enforcing its share, so that a hot key
	// spreads over Redis Cluster slots. 0 or 1: one counter.
	SubCounters int
	// Penalty, when above zero, keeps a key that went over the limit
	// denied for this long afterwards, whatever its counter says
	// (rate_limit.penalty; answers carry reason penalty).
	Penalty time.Duration
	// Replaces names the rules (by Name) this rule overrides when both match
	// one request. A rule never names itself.
	Replaces []string
	// SettleAfter (rate_limit.settle: after): the rule's hits are costs
	// known only after the fact (Envoy's apply_on_stream_done sends them
	// when the response ends, e.g. LLM tokens used). A check that carries
	// hits charges them whether or not they fit (never denied; the counter
	// may go into debt, as sluice.Charge does), and a check with zero hits
	// is denied while not one unit is left (in debt or used up).
	SettleAfter bool
	// PairBy (rate_limit.pair_by) names the request entry (by key) that
	// carries a request ID pairing a concurrency acquire with its release:
	// the acquire on the request path holds a slot named by the ID, and a
	// later call with the same ID and is_negative_hits (Envoy's
	// apply_on_stream_done at stream end) releases exactly that slot. The
	// entry's value is left out of the counter's key, so every request
	// ID shares the rule's counter. "" when the rule pairs nothing. Only
	// on concurrency rules and with SettleReserve; PairIndex is the
	// entry's index in Path.
	PairBy    string
	PairIndex int
	// Choice (rate_limit.choice) names the group of alternatives the rule
	// belongs to, "" for none. The descriptors of one request whose rules
	// share a group are alternatives (backends, models, tiers), in the
	// order the request gives them; the request's other descriptors are
	// its requirements. The engine tries each alternative in turn with
	// every requirement, all-or-nothing, and charges the first that
	// admits (service.Response.Choices names it); a requirement that is
	// over denies the request without trying further.
	Choice string
	// NotifyAt (rate_limit.notify_at) lists levels in percent of the limit
	// in force (1 to 100, strictly increasing; nil: none): when an
	// admitted check or a charge takes the counter's use from below
	// ceil(level% × limit) to it or above, the engine tells its Notifier,
	// once per period across the fleet (service.Config.Notify). Only on
	// fixed_window (and calendar), sliding_window, sliding_log,
	// token_bucket and gcra rules, without sub-counters or placement
	// hybrid.
	NotifyAt []uint8
	// SettleReserve (rate_limit.settle: reserve): the rule's hits are
	// reserved on the request path and settled at stream end, paired by
	// the PairBy entry (sluice.Op.Lease names the reservation): the first
	// call of a request ID reserves its hits (Reserve when it carries
	// none) and may be denied; the next, with the actual usage as its
	// hits, charges the difference or refunds it, never denied; later
	// ones are ignored. Reserve and SettleWithin (how long a reservation
	// waits for its settle) are set, to their defaults when not given.
	SettleReserve bool
	Reserve       int64
	SettleWithin  time.Duration
	// Script (rate_limit.redis_path: script, and every fixed_window or
	// sliding_window reservation) asks a Redis store with native counters
	// to decide the rule's window with its script (sluice.Op.Script);
	// false for the other algorithms, which have no other path.
	Script bool
	// QuotaMode (the descriptor's quota_mode, as envoyproxy/ratelimit's):
	// this rule's denial alone does not deny the request; a request is
	// denied by its quota-mode rules only when every one of them denies.
	QuotaMode bool
	// Metadata is the descriptor's free-form metadata mapping (maps with
	// string keys, lists, strings, numbers, booleans), returned in Envoy's
	// dynamic metadata when the server is asked to; nil when none.
	Metadata map[string]any
	// File and Line locate the rule's rate_limit in its source.
	File string
	Line int
	// Path is the chain of descriptors from the top of the domain to this
	// rule, one Step per request entry the rule matches: a request reaches
	// the rule only with exactly len(Path) entries whose keys are
	// Path[i].Key, in order.
	Path []Step
	// TenantDepth is 1 + the index in Path of the domain's tenant key (the
	// request entry at TenantDepth-1 names the tenant), or 0 when the rule's
	// path has no tenant key.
	TenantDepth int
	// TenantPath names the rule for per-tenant overrides: its path below
	// the tenant key, as TenantPathOf spells it ("" for the rule at the
	// tenant key). Meaningful only when TenantDepth > 0.
	TenantPath string
	// Tiers holds the limit of each tier the rule gives one for (rule file
	// rate_limit.tiers); nil means the tier has the rule's own Limit.
	Tiers [NumTiers]*TierLimit
	// Usage, when set, makes the rule a money budget (rate_limit.usage
	// and budget): a call costs what its tokens cost at the price table's
	// prices (Prices), in micro-units of its currency, instead of its
	// hits; Limit.Quota is the budget in micro-units (RequestsPerUnit is
	// it too, or 4294967295 when more).
	Usage *Usage
	// Calendar, when set, makes the quota reset at the start of each
	// calendar month or day (rate_limit.calendar); Limit is then a
	// fixed_window with the longest period as its nominal window, and the
	// engine counts each period with Calendar.Limit.
	Calendar *Calendar
}

// Usage says which entries of a money rule's path carry the model and
// each token type's count (rate_limit.usage): an index into Rule.Path, -1
// for a token type not given. Those entries' values are left out of the
// counter's key (Step.Usage).
type Usage struct {
	Model  int
	Tokens [NumTokenTypes]int
	// Line is the line of usage in its file.
	Line int
}

// MatchKind says how one level of a rule's path matches a request entry.
type MatchKind uint8

const (
	// MatchExact: the descriptor names a value; the entry's value equals it.
	MatchExact MatchKind = iota + 1
	// MatchWildcard: the descriptor's value contains '*', each matching any
	// run of characters (including none).
	MatchWildcard
	// MatchAny: the descriptor names only a key; any value matches.
	MatchAny
)

// Step is one level of a rule's path.
type Step struct {
	Key string
	// Value is the descriptor's value: the exact value, the wildcard
	// pattern, or "" for MatchAny.
	Value string
	Kind  MatchKind
	// Shared (envoy's share_threshold, wildcards only): every value matching
	// the pattern shares one counter instead of one counter per value.
	Shared bool
	// Paired: the step is its rule's Rule.PairBy entry; its value names a
	// request, not a counter, so every value shares one counter.
	Paired bool
	// Usage: the step is one of its rule's Rule.Usage entries; its value
	// is a model or a token count, not a counter's, so every value shares
	// one counter.
	Usage bool
}

// Counted reports the value a store key should carry for entry value v at
// this step: "" when the step is Paired, the pattern when it is Shared,
// else v.
func (s *Step) Counted(v string) string {
	if s.Paired || s.Usage {
		return ""
	}
	if s.Shared {
		return s.Value
	}
	return v
}

// NativeAlgorithm reports whether a rule with algorithm a has a native
// path on a Redis store with native counters (store/redis
// Options.NativeFixedWindow and NativeSlidingWindow): rate_limit.redis_path
// may say native only for these.
func NativeAlgorithm(a sluice.Algorithm) bool {
	return a == sluice.FixedWindow || a == sluice.SlidingWindow
}
