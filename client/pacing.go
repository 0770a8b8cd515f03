package client

import (
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/headers"
)

// maxTracked bounds the policies and routes a Transport remembers.
const maxTracked = 10_000

// policyKey names one server-side bucket: a policy of a host, and its
// partition key when the server sends one.
type policyKey struct {
	host, name, pk string
}

// pacer is the client's estimate of one policy. All fields are guarded by
// Transport.mu.
type pacer struct {
	remaining int64     // units the server will still admit before resetAt
	resetAt   time.Time // when the server said the quota is restored
	next      time.Time // earliest send time of the next request
	quota     int64     // q of RateLimit-Policy, 0 when unknown
	window    time.Duration
	inflight  int64 // reserved requests without a response yet
	blocked   time.Time
}

func (t *Transport) routeKey(r *http.Request) string {
	if t.RouteKey != nil {
		return r.URL.Host + "\x00" + t.RouteKey(r)
	}
	return r.URL.Host + "\x00" + r.Method + " " + r.URL.Path
}

// reserve returns how long r must wait before it is sent, and the pacers it
// holds a place in (release them when the response arrives).
func (t *Transport) reserve(r *http.Request) (time.Duration, []*pacer) {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	var wait time.Duration
	if until, ok := t.blocks[r.URL.Host]; ok {
		if until.After(now) {
			wait = until.Sub(now)
		} else {
			delete(t.blocks, r.URL.Host)
		}
	}
	keys := t.routes[t.routeKey(r)]
	var held []*pacer
	for _, k := range keys {
		p := t.pacers[k]
		if p == nil {
			continue
		}
		if w := p.reserve(now); w > wait {
			wait = w
		}
		held = append(held, p)
	}
	return wait, held
}

// reserve takes a place for one request and returns its wait.
func (p *pacer) reserve(now time.Time) time.Duration {
	p.inflight++
	slot := now
	if p.blocked.After(slot) {
		slot = p.blocked
	}
	if !now.Before(p.resetAt) && !p.blocked.After(now) {
		return slot.Sub(now) // what we knew has expired: the server will tell us again
	}
	if p.next.After(slot) {
		slot = p.next
	}
	if p.remaining <= 0 {
		if slot.Before(p.resetAt) {
			slot = p.resetAt
		}
		if p.quota <= 0 || p.window <= 0 {
			// Nothing known about the next window: go at the reset and learn.
			return slot.Sub(now)
		}
		// A fresh window starts at the reset: pace its quota across it.
		p.remaining = p.quota
		p.resetAt = p.resetAt.Add(p.window)
	}
	spacing := time.Duration(0)
	if p.resetAt.After(slot) {
		spacing = p.resetAt.Sub(slot) / time.Duration(p.remaining)
	}
	p.next = slot.Add(spacing)
	p.remaining--
	return slot.Sub(now)
}

// release drops the reservations of a request that got its answer (or never
// went).
func (t *Transport) release(held []*pacer) {
	if len(held) == 0 {
		return
	}
	t.mu.Lock()
	for _, p := range held {
		if p.inflight > 0 {
			p.inflight--
		}
	}
	t.mu.Unlock()
}

// observe learns from a response: the RateLimit field updates the policies it
// names and ties them to the request's route; a 429/503 Retry-After blocks
// the policies that are exhausted, or the whole host when it names none.
func (t *Transport) observe(r *http.Request, resp *http.Response, now time.Time) {
	limits, err := headers.ParseServiceLimits(resp.Header.Values(headers.RateLimit))
	if err != nil {
		limits = nil // a malformed field is ignored entirely
	}
	var policies []headers.Policy
	if len(limits) > 0 {
		policies, _ = headers.ParsePolicies(resp.Header.Values(headers.RateLimitPolicy))
	}
	var retryAt time.Time
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if ra, ok := headers.ParseRetryAfter(resp.Header.Get(headers.RetryAfter), now); ok {
			retryAt = now.Add(ra)
		}
	}
	host := r.URL.Host
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pacers == nil || len(t.pacers) > maxTracked || len(t.routes) > maxTracked {
		// Start over rather than grow without bound (many routes, or a
		// server that names a policy per request): pacing only gets less
		// informed for a moment, never wrong.
		t.pacers = make(map[policyKey]*pacer)
		t.routes = make(map[string][]policyKey)
		t.blocks = make(map[string]time.Time)
	}
	keys := make([]policyKey, 0, len(limits))
	blockedAny := false
	for _, l := range limits {
		var pol *headers.Policy
		for i := range policies {
			if policies[i].Name == l.Name && string(policies[i].PartitionKey) == string(l.PartitionKey) {
				pol = &policies[i]
			}
		}
		if pol != nil && pol.Unit == headers.ConcurrentRequests {
			continue // requests in flight, not a rate: nothing to spread over time
		}
		if l.Reset < 0 && (pol == nil || pol.Window == 0) {
			continue // no time to spread the remaining requests over
		}
		k := policyKey{host: host, name: l.Name, pk: string(l.PartitionKey)}
		keys = append(keys, k)
		p := t.pacers[k]
		if p == nil {
			p = &pacer{}
			t.pacers[k] = p
		}
		if pol != nil {
			p.quota, p.window = pol.Quota, time.Duration(pol.Window)*time.Second
		}
		// Requests still in flight will spend some of what the server reports.
		p.remaining = l.Remaining - p.inflight
		switch {
		case l.Reset >= 0:
			p.resetAt = now.Add(time.Duration(l.Reset) * time.Second)
		default:
			p.resetAt = now.Add(p.window)
		}
		if l.Remaining == 0 && !retryAt.IsZero() {
			p.blocked = retryAt
			blockedAny = true
		}
	}
	if !retryAt.IsZero() && !blockedAny {
		t.blocks[host] = retryAt
	}
	if len(keys) == 0 {
		return
	}
	rk := t.routeKey(r)
	if !sameKeys(t.routes[rk], keys) {
		t.routes[rk] = keys
	}
}

func sameKeys(a, b []policyKey) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
