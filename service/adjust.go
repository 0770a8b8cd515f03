package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/stack"
)

// After-the-fact changes to the counters Check uses: Charge and refund a
// cost known only after the response, and Reset counters (one request's,
// or every counter of one tenant). Their ops name their keys through plan,
// the code that names Check's, so they touch exactly Check's counters.

// ErrNoKeyLister: the store cannot list its keys (it is not a
// stack.KeyLister, or a layer of it forwards to one that cannot), so a
// tenant's counters cannot be found. It is stack.ErrNoKeyLister, which
// composed stores wrap; test with errors.Is.
var ErrNoKeyLister = stack.ErrNoKeyLister

// Charge settles costs known only after the fact on the counters a Check of
// the same descriptors uses (tenant overrides and tiers, calendar quotas,
// placement, a limit given in the request), in one store call: a positive
// Cost charges, whether or not it fits (the units were spent; a counter may
// go into debt, up to its capacity again, and refuses checks until it has
// refilled), a negative one refunds (never past a fresh counter: remaining
// never exceeds the limit), zero reads. Rules in shadow mode are charged,
// as Check charges them. A rule with sub_counters has the cost spread
// evenly over all its sub-counters (what it limits is their sum).
//
// The answer has one status per descriptor, in order, with the state after
// the charge in Result (Remaining 0 in debt; for sub-counters, the sum of
// their limits and remainings and the latest reset). A descriptor no limit
// applies to, an unlimited rule and a concurrency rule are left alone, and
// their status says so in Skipped. A calendar quota is charged in the
// period in force now.
//
// Charge returns an error wrapping ErrInvalidRequest for an invalid
// request (as Check validates it, and |Cost| ≤ algorithm.MaxExact), and an
// error wrapping the store's when the store fails or ctx ends: charges know
// no failure mode, and nothing may be assumed charged.
func (e *Engine) Charge(ctx context.Context, creq ChargeRequest) (Response, error) {
	req := Request{Domain: creq.Domain, Descriptors: make([]Descriptor, len(creq.Descriptors))}
	costs := make([]int64, len(creq.Descriptors))
	for i, d := range creq.Descriptors {
		req.Descriptors[i] = Descriptor{Entries: d.Entries, Limit: d.Limit}
		costs[i] = d.Cost
	}
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := validate(&req, e.cfg.RequestBounds, sc); err != nil {
		return Response{}, err
	}
	for i, c := range costs {
		if c > algorithm.MaxExact || c < -algorithm.MaxExact {
			return Response{}, fmt.Errorf("service: %w: descriptor %d: cost %d beyond ±%d", ErrInvalidRequest, i, c, int64(algorithm.MaxExact))
		}
	}
	resp := e.plan(e.policy(), sc, &req, &adjust{costs: costs})
	e.spread(sc, &req, costs)
	if len(sc.ops) > 0 {
		sc.results = growResults(sc.results, len(sc.ops))
		if err := e.take(ctx, sc.ops, sc.results); err != nil {
			return Response{}, fmt.Errorf("service: charge: %w", err)
		}
	}
	var charged, refunded uint64
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		resp.Statuses[p.desc].Result = sumResults(sc, p)
		resp.DecidedAt = max(resp.DecidedAt, resp.Statuses[p.desc].Result.At)
		if c := costs[p.desc]; c > 0 {
			charged += uint64(c)
		} else {
			refunded += uint64(-c)
		}
	}
	if sc.calendar {
		trimCalendar(sc, &resp)
	}
	if e.cfg.Notify != nil {
		e.notify(sc, &req, &resp, time.Now())
	}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		switch {
		case st.Unlimited:
			st.Skipped = SkipUnlimited
		case st.CurrentLimit == nil:
			st.Skipped = SkipNoLimit
		}
	}
	if charged > 0 {
		e.m.Adjusted(req.Domain, ActionCharge, charged)
	}
	if refunded > 0 {
		e.m.Adjusted(req.Domain, ActionRefund, refunded)
	}
	return resp, nil
}

// spread gives each rule with sub_counters S > 1 an op on every
// sub-counter, after plan put one on sub-counter 0: a reset resets them
// all; a cost is split evenly, the remainder one unit each to sub-counters
// from a random one on, so no sub-counter is favoured. costs is nil for a
// reset.
func (e *Engine) spread(sc *scratch, req *Request, costs []int64) {
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped || p.rule == nil || p.rule.SubCounters <= 1 {
			continue
		}
		s := p.rule.SubCounters
		first := sc.ops[p.op]
		share := func(int) int64 { return 0 }
		if costs != nil {
			cost := first.Cost
			base, rem, from := cost/int64(s), cost%int64(s), rand.IntN(s)
			share = func(j int) int64 {
				if int64((j-from+s)%s) < rem {
					return base + 1
				}
				return base
			}
		}
		setCost := func(op *sluice.Op, c int64) {
			op.Cost = c
			if c == 0 && op.Action != sluice.Reset {
				op.Action = sluice.Take // nothing to settle here: a look
			}
		}
		setCost(&sc.ops[p.op], share(0))
		p.subs = len(sc.ops)
		var own *sluice.Limit
		if p.own {
			own = &p.lim
		}
		entries := req.Descriptors[p.desc].Entries
		for j := 1; j < s; j++ {
			op := sluice.Op{Key: string(p.info.appendKey(nil, entries, j, own)), Limit: first.Limit, Action: first.Action, Script: first.Script}
			setCost(&op, share(j))
			sc.ops = append(sc.ops, op)
		}
	}
}

// sumResults is the result of plan p's ops: its one op's, or the sum over
// the sub-counters spread gave it ops on.
func sumResults(sc *scratch, p *plan) sluice.Result {
	r := sc.results[p.op]
	if p.rule == nil || p.rule.SubCounters <= 1 {
		return r
	}
	for _, o := range sc.results[p.subs : p.subs+p.rule.SubCounters-1] {
		r.Allowed = r.Allowed && o.Allowed
		r.Limit += o.Limit
		r.Remaining += o.Remaining
		r.ResetAfter = max(r.ResetAfter, o.ResetAfter)
		r.RetryAfter = max(r.RetryAfter, o.RetryAfter)
		r.At = max(r.At, o.At)
	}
	return r
}

// DefaultMaxResetKeys is ResetOptions.MaxKeys's default.
const DefaultMaxResetKeys = 1000

// ResetOptions configure Engine.Reset and Engine.ResetTenant. The zero value
// is the defaults.
type ResetOptions struct {
	// MaxKeys bounds the counters one ResetTenant resets; more are left for
	// the next call (ResetResult.More). Zero means DefaultMaxResetKeys.
	MaxKeys int
	// Before, if set, is called with the keys about to be reset (and
	// whether more remain) before any is; when it returns an error nothing
	// is reset and the error is returned. It is not called when there is
	// nothing to reset. The admin API writes its audit row here.
	Before func(ctx context.Context, keys []string, more bool) error
}

// ResetResult says what a reset did.
type ResetResult struct {
	// Keys are the store keys reset.
	Keys []string
	// More: the tenant may have more counters than MaxKeys allowed; call
	// ResetTenant again.
	More bool
}

// Reset forgets the counters a Check of req would use, as if they had never
// been used: for each descriptor its rule's counter (every sub-counter of a
// rule with sub_counters; the counter of the tenant's override or tier; a
// calendar quota's current period), of any algorithm. Unlimited rules and
// descriptors no limit applies to have none. req.Hits and each
// descriptor's Hits are ignored.
//
// It returns an error wrapping ErrInvalidRequest for an invalid request, the
// error of opts.Before, or an error wrapping the store's (some keys may then
// have been reset).
func (e *Engine) Reset(ctx context.Context, req Request, opts ResetOptions) (ResetResult, error) {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	if err := validate(&req, e.cfg.RequestBounds, sc); err != nil {
		return ResetResult{}, err
	}
	e.plan(e.policy(), sc, &req, &adjust{reset: true})
	e.spread(sc, &req, nil)
	ops := make([]sluice.Op, 0, len(sc.ops))
	seen := make(map[string]bool, len(sc.ops))
	for _, op := range sc.ops {
		if !seen[op.Key] {
			seen[op.Key] = true
			ops = append(ops, op)
		}
	}
	return e.reset(ctx, ops, false, opts, func(int) string { return req.Domain })
}

// ResetTenant forgets every counter of one tenant (the value of a domain's
// tenant_key) in every domain that names a tenant key: the counters of its
// tiers and overrides (current and past limits), of every calendar period,
// of every sub-counter, and of every value of rules that count per value
// below the tenant key (a wildcard or a bare key). It finds them with the
// store's stack.KeyLister, by key prefix (see keys.go): the prefix of the
// tenant's own hash tag for rules whose first entry is the tenant, and for
// a rule whose tenant key is deeper, the prefix of its first entry, whose
// keys are listed (up to 16 × the bound) and filtered. Counters shared by
// every tenant (a wildcard tenant step with share_threshold) are not the
// tenant's and are left alone.
//
// At most opts.MaxKeys counters are reset per call; ResetResult.More says
// more may remain (a counter listed may have expired meanwhile). It returns
// an error wrapping ErrInvalidRequest for an empty or oversized tenant,
// ErrNoKeyLister when the store cannot list keys, the error of opts.Before,
// or an error wrapping the store's.
func (e *Engine) ResetTenant(ctx context.Context, tenant string, opts ResetOptions) (ResetResult, error) {
	if err := e.validTenant(tenant); err != nil {
		return ResetResult{}, err
	}
	max := opts.MaxKeys
	if max <= 0 {
		max = DefaultMaxResetKeys
	}
	snap := e.policy().snap
	var scans []scan
	for _, d := range snap.Domains() {
		scans = append(scans, tenantScans(snap, d, tenant)...)
	}
	found, more, err := e.list(ctx, scans, max)
	if err != nil {
		return ResetResult{}, err
	}
	ops := make([]sluice.Op, len(found))
	for i, k := range found {
		ops[i] = sluice.Op{Key: k.key, Limit: k.limit, Action: sluice.Reset}
	}
	return e.reset(ctx, ops, more, opts, func(i int) string { return found[i].domain })
}

// TenantEntries lists the counters one tenant has under rule r, a rule
// below the domain's tenant key that counts per value (a wildcard or a bare
// key): each as the entries of a descriptor that Check (with zero hits, to
// read it) would count there, up to max (≥ 1), and whether there may be
// more. It reads keys from the store's stack.KeyLister; nothing is
// charged. A rule the tenant has no counters of its own under (a shared
// wildcard tenant step, an exact tenant step naming another tenant) has
// none.
func (e *Engine) TenantEntries(ctx context.Context, r *rules.Rule, tenant string, max int) ([][]rules.Entry, bool, error) {
	if err := e.validTenant(tenant); err != nil {
		return nil, false, err
	}
	if r == nil || r.TenantDepth == 0 || r.Unlimited || max < 1 {
		return nil, false, nil
	}
	found, more, err := e.list(ctx, ruleScans(r, tenant), max)
	if err != nil {
		return nil, false, err
	}
	var out [][]rules.Entry
	seen := map[string]bool{}
	for _, k := range found {
		id := k.first + "|" + strings.Join(k.rest, "|") // '|' is escaped inside entries
		if seen[id] || 1+len(k.rest) != len(r.Path) {
			continue // another limit's or sub-counter's key of one counter
		}
		seen[id] = true
		entries := make([]rules.Entry, 0, len(r.Path))
		ok := true
		for _, kv := range append([]string{k.first}, k.rest...) {
			en, good := entry(kv)
			ok = ok && good
			entries = append(entries, en)
		}
		if ok {
			out = append(out, entries)
		}
	}
	return out, more, nil
}

// validTenant checks a tenant name as requests' values are checked.
func (e *Engine) validTenant(tenant string) error {
	if tenant == "" {
		return fmt.Errorf("service: %w: empty tenant", ErrInvalidRequest)
	}
	lim := e.cfg.RequestBounds.withDefaults()
	if exceeds(len(tenant), lim.MaxValueBytes) {
		return fmt.Errorf("service: %w: %w", ErrInvalidRequest,
			&LimitError{Field: "tenant", Limit: "max-value-bytes", Got: len(tenant), Max: lim.MaxValueBytes})
	}
	return nil
}

// resetBatch bounds the ops of one store call of a reset.
const resetBatch = 256

// reset calls opts.Before with the keys of ops, then resets them, in
// batches, counting them per domain (domain(i) is op i's).
func (e *Engine) reset(ctx context.Context, ops []sluice.Op, more bool, opts ResetOptions, domain func(i int) string) (ResetResult, error) {
	res := ResetResult{Keys: make([]string, len(ops)), More: more}
	for i := range ops {
		res.Keys[i] = ops[i].Key
	}
	if len(ops) == 0 {
		return res, nil
	}
	if opts.Before != nil {
		if err := opts.Before(ctx, res.Keys, more); err != nil {
			return ResetResult{}, err
		}
	}
	results := make([]sluice.Result, min(len(ops), resetBatch))
	for start := 0; start < len(ops); start += resetBatch {
		batch := ops[start:min(start+resetBatch, len(ops))]
		if err := e.take(ctx, batch, results[:len(batch)]); err != nil {
			return ResetResult{}, fmt.Errorf("service: reset: %d of %d keys reset: %w", start, len(ops), err)
		}
	}
	counts := map[string]uint64{}
	for i := range ops {
		counts[domain(i)]++
	}
	for d, n := range counts {
		e.m.Adjusted(d, ActionReset, n)
	}
	return res, nil
}

// scan is one listing of the store for a tenant's counters: the keys that
// start with prefix and that keep accepts (nil: all).
type scan struct {
	domain string
	prefix string
	// broad: the prefix holds other tenants' keys too, so more keys are
	// listed than kept.
	broad bool
	keep  func(k *storedKey) bool
	// rules finds a rule of the domain by its escaped ID, to split the
	// limit of a sub-counter's key as Check splits it (nil: none).
	rules map[string]*rules.Rule
}

// found is a key a scan kept.
type found struct {
	storedKey
	domain string
}

// broadFactor is how many more keys a broad scan lists than it may keep.
const broadFactor = 16

// maxBroad bounds the keys one broad scan lists.
const maxBroad = 1 << 16

// list runs scans against the store's KeyLister, keeping at most max keys
// in all, and says whether more may remain.
func (e *Engine) list(ctx context.Context, scans []scan, max int) ([]found, bool, error) {
	kl, ok := e.store.(stack.KeyLister)
	if !ok {
		return nil, false, ErrNoKeyLister
	}
	var out []found
	seen := map[string]bool{}
	more := false
	for _, s := range scans {
		left := max - len(out)
		if left <= 0 {
			more = true
			break
		}
		n := left
		if s.broad {
			n = min(left*broadFactor, maxBroad)
		}
		keys, m, err := kl.Keys(ctx, s.prefix, n)
		if err != nil {
			return nil, false, fmt.Errorf("service: listing keys: %w", err)
		}
		more = more || m
		for _, key := range keys {
			k, ok := parseKey(key)
			if !ok || seen[key] || (s.keep != nil && !s.keep(&k)) {
				continue
			}
			if len(out) == max {
				more = true
				break
			}
			seen[key] = true
			if r := s.rules[k.rule]; k.sub && r != nil {
				k.limit = splitLimit(k.limit, r.SubCounters)
			}
			out = append(out, found{storedKey: k, domain: s.domain})
		}
	}
	return out, more, nil
}

// tenantScans are the scans that find every counter of tenant in domain.
// Rules whose first entry is the tenant key share one prefix per placement:
// the tenant's hash tag (and, with sub-counters, the tag's start), which
// also holds the counters of limits given in requests. Rules whose tenant
// key is deeper each get their own (broad) scans.
func tenantScans(snap *rules.Snapshot, domain, tenant string) []scan {
	tk := snap.TenantKey(domain)
	if tk == "" {
		return nil
	}
	byID := map[string]*rules.Rule{}
	tags := map[byte]bool{0: true} // placement → any depth-1 rule with sub-counters
	var out []scan
	for _, r := range snap.Rules() {
		if r.Domain != domain || r.TenantDepth == 0 || r.Unlimited {
			continue
		}
		byID[string(appendEscapedBut(nil, r.ID, '='))] = r
		if r.TenantDepth > 1 {
			out = append(out, ruleScans(r, tenant)...)
			continue
		}
		pb := placementByte(r.Placement)
		tags[pb] = tags[pb] || r.SubCounters > 1
	}
	keep := func(k *storedKey) bool { // not a counter every tenant shares
		r := byID[k.rule]
		return r == nil || !r.Path[0].Shared
	}
	for pb, subs := range tags {
		tag := tagPrefix(pb, domain, escapedEntry(tk, tenant))
		out = append(out, scan{domain: domain, prefix: tag + "}", keep: keep, rules: byID})
		if subs {
			out = append(out, scan{domain: domain, prefix: tag + "|s", keep: keep, rules: byID})
		}
	}
	return out
}

// ruleScans are the scans that find the counters of tenant under rule r
// (r.TenantDepth > 0): exact prefixes when the tenant is the first entry,
// the first entry's prefix and a filter when it is deeper.
func ruleScans(r *rules.Rule, tenant string) []scan {
	ts := &r.Path[r.TenantDepth-1]
	if ts.Shared || (ts.Kind == rules.MatchExact && ts.Value != tenant) {
		return nil // no counter of the tenant's own
	}
	id := string(appendEscapedBut(nil, r.ID, '='))
	byID := map[string]*rules.Rule{id: r}
	pb := placementByte(r.Placement)
	first := &r.Path[0]
	if r.TenantDepth == 1 {
		tag := tagPrefix(pb, r.Domain, escapedEntry(first.Key, tenant))
		if r.SubCounters <= 1 {
			return []scan{{domain: r.Domain, prefix: tag + "}|r:" + id + "|"}}
		}
		return []scan{{domain: r.Domain, prefix: tag + "|s", keep: func(k *storedKey) bool { return k.rule == id }, rules: byID}}
	}
	want, at := escapedEntry(ts.Key, tenant), r.TenantDepth-2
	keep := func(k *storedKey) bool { return k.rule == id && len(k.rest) > at && k.rest[at] == want }
	if first.Kind != rules.MatchExact && !first.Shared { // a counter per first value
		return []scan{{domain: r.Domain, prefix: tagPrefix(pb, r.Domain, string(appendEscaped(nil, first.Key))+"="),
			broad: true, keep: keep, rules: byID}}
	}
	tag := tagPrefix(pb, r.Domain, escapedEntry(first.Key, first.Value))
	if r.SubCounters <= 1 {
		return []scan{{domain: r.Domain, prefix: tag + "}|r:" + id + "|", broad: true, keep: keep}}
	}
	return []scan{{domain: r.Domain, prefix: tag + "|s", broad: true, keep: keep, rules: byID}}
}

// tagPrefix is the start of the keys of placement byte pb in domain whose
// first entry is first (escaped): "[pb]{<domain>|<first>".
func tagPrefix(pb byte, domain, first string) string {
	var b []byte
	if pb != 0 {
		b = append(b, pb)
	}
	b = append(b, '{')
	b = appendEscaped(b, domain)
	b = append(b, '|')
	return string(append(b, first...))
}

// Actions, the values Metrics.Adjusted receives.
const (
	// ActionCharge: units charged after the fact (Engine.Charge).
	ActionCharge = "charge"
	// ActionRefund: units asked back (Engine.Charge with a negative cost);
	// a counter gives back at most what it holds.
	ActionRefund = "refund"
	// ActionReset: counters reset (Engine.Reset, Engine.ResetTenant).
	ActionReset = "reset"
)
