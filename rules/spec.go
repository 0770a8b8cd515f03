package rules

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/store/stack"
)

// Spec is a limit as written: a rule file's rate_limit, one tier's limit
// under it, a tenant's override, or a limit given in a request. Every
// source decodes into it — rule files with the parser's walker
// (parser.spec), JSON bodies by decoding (internal/strictjson) a struct
// that holds a Spec — and one validator (Spec.Rule, Spec.TierLimit) checks
// it and compiles it, so that a limit means the same wherever it is written
// and its problems read the same. A source that takes only some fields
// says which in its Use.
//
// The JSON names are the rule files' keys. A field counts as given when
// its bit is in Given (the YAML decoder sets it for every key written) or
// when it is not its zero value (JSON leaves Given zero: there, an absent
// field and a zero one mean the same).
type Spec struct {
	// RequestsPerUnit is the quota, from 0 to 4294967295.
	RequestsPerUnit int64 `json:"requests_per_unit"`
	// Unit is an envoy unit (second … year); Window a duration ("90s"):
	// one of the two, or Calendar.
	Unit   string `json:"unit,omitempty"`
	Window string `json:"window,omitempty"`
	// Algorithm is a sluice algorithm name; "" takes the default (a rule
	// file's Options.DefaultAlgorithm, or a tier's or override's rule).
	Algorithm string `json:"algorithm,omitempty"`
	// Burst is the bucket of token_bucket, gcra and leaky_bucket.
	Burst int64 `json:"burst,omitempty"`
	// Unlimited: matching requests are never limited.
	Unlimited bool `json:"unlimited,omitempty"`
	// Name names the rule (for replaces and current_limit).
	Name string `json:"name,omitempty"`
	// Replaces names the rules this one overrides.
	Replaces []Replace `json:"replaces,omitempty"`
	// FailureMode is open, closed or local.
	FailureMode string `json:"failure_mode,omitempty"`
	// Placement is global, hybrid or local.
	Placement string `json:"placement,omitempty"`
	// SubCounters splits the limit over that many counters.
	SubCounters int64 `json:"sub_counters,omitempty"`
	// Tiers gives a limit per tier name (free, pro, enterprise).
	Tiers map[string]*Spec `json:"tiers,omitempty"`
	// Calendar (month or day) and TimeZone (IANA) make a calendar quota.
	Calendar string `json:"calendar,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	// Penalty keeps a key denied this long after it went over.
	Penalty string `json:"penalty,omitempty"`
	// Settle is before, after or reserve.
	Settle string `json:"settle,omitempty"`
	// PairBy names the entry carrying a request ID (a concurrency rule, or
	// any with settle: reserve).
	PairBy string `json:"pair_by,omitempty"`
	// Choice names a group of alternatives (first with quota): the
	// request's descriptors matching rules of one group are tried in
	// request order, the first that admits is charged (see Rule.Choice).
	Choice string `json:"choice,omitempty"`
	// Usage makes the rule count money: it names the entries carrying the
	// model ("model") and each token type's count ("input", "output",
	// "cached_read", "cache_write", "reasoning"); a call costs what its
	// tokens cost at the price table's prices. Budget is then the limit.
	Usage map[string]string `json:"usage,omitempty"`
	// Budget is a money rule's limit, an amount of the price table's
	// currency as a decimal ("250.00", at most 6 decimals), in place of
	// RequestsPerUnit.
	Budget string `json:"budget,omitempty"`
	// NotifyAt lists the levels, in percent of the limit (1 to 100,
	// strictly increasing, at most MaxNotifyLevels), whose crossing is
	// told once per period (Rule.NotifyAt).
	NotifyAt []int64 `json:"notify_at,omitempty"`
	// Reserve is what a reservation takes when its call carries no hits
	// (settle: reserve only).
	Reserve int64 `json:"reserve,omitempty"`
	// SettleWithin is how long a reservation waits for its settle, a
	// duration (settle: reserve only).
	SettleWithin string `json:"settle_within,omitempty"`
	// RedisPath is how a Redis store with native counters decides the
	// rule: "native" (its default for fixed_window and sliding_window) or
	// "script" (Rule.Script).
	RedisPath string `json:"redis_path,omitempty"`

	// Given holds a bit for each field the source wrote (see Spec).
	Given Field `json:"-"`
	// Line is where the Spec is in its file (0 when not from a file).
	Line int `json:"-"`
	// lines holds the line of each field's value; replLines of each
	// replaces name.
	lines     [numFields]int
	replLines []int
	// usageLines holds the line of each usage key's value.
	usageLines map[string]int
}

// Replace is one entry of Spec.Replaces.
type Replace struct {
	Name string `json:"name"`
}

// Field is a set of Spec fields, one bit each, named by their keys.
type Field uint32

// The fields of a Spec.
const (
	FieldUnit Field = 1 << iota
	FieldRequestsPerUnit
	FieldUnlimited
	FieldName
	FieldReplaces
	FieldAlgorithm
	FieldBurst
	FieldWindow
	FieldFailureMode
	FieldPlacement
	FieldSubCounters
	FieldTiers
	FieldCalendar
	FieldTimeZone
	FieldPenalty
	FieldSettle
	FieldPairBy
	FieldChoice
	FieldUsage
	FieldBudget
	FieldNotifyAt
	FieldReserve
	FieldSettleWithin
	FieldRedisPath
	numFieldsBit
)

// numFields is the number of fields; a field added to the list above
// without raising it does not compile (the check below).
const numFields = 24

var _ = [1]struct{}{}[numFieldsBit>>numFields-1]

// FieldAll is every field: a rule file's rate_limit.
const FieldAll = numFieldsBit - 1

// FieldLimit is what a tier's limit and a tenant's override may give.
const FieldLimit = FieldRequestsPerUnit | FieldUnit | FieldWindow | FieldAlgorithm | FieldBurst

// notUnlimited is what an unlimited rule may not give.
const notUnlimited = FieldLimit | FieldPlacement | FieldSubCounters | FieldTiers | FieldCalendar | FieldTimeZone | FieldPenalty | FieldSettle | FieldPairBy | FieldChoice | FieldUsage | FieldBudget | FieldNotifyAt |
	FieldReserve | FieldSettleWithin | FieldRedisPath

// fieldKeys names each field (by bit index), in rate_limit's key order.
var fieldKeys = [numFields]string{
	"unit", "requests_per_unit", "unlimited", "name", "replaces",
	"algorithm", "burst", "window", "failure_mode", "placement", "sub_counters",
	"tiers", "calendar", "time_zone", "penalty", "settle", "pair_by",
	"choice",
	"usage", "budget",
	"notify_at",
	"reserve", "settle_within",
	"redis_path",
}

func (f Field) index() int {
	for i := range numFields {
		if f == 1<<i {
			return i
		}
	}
	return -1
}

// String names the fields in f by their keys, joined by ", ".
func (f Field) String() string {
	var names []string
	for i := range numFields {
		if f&(1<<i) != 0 {
			names = append(names, fieldKeys[i])
		}
	}
	return strings.Join(names, ", ")
}

func fieldOfKey(key string) Field {
	for i, k := range fieldKeys {
		if k == key {
			return 1 << i
		}
	}
	return 0
}

// has reports whether field f was given.
func (s *Spec) has(f Field) bool {
	if s.Given&f != 0 {
		return true
	}
	switch f {
	case FieldUnit:
		return s.Unit != ""
	case FieldRequestsPerUnit:
		return s.RequestsPerUnit != 0
	case FieldUnlimited:
		return s.Unlimited
	case FieldName:
		return s.Name != ""
	case FieldReplaces:
		return len(s.Replaces) > 0
	case FieldAlgorithm:
		return s.Algorithm != ""
	case FieldBurst:
		return s.Burst != 0
	case FieldWindow:
		return s.Window != ""
	case FieldFailureMode:
		return s.FailureMode != ""
	case FieldPlacement:
		return s.Placement != ""
	case FieldSubCounters:
		return s.SubCounters != 0
	case FieldTiers:
		return len(s.Tiers) > 0
	case FieldCalendar:
		return s.Calendar != ""
	case FieldTimeZone:
		return s.TimeZone != ""
	case FieldPenalty:
		return s.Penalty != ""
	case FieldSettle:
		return s.Settle != ""
	case FieldPairBy:
		return s.PairBy != ""
	case FieldChoice:
		return s.Choice != ""
	case FieldUsage:
		return len(s.Usage) > 0
	case FieldBudget:
		return s.Budget != ""
	case FieldNotifyAt:
		return len(s.NotifyAt) > 0
	case FieldReserve:
		return s.Reserve != 0
	case FieldSettleWithin:
		return s.SettleWithin != ""
	case FieldRedisPath:
		return s.RedisPath != ""
	}
	return false
}

// line returns the line of field f's value, or of the Spec.
func (s *Spec) line(f Field) int {
	if i := f.index(); i >= 0 && s.lines[i] > 0 {
		return s.lines[i]
	}
	return s.Line
}

// SpecError is one problem of a Spec: the field (its key, or a path below
// the Spec such as "tiers.pro.unit" or "replaces[1].name"; "" for the
// Spec as a whole), its line when the Spec came from a file, and what is
// wrong.
type SpecError struct {
	Field string
	Line  int
	Msg   string
}

// Error returns "field: msg".
func (e SpecError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// SpecErrors is every problem of a Spec, in the order found.
type SpecErrors []SpecError

// Error returns the problems, one per line.
func (e SpecErrors) Error() string {
	msgs := make([]string, len(e))
	for i, p := range e {
		msgs[i] = p.Error()
	}
	return strings.Join(msgs, "\n")
}

// Use says where a Spec is written: which fields that source takes, which
// it requires, and the rule it falls back on.
type Use struct {
	// What names the place in messages ("a tier", "an override", "a
	// request's limit"); "" for a rule.
	What string
	// Allowed is the set of fields the source takes; a field given outside
	// it is refused. Zero means FieldAll.
	Allowed Field
	// RequireWindow: give a unit or window (a rule requires one of them,
	// or calendar, in any case; a tier takes its rule's when it gives
	// neither).
	RequireWindow bool
	// RequireQuota: requests_per_unit must be given.
	RequireQuota bool
	// Algorithm is the algorithm of a Spec that names none, when Base is
	// nil (0: fixed_window).
	Algorithm sluice.Algorithm
	// Base is the rule a tier or override changes: its algorithm, window
	// and calendar are the defaults. Nil for a rule's own limit.
	Base *Rule
	// Path is a rule's descriptor path (for pair_by and usage).
	Path []Step
	// NoConcurrency refuses algorithm: concurrency (tiers and overrides:
	// a lease is released against the rule's own limit).
	NoConcurrency bool
}

// RequestLimit is the Use of a limit given in a request (envoy's
// RateLimitDescriptor.limit, the HTTP API's descriptor limit):
// requests_per_unit and a unit, nothing else.
var RequestLimit = Use{What: "a request's limit", Allowed: FieldRequestsPerUnit | FieldUnit, RequireWindow: true}

// OverrideOf is the Use of a tenant's override of rule base: a limit
// (FieldLimit) with a unit or window of its own, unless base is a
// calendar quota, whose periods it then counts.
func OverrideOf(base *Rule) Use {
	return Use{What: "an override", Allowed: FieldLimit, RequireWindow: true, Base: base, NoConcurrency: true}
}

// checker collects a Spec's problems.
type checker struct {
	s    *Spec
	errs SpecErrors
}

func (c *checker) bad(f Field, format string, args ...any) {
	key := ""
	if i := f.index(); i >= 0 {
		key = fieldKeys[i]
	}
	c.errs = append(c.errs, SpecError{Field: key, Line: c.s.line(f), Msg: fmt.Sprintf(format, args...)})
}

// count checks a whole-number field against [0, max].
func (c *checker) count(f Field, v int64, max int64) bool {
	if v < 0 || v > max {
		c.bad(f, "want a whole number from 0 to %d, got \"%d\"", max, v)
		return false
	}
	return true
}

// limitPart is what every use of a Spec shares: the limit.
type limitPart struct {
	lim  sluice.Limit
	rpu  uint32
	unit string
	// calendar: the limit counts Base's calendar periods.
	calendar bool
}

// refuse reports every given field outside u's set.
func (c *checker) refuse(u Use) {
	allowed := u.Allowed
	if allowed == 0 {
		allowed = FieldAll
	}
	for i := range numFields {
		f := Field(1) << i
		if allowed&f == 0 && c.s.has(f) {
			c.bad(f, "not allowed in %s (want only %s)", u.What, allowed)
		}
	}
}

// fields reads every given field of the limit on its own, before the
// checks of fields together.
func (c *checker) fields(u Use, p *limitPart, alg *sluice.Algorithm) {
	s := c.s
	if s.has(FieldUnit) {
		if w, ok := UnitWindow(s.Unit); ok {
			p.unit, p.lim.Window = strings.ToLower(s.Unit), w
		} else {
			c.bad(FieldUnit, "unknown unit %q (want one of %s)", echo(s.Unit), unitList)
		}
	}
	if s.has(FieldRequestsPerUnit) && c.count(FieldRequestsPerUnit, s.RequestsPerUnit, math.MaxUint32) {
		p.rpu, p.lim.Quota = uint32(s.RequestsPerUnit), s.RequestsPerUnit
	}
	if s.has(FieldAlgorithm) {
		a, err := sluice.ParseAlgorithm(echo(s.Algorithm))
		switch {
		case err != nil:
			c.bad(FieldAlgorithm, "%v", err)
		case a == sluice.Concurrency && u.NoConcurrency:
			c.bad(FieldAlgorithm, "concurrency is not available for %s", u.What)
		default:
			*alg = a
		}
	}
	if s.has(FieldBurst) && c.count(FieldBurst, s.Burst, algorithm.MaxExact) {
		p.lim.Burst = s.Burst
	}
	if s.has(FieldWindow) {
		w, err := time.ParseDuration(s.Window)
		switch {
		case err != nil:
			c.bad(FieldWindow, "want a duration such as 90s or 1h30m, got %q", echo(s.Window))
		case w <= 0:
			c.bad(FieldWindow, "must be positive, got %q", s.Window)
		default:
			p.unit, p.lim.Window = "", w
		}
	}
}

// window checks unit, window and calendar together and sets the window
// of a Spec that gives none.
func (c *checker) window(u Use, p *limitPart, alg sluice.Algorithm) {
	s := c.s
	unit, window := s.has(FieldUnit), s.has(FieldWindow)
	switch {
	case unit && window:
		c.bad(FieldWindow, "give unit or window, not both")
	case unit || window:
	case u.Base != nil && u.Base.Calendar != nil:
		p.calendar, p.lim.Window, p.unit = true, u.Base.Limit.Window, u.Base.Unit
		if alg != sluice.FixedWindow {
			c.bad(FieldAlgorithm, "a calendar quota is a fixed_window; %v cannot reset at calendar boundaries", alg)
		}
	case u.RequireWindow:
		if u.Allowed&FieldWindow == 0 {
			c.bad(FieldUnit, "required")
		} else {
			c.bad(FieldUnit, "required (or window)")
		}
	case u.Base != nil:
		p.lim.Window, p.unit = u.Base.Limit.Window, u.Base.Unit
	}
}

// finish checks the limit (sluice.Limit.Validate), naming the field each
// of its problems comes from.
func (c *checker) finish(p *limitPart, alg sluice.Algorithm) bool {
	s := c.s
	p.lim.Algorithm = alg
	err := p.lim.Validate()
	if err == nil {
		return true
	}
	fes := stack.FieldErrors(err)
	if len(fes) == 0 {
		c.errs = append(c.errs, SpecError{Line: s.Line, Msg: err.Error()})
		return false
	}
	for _, fe := range fes {
		var f Field
		switch fe.Field {
		case "window":
			f = FieldWindow
			if s.has(FieldUnit) || !s.has(FieldWindow) {
				f = FieldUnit
			}
		case "quota":
			f = FieldRequestsPerUnit
		case "burst":
			f = FieldBurst
		case "algorithm":
			f = FieldAlgorithm
		}
		if f == 0 {
			c.errs = append(c.errs, SpecError{Line: s.Line, Msg: fe.Error()})
			continue
		}
		c.bad(f, "%s", fe.Msg)
	}
	return false
}

// CheckFields checks what s says without the rule it will change: each
// field on its own, the fields u refuses, and unit beside window. It is
// the part of TierLimit that needs no u.Base, for a source that decodes a
// limit before it knows the rule (the admin API's overrides), so that
// their problems are reported with the body's; TierLimit checks them
// again, with the rest. The errors are SpecErrors.
func (s *Spec) CheckFields(u Use) error {
	if u.Allowed == 0 {
		u.Allowed = FieldLimit
	}
	c := &checker{s: s}
	c.refuse(u)
	var p limitPart
	alg := sluice.FixedWindow
	c.fields(u, &p, &alg)
	if s.has(FieldUnit) && s.has(FieldWindow) {
		c.bad(FieldWindow, "give unit or window, not both")
	}
	if len(c.errs) > 0 {
		return c.errs
	}
	return nil
}

// TierLimit checks s as the limit of a tier, a tenant's override or a
// request (u says which: u.Base is the rule it changes, nil for a
// request's own limit) and compiles it. The errors are SpecErrors.
func (s *Spec) TierLimit(u Use) (*TierLimit, error) {
	if u.Allowed == 0 {
		u.Allowed = FieldLimit
	}
	c := &checker{s: s}
	c.refuse(u)
	var p limitPart
	alg := u.Algorithm
	if u.Base != nil {
		alg = u.Base.Limit.Algorithm
	}
	if alg == 0 {
		alg = sluice.FixedWindow
	}
	c.fields(u, &p, &alg)
	c.window(u, &p, alg)
	if u.RequireQuota && !s.has(FieldRequestsPerUnit) {
		c.bad(FieldRequestsPerUnit, "required")
	}
	if s.has(FieldBurst) && !stack.HasBurst(alg) {
		c.bad(FieldBurst, "%v has no burst; remove it", alg)
	}
	if len(c.errs) > 0 || !c.finish(&p, alg) {
		return nil, c.errs
	}
	return &TierLimit{Limit: p.lim, RequestsPerUnit: p.rpu, Unit: p.unit, Line: s.Line, Calendar: p.calendar}, nil
}

// Rule checks s as a rule file's rate_limit on path u.Path and compiles
// it into the rule's limit fields (Name, Limit, Unit, RequestsPerUnit,
// Unlimited, FailureMode, Placement, SubCounters, Penalty, Replaces,
// SettleAfter, PairBy, PairIndex, SettleReserve, Reserve, SettleWithin,
// Choice, Usage, NotifyAt, Calendar and Tiers; Line is
// s.Line). A money rule (usage and budget) has its budget, in micro-units,
// as Limit.Quota.
// The errors are SpecErrors.
func (s *Spec) Rule(u Use) (*Rule, error) {
	c := &checker{s: s}
	c.refuse(u)
	r := &Rule{Line: s.Line, Name: s.Name, Unlimited: s.Unlimited}
	var p limitPart
	alg := u.Algorithm
	if alg == 0 {
		alg = sluice.FixedWindow
	}
	c.fields(u, &p, &alg)
	var cal Calendar
	c.other(r, &cal)
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	if r.Unlimited {
		for i := range numFields {
			f := Field(1) << i
			if notUnlimited&f != 0 && s.has(f) {
				c.bad(f, "not allowed with unlimited: true")
			}
		}
		if len(c.errs) > 0 {
			return nil, c.errs
		}
		return r, nil
	}
	valid := true
	if s.has(FieldCalendar) || s.has(FieldTimeZone) {
		if !c.calendar(&cal, &alg) {
			return nil, c.errs
		}
		r.Calendar, p.unit, p.lim.Window = &cal, cal.Period.String(), cal.nominal()
	} else {
		switch {
		case s.has(FieldUnit) && s.has(FieldWindow):
			c.bad(FieldWindow, "give unit or window, not both")
			return nil, c.errs
		case !s.has(FieldUnit) && !s.has(FieldWindow):
			c.errs = append(c.errs, SpecError{Field: "unit", Line: s.Line, Msg: "required (or window, or unlimited: true)"})
			valid = false
		}
	}
	switch {
	case s.has(FieldBudget) || s.has(FieldUsage):
		valid = c.money(r, &p, alg, u.Path) && valid
	case !s.has(FieldRequestsPerUnit):
		c.errs = append(c.errs, SpecError{Field: "requests_per_unit", Line: s.Line, Msg: "required (0 denies every request)"})
		valid = false
	}
	r.Unit, r.RequestsPerUnit = p.unit, p.rpu
	if s.has(FieldBurst) && !stack.HasBurst(alg) {
		c.bad(FieldBurst, "%v has no burst; remove it or use token_bucket, gcra or leaky_bucket", alg)
		valid = false
	}
	if s.has(FieldPlacement) && r.Placement == PlacementHybrid && !HybridAlgorithm(alg) {
		c.bad(FieldPlacement, "hybrid placement supports fixed_window, gcra and token_bucket, not %v", alg)
		valid = false
	}
	switch s.RedisPath {
	case "", "script":
		// Every algorithm has the script path; the windows another.
		r.Script = r.Script || NativeAlgorithm(alg) && (s.RedisPath == "script" || s.Settle == "reserve")
	case "native":
		if !NativeAlgorithm(alg) {
			c.bad(FieldRedisPath, "only fixed_window and sliding_window have a native path, not %v; remove it", alg)
			valid = false
		} else if s.Settle == "reserve" {
			c.bad(FieldRedisPath, "a reservation (settle: reserve) is kept by the script path; remove redis_path or use script")
			valid = false
		}
	default:
		c.bad(FieldRedisPath, "unknown path %q (want native or script)", echo(s.RedisPath))
		valid = false
	}
	if r.PairBy != "" {
		valid = c.pairBy(r, alg, u.Path) && valid
	}
	if r.Choice != "" && r.PairBy != "" {
		c.bad(FieldChoice, "not allowed with pair_by (a paired slot is released by its request ID, not chosen)")
		valid = false
	}
	if s.has(FieldNotifyAt) {
		valid = c.notifyAt(r, alg) && valid
	}
	valid = c.reserve(r, alg) && valid
	if r.SettleAfter && alg == sluice.Concurrency {
		c.bad(FieldSettle, "concurrency limits count requests in flight; they cannot settle after")
		valid = false
	}
	if r.SubCounters > 1 && alg == sluice.Concurrency {
		c.bad(FieldSubCounters, "concurrency limits cannot be split")
		valid = false
	}
	if r.SubCounters > 1 && int64(r.RequestsPerUnit) < int64(r.SubCounters) {
		c.bad(FieldSubCounters, "%d sub-counters of requests_per_unit %d would leave some with no quota", r.SubCounters, r.RequestsPerUnit)
		valid = false
	}
	if s.has(FieldPenalty) {
		switch {
		case alg == sluice.Concurrency:
			c.bad(FieldPenalty, "not allowed with algorithm concurrency (a slot is given back, not exceeded)")
			valid = false
		case r.SubCounters > 1:
			c.bad(FieldPenalty, "not allowed with sub_counters")
			valid = false
		case r.Placement == PlacementHybrid:
			c.bad(FieldPenalty, "not allowed with placement hybrid")
			valid = false
		}
	}
	if !valid {
		return nil, c.errs
	}
	if !c.finish(&p, alg) {
		return nil, c.errs
	}
	r.Limit = p.lim
	if s.has(FieldTiers) && !c.tiers(r) {
		return nil, c.errs
	}
	return r, nil
}

// other reads the fields of a rule beyond its limit.
func (c *checker) other(r *Rule, cal *Calendar) {
	s := c.s
	if s.has(FieldPlacement) {
		var ok bool
		if r.Placement, ok = parsePlacement(s.Placement); !ok {
			c.bad(FieldPlacement, "unknown placement %q (want global, hybrid or local)", echo(s.Placement))
		}
	}
	if s.has(FieldSubCounters) && c.count(FieldSubCounters, s.SubCounters, MaxSubCounters) {
		r.SubCounters = int(s.SubCounters)
	}
	if s.has(FieldPenalty) {
		d, err := time.ParseDuration(s.Penalty)
		switch {
		case err != nil:
			c.bad(FieldPenalty, "want a duration such as 10m, got %q", echo(s.Penalty))
		case d < time.Second || d > MaxPenalty:
			c.bad(FieldPenalty, "%v: want 1s to %v", d, MaxPenalty)
		default:
			r.Penalty = d
		}
	}
	if s.has(FieldCalendar) {
		switch strings.ToLower(s.Calendar) {
		case "month":
			cal.Period = Month
		case "day":
			cal.Period = Day
		default:
			c.bad(FieldCalendar, "unknown calendar period %q (want month or day)", echo(s.Calendar))
		}
	}
	if s.has(FieldTimeZone) {
		loc, err := time.LoadLocation(s.TimeZone)
		if err != nil || s.TimeZone == "" || strings.EqualFold(s.TimeZone, "local") {
			c.bad(FieldTimeZone, "unknown time zone %q (want an IANA name such as UTC or Europe/Berlin)", echo(s.TimeZone))
		} else {
			cal.Location = loc
		}
	}
	if s.has(FieldSettle) {
		switch strings.ToLower(s.Settle) {
		case "before":
		case "after":
			r.SettleAfter = true
		case "reserve":
			r.SettleReserve = true
		default:
			c.bad(FieldSettle, "unknown settle %q (want before, after or reserve)", echo(s.Settle))
		}
	}
	if s.has(FieldReserve) && c.count(FieldReserve, s.Reserve, algorithm.MaxExact) {
		r.Reserve = s.Reserve
	}
	if s.has(FieldSettleWithin) {
		d, err := time.ParseDuration(s.SettleWithin)
		switch {
		case err != nil:
			c.bad(FieldSettleWithin, "want a duration such as 1h, got %q", echo(s.SettleWithin))
		case d < time.Second || d > stack.MaxWindow || d%time.Millisecond != 0:
			c.bad(FieldSettleWithin, "%v: want whole milliseconds from 1s to %v", d, stack.MaxWindow)
		default:
			r.SettleWithin = d
		}
	}
	if s.has(FieldPairBy) {
		if r.PairBy = s.PairBy; r.PairBy == "" {
			c.bad(FieldPairBy, "must name a descriptor key")
		}
	}
	if s.has(FieldChoice) {
		if r.Choice = s.Choice; !validChoice(r.Choice) {
			c.bad(FieldChoice, "want a group name: a lowercase letter, then up to %d lowercase letters, digits, '_', '-' or '.', got %q", MaxChoice-1, echo(s.Choice))
		}
	}
	if s.has(FieldFailureMode) {
		var err error
		if r.FailureMode, err = ParseFailureMode(echo(s.FailureMode)); err != nil {
			c.bad(FieldFailureMode, "%v", err)
		}
	}
	for i, rp := range s.Replaces {
		line := s.line(FieldReplaces)
		if i < len(s.replLines) {
			line = s.replLines[i]
		}
		f := fmt.Sprintf("replaces[%d].name", i)
		switch rp.Name {
		case "":
			c.errs = append(c.errs, SpecError{Field: f, Line: line, Msg: "must not be empty"})
		case r.Name:
			c.errs = append(c.errs, SpecError{Field: f, Line: line, Msg: fmt.Sprintf("names this rule itself (%q); a rule cannot replace itself", rp.Name)})
		default:
			r.Replaces = append(r.Replaces, rp.Name)
		}
	}
}

// MaxChoice is the longest rate_limit.choice group name, in bytes.
const MaxChoice = 64

// validChoice reports whether name is a choice group name: a lowercase
// ASCII letter, then lowercase letters, digits, '_', '-' or '.', at most
// MaxChoice bytes in all. It is a key of the answers' JSON and dynamic
// metadata, and of the Sluice-Choice header (a structured-field
// dictionary, RFC 9651, whose keys are spelled so).
func validChoice(name string) bool {
	if name == "" || len(name) > MaxChoice || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return true
}

// calendar checks a rate_limit with calendar or time_zone: a calendar
// period, no unit or window, fixed_window only. It sets the algorithm.
func (c *checker) calendar(cal *Calendar, alg *sluice.Algorithm) bool {
	s := c.s
	if !s.has(FieldCalendar) {
		c.bad(FieldTimeZone, "only with calendar: month or day")
		return false
	}
	good := true
	for _, f := range []Field{FieldUnit, FieldWindow} {
		if s.has(f) {
			c.bad(f, "not allowed with calendar (the period is the window)")
			good = false
		}
	}
	if s.has(FieldAlgorithm) && *alg != sluice.FixedWindow {
		c.bad(FieldAlgorithm, "a calendar quota is a fixed_window; %v cannot reset at calendar boundaries", *alg)
		good = false
	}
	*alg = sluice.FixedWindow
	if cal.Location == nil {
		cal.Location = time.UTC
	}
	return good
}

// MaxNotifyLevels bounds the levels of rate_limit.notify_at.
const MaxNotifyLevels = 8

// notifyAt checks rate_limit.notify_at against the rule's algorithm,
// sub-counters and placement, and sets r.NotifyAt. Only the algorithms
// whose Result says how much of the limit is used now (fixed_window and
// calendar quotas, sliding_window, sliding_log, token_bucket, gcra) can
// tell a level crossed: a concurrency limit counts requests in flight and
// a leaky_bucket its queue. A rule split over sub-counters sees one
// counter's share, and a hybrid one an allotment, not the whole budget.
func (c *checker) notifyAt(r *Rule, alg sluice.Algorithm) bool {
	s := c.s
	levels := s.NotifyAt
	switch {
	case len(levels) == 0:
		c.bad(FieldNotifyAt, "want a list of 1 to %d percentages such as [50, 80, 100], got none", MaxNotifyLevels)
		return false
	case len(levels) > MaxNotifyLevels:
		c.bad(FieldNotifyAt, "%d levels; want at most %d", len(levels), MaxNotifyLevels)
		return false
	}
	good := true
	for i, l := range levels {
		switch {
		case l < 1 || l > 100:
			c.bad(FieldNotifyAt, "level %d: want a percentage from 1 to 100, got %d", i+1, l)
			good = false
		case i > 0 && l <= levels[i-1]:
			c.bad(FieldNotifyAt, "level %d: %d after %d; want the levels strictly increasing", i+1, l, levels[i-1])
			good = false
		}
	}
	switch {
	case alg == sluice.Concurrency || alg == sluice.LeakyBucket:
		c.bad(FieldNotifyAt, "%v does not count what a period used; notify_at takes fixed_window (or calendar), sliding_window, sliding_log, token_bucket or gcra", alg)
		good = false
	case r.SubCounters > 1:
		c.bad(FieldNotifyAt, "not allowed with sub_counters (each counter sees its share, not the budget)")
		good = false
	case r.Placement == PlacementHybrid:
		c.bad(FieldNotifyAt, "not allowed with placement hybrid (an instance sees its allotment, not the budget)")
		good = false
	}
	if !good {
		return false
	}
	r.NotifyAt = make([]uint8, len(levels))
	for i, l := range levels {
		r.NotifyAt[i] = uint8(l)
	}
	return true
}

// pairBy checks r.PairBy against the rule's algorithm and path, and sets
// r.PairIndex.
func (c *checker) pairBy(r *Rule, alg sluice.Algorithm, path []Step) bool {
	if alg != sluice.Concurrency && !r.SettleReserve {
		c.bad(FieldPairBy, "only a concurrency limit (a slot and its release) or settle: reserve (a reservation and its settle) pairs by a request ID; this is %v without settle: reserve", alg)
		return false
	}
	for i := range path {
		if path[i].Key != r.PairBy {
			continue
		}
		if path[i].Kind != MatchAny {
			c.bad(FieldPairBy, "the descriptor of key %q names a value; the entry carrying a request ID must match any value (give its key only)", r.PairBy)
			return false
		}
		r.PairIndex = i
		return true
	}
	c.bad(FieldPairBy, "key %q is not on this rule's path (%s)", r.PairBy, pathKeys(path))
	return false
}

// money checks the usage and budget of a money rule r on path and sets
// r.Usage and the quota (the budget in micro-units).
func (c *checker) money(r *Rule, p *limitPart, alg sluice.Algorithm, path []Step) bool {
	s := c.s
	good := true
	switch {
	case !s.has(FieldUsage):
		c.bad(FieldBudget, "only with usage (the entries a call's cost is computed from)")
		return false
	case !s.has(FieldBudget):
		c.bad(FieldUsage, "give budget (an amount of the price table's currency) with usage")
		return false
	}
	if s.has(FieldRequestsPerUnit) {
		c.bad(FieldRequestsPerUnit, "give budget or requests_per_unit, not both")
		good = false
	}
	if alg == sluice.Concurrency {
		c.bad(FieldBudget, "a concurrency limit counts requests in flight, not money")
		good = false
	}
	if s.has(FieldTiers) {
		c.bad(FieldTiers, "not available with budget")
		good = false
	}
	if !r.SettleAfter && alg != sluice.Concurrency {
		// settle: before would deny a call's cost once it is spent,
		// and count nothing of it.
		c.bad(FieldBudget, "a call's cost is known when it ends: give settle: after (its charge is never denied; the request path is a look)")
		good = false
	}
	if q, err := ParseBudget(s.Budget); err != nil {
		c.bad(FieldBudget, "%v", err)
		good = false
	} else {
		p.lim.Quota, p.rpu = q, uint32(min(q, math.MaxUint32))
	}
	u := &Usage{Model: -1, Line: s.line(FieldUsage)}
	for t := range u.Tokens {
		u.Tokens[t] = -1
	}
	at := map[string]string{} // entry key → the usage key naming it
	for _, k := range slices.Sorted(maps.Keys(s.Usage)) {
		entry, f := s.Usage[k], "usage."+k
		line := s.line(FieldUsage)
		if l := s.usageLines[k]; l > 0 {
			line = l
		}
		bad := func(format string, args ...any) {
			c.errs = append(c.errs, SpecError{Field: f, Line: line, Msg: fmt.Sprintf(format, args...)})
			good = false
		}
		t := tokenType(k)
		if k != "model" && t == NumTokenTypes {
			bad("unknown key (want model, %s)", strings.Join(tokenTypeNames[:], ", "))
			continue
		}
		if entry == "" {
			bad("must name a descriptor key")
			continue
		}
		if o, dup := at[entry]; dup {
			bad("key %q is also usage.%s", entry, o)
			continue
		}
		at[entry] = k
		i := slices.IndexFunc(path, func(st Step) bool { return st.Key == entry })
		switch {
		case i < 0:
			bad("key %q is not on this rule's path (%s)", entry, pathKeys(path))
			continue
		case path[i].Kind != MatchAny:
			bad("the descriptor of key %q names a value; the entry carrying a model or a token count must match any value (give its key only)", entry)
			continue
		case entry == r.PairBy:
			bad("key %q is the rule's pair_by", entry)
			continue
		}
		if k == "model" {
			u.Model = i
		} else {
			u.Tokens[t] = i
		}
	}
	if _, ok := s.Usage["model"]; !ok {
		c.errs = append(c.errs, SpecError{Field: "usage.model", Line: s.line(FieldUsage), Msg: "required (the key of the entry naming the model)"})
		good = false
	}
	if !slices.ContainsFunc(tokenTypeNames[:], func(k string) bool { _, ok := s.Usage[k]; return ok }) {
		c.bad(FieldUsage, "name the entry of at least one token type (%s)", strings.Join(tokenTypeNames[:], ", "))
		good = false
	}
	if good {
		r.Usage = u
	}
	return good
}

// pathKeys spells a path's keys as "k1 > k2".
func pathKeys(path []Step) string {
	keys := make([]string, len(path))
	for i := range path {
		keys[i] = path[i].Key
	}
	return strings.Join(keys, " > ")
}

// reserve checks settle: reserve and its options (reserve, settle_within)
// against the rule's other fields, and sets their defaults.
func (c *checker) reserve(r *Rule, alg sluice.Algorithm) bool {
	s, good := c.s, true
	if !r.SettleReserve {
		for _, f := range []Field{FieldReserve, FieldSettleWithin} {
			if s.has(f) {
				c.bad(f, "only with settle: reserve")
				good = false
			}
		}
		return good
	}
	switch {
	case alg == sluice.Concurrency:
		c.bad(FieldSettle, "concurrency limits count requests in flight; they cannot reserve (pair_by alone pairs a slot with its release)")
		good = false
	case alg == sluice.SlidingLog:
		c.bad(FieldSettle, "sliding_log cannot settle a reservation exactly (a refund would come out of the newest admissions, not the reservation's); use fixed_window, sliding_window, token_bucket or gcra")
		good = false
	case r.PairBy == "":
		c.bad(FieldSettle, "reserve pairs each reservation with its settle by a request ID: give pair_by")
		good = false
	}
	if r.SubCounters > 1 {
		c.bad(FieldSubCounters, "not allowed with settle: reserve (a settle must find its reservation's counter)")
		good = false
	}
	if r.Placement == PlacementHybrid {
		c.bad(FieldPlacement, "not allowed with settle: reserve (reservations are decided by the global store, where every instance sees their records)")
		good = false
	}
	if !s.has(FieldReserve) {
		r.Reserve = DefaultReserve
	}
	if !s.has(FieldSettleWithin) {
		r.SettleWithin = DefaultSettleWithin
	}
	return good
}

// Defaults of settle: reserve.
const (
	// DefaultReserve is what a reservation takes when its call carries no
	// hits and the rule gives no reserve: one unit, so that a spent
	// budget denies it.
	DefaultReserve = 1
	// DefaultSettleWithin is how long a reservation waits for its settle
	// when the rule gives no settle_within.
	DefaultSettleWithin = time.Hour
)

// tiers compiles rate_limit.tiers for rule r, whose own limit is known.
func (c *checker) tiers(r *Rule) bool {
	if r.Limit.Algorithm == sluice.Concurrency {
		c.bad(FieldTiers, "not available for concurrency limits (a lease is released against the rule's own limit)")
		return false
	}
	good := true
	for _, name := range slices.Sorted(maps.Keys(c.s.Tiers)) {
		if t, err := ParseTier(name); err != nil || t >= TierCustom {
			c.errs = append(c.errs, SpecError{Field: "tiers." + name, Line: c.s.line(FieldTiers), Msg: "unknown key (want one of " + strings.Join(tierNames[:TierCustom], ", ") + ")"})
			good = false
		}
	}
	for t := range TierCustom {
		ts, given := c.s.Tiers[t.String()]
		if !given {
			continue
		}
		if ts == nil {
			c.errs = append(c.errs, SpecError{Field: "tiers." + t.String(), Line: c.s.line(FieldTiers), Msg: "want a mapping, got nothing"})
			good = false
			continue
		}
		tl, err := ts.TierLimit(Use{What: "a tier", Base: r, RequireQuota: true, NoConcurrency: true})
		if err != nil {
			for _, e := range err.(SpecErrors) {
				e.Field = join("tiers."+t.String(), e.Field)
				c.errs = append(c.errs, e)
			}
			good = false
			continue
		}
		r.Tiers[t] = tl
	}
	return good
}

// echo is s cut to 64 bytes, marked "…" when cut: a refused value quoted
// back in a message.
func echo(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

// At returns the errors with path put before each field: the JSON path of
// the Spec in its body ("quotas[2].limit" makes "unit" read
// "quotas[2].limit.unit").
func (e SpecErrors) At(path string) SpecErrors {
	out := make(SpecErrors, len(e))
	for i, x := range e {
		x.Field = join(path, x.Field)
		out[i] = x
	}
	return out
}
