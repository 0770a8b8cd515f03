package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Reasons of a failed authentication, the values of the reason label of
// sluice_auth_failures_total (GuardOptions.OnFailure).
const (
	// FailMissing: no Authorization header (a browser's first request
	// for the dashboard is one). Counted, but neither logged nor limited.
	FailMissing = "missing"
	// FailInvalid: a token (bearer or Basic password) no entry matches,
	// or an Authorization header of another scheme.
	FailInvalid = "invalid"
	// FailBasicWrite: HTTP Basic credentials on a state-changing request,
	// which takes bearer tokens only.
	FailBasicWrite = "basic_on_write"
	// FailCrossOrigin: a state-changing request a browser sent from another
	// origin (Sec-Fetch-Site or Origin).
	FailCrossOrigin = "cross_origin"
	// FailThrottled: refused with 429 because the client address had too
	// many failures.
	FailThrottled = "throttled"
)

// FailReasons lists every reason, for pre-declaring the metric's series.
var FailReasons = []string{FailMissing, FailInvalid, FailBasicWrite, FailCrossOrigin, FailThrottled}

// GuardOptions configure what Tokens do besides matching tokens: limiting,
// counting and logging failed authentications, and the origins trusted to
// send state-changing requests from a browser. The zero value counts and
// logs nothing and limits nothing; the checks against forged browser
// requests are on whatever the options.
type GuardOptions struct {
	// Failures limits failed authentications (FailInvalid) per client
	// address: a failure it denies, and every later request from that
	// address while it would deny one, is answered 429 with Retry-After,
	// before the token is looked at. Successful requests take nothing from
	// it. Nil: not limited. `sluice serve` builds it on an in-process
	// store/memory store (--auth-failure-limit).
	Failures *sluice.Limiter
	// OnFailure is called once per failed authentication with its reason
	// (one of FailReasons); it must be safe for concurrent use. Nil: not
	// counted.
	OnFailure func(reason string)
	// Logger receives, per client address, at most one line per LogEvery
	// with the failures since the previous line (never the token). Nil:
	// not logged.
	Logger *slog.Logger
	// LogEvery is the least time between two log lines about one address;
	// zero means one minute.
	LogEvery time.Duration
	// TrustedOrigins may send state-changing requests from a browser page
	// of theirs ("https://ops.example.com"); by default only the API's own
	// origin may.
	TrustedOrigins []string
	// Now is the log's clock; nil means time.Now.
	Now func() time.Time
}

// maxLoggedAddrs bounds the addresses the failure log remembers; past it,
// failures of new addresses are logged under "other".
const maxLoggedAddrs = 4096

// guard is the state GuardOptions configure.
type guard struct {
	opts    GuardOptions
	origins *http.CrossOriginProtection

	mu   sync.Mutex
	seen map[string]*failEntry // client address → failures since its last line
}

type failEntry struct {
	last time.Time // when the last line about it was written
	n    int       // failures since
}

// Guard sets the options of t's failure handling and origin checks. Call
// it before t is used; it is not safe to call concurrently with requests.
func (t *Tokens) Guard(opts GuardOptions) error {
	g, err := newGuard(opts)
	if err != nil {
		return err
	}
	t.guard = g
	return nil
}

func newGuard(opts GuardOptions) (*guard, error) {
	if opts.LogEvery <= 0 {
		opts.LogEvery = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if f := opts.Failures; f != nil && (!stack.HasBurst(f.Limit().Algorithm) || f.Limit().Quota < 1) {
		return nil, fmt.Errorf("failure limit %v: want a bucket algorithm (gcra, token_bucket) with a quota", f.Limit())
	}
	g := &guard{opts: opts, origins: http.NewCrossOriginProtection(), seen: map[string]*failEntry{}}
	for _, o := range opts.TrustedOrigins {
		if err := g.origins.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("trusted origin: %w", err)
		}
	}
	return g, nil
}

// defaultGuard serves Tokens on which Guard was never called.
var defaultGuard, _ = newGuard(GuardOptions{})

func (t *Tokens) g() *guard {
	if t == nil || t.guard == nil {
		return defaultGuard
	}
	return t.guard
}

// clientAddr is the address failures are limited and logged by: the peer's
// IP (behind a reverse proxy, the proxy's).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// safeMethod reports whether m changes nothing (GET, HEAD, OPTIONS).
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// failed counts, and maybe logs, one failed authentication.
func (g *guard) failed(r *http.Request, addr, reason string) {
	if g.opts.OnFailure != nil {
		g.opts.OnFailure(reason)
	}
	if g.opts.Logger == nil || reason == FailMissing {
		return
	}
	now := g.opts.Now()
	g.mu.Lock()
	e := g.seen[addr]
	if e == nil {
		if len(g.seen) >= maxLoggedAddrs {
			for a, old := range g.seen {
				if now.Sub(old.last) >= g.opts.LogEvery {
					delete(g.seen, a)
				}
			}
		}
		if len(g.seen) >= maxLoggedAddrs {
			addr = "other"
			e = g.seen[addr]
		}
		if e == nil {
			e = &failEntry{}
			g.seen[addr] = e
		}
	}
	e.n++
	var n int
	if e.last.IsZero() || now.Sub(e.last) >= g.opts.LogEvery {
		n, e.n, e.last = e.n, 0, now
	}
	g.mu.Unlock()
	if n > 0 {
		g.opts.Logger.WarnContext(r.Context(), "admin authentication failed", "client", addr, "reason", reason,
			"failures", n, "path", r.URL.Path, "next_line_after", g.opts.LogEvery)
	}
}

// throttled reports how long addr must wait when its failures are over
// the limit now (cost 0 takes nothing), or 0 when it may try.
func (g *guard) throttled(ctx context.Context, addr string) time.Duration {
	if g.opts.Failures == nil {
		return 0
	}
	res, err := g.opts.Failures.AllowN(ctx, addr, 0)
	if err != nil || res.Remaining > 0 {
		return 0
	}
	// Nothing left: a bucket is full again ResetAfter from now and gains
	// a unit every Window/Quota, so one unit fits after ResetAfter less
	// (capacity − 1) intervals.
	lim := g.opts.Failures.Limit()
	interval := lim.Window / time.Duration(lim.Quota)
	wait := res.ResetAfter - time.Duration(stack.Capacity(lim)-1)*interval
	return max(wait, time.Second)
}

// charge takes one failure from addr's budget; it reports how long to wait
// when the budget was already spent (the failure is then answered 429).
func (g *guard) charge(ctx context.Context, addr string) time.Duration {
	if g.opts.Failures == nil {
		return 0
	}
	res, err := g.opts.Failures.AllowN(ctx, addr, 1)
	if err != nil || res.Allowed {
		return 0
	}
	return max(res.RetryAfter, time.Second)
}

// tooMany answers 429 for an address over its failure budget.
func tooMany(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	problem(w, http.StatusTooManyRequests, fmt.Sprintf("too many failed authentications from this address; try again in %s", wait.Round(time.Second)), nil)
}

// errNotJSON is a state-changing request whose body is not declared JSON.
var errNotJSON = errors.New("Content-Type must be application/json")

// jsonBody checks that a state-changing request declares a JSON body. A
// body-less DELETE needs no Content-Type.
func jsonBody(r *http.Request) error {
	if r.Method == http.MethodDelete && r.ContentLength == 0 {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w, got %q: a browser form or text/plain body is refused", errNotJSON, ct)
	}
	return nil
}

// admit is every guard's door: on a state-changing request it refuses
// cross-origin browser requests (403), HTTP Basic credentials (401; a
// browser replays them without asking) and bodies not declared JSON (415);
// on every request, an address over its failure budget (429), a missing or
// wrong token (401, with challenge as WWW-Authenticate) and a token whose
// access does not allow n (403). It writes the refusal itself and returns
// the token's name when admitted.
func (t *Tokens) admit(w http.ResponseWriter, r *http.Request, n need, challenge string) (string, bool) {
	g := t.g()
	addr := clientAddr(r)
	unsafe := !safeMethod(r.Method)
	if unsafe {
		if err := g.origins.Check(r); err != nil {
			g.failed(r, addr, FailCrossOrigin)
			problem(w, http.StatusForbidden, "cross-origin request refused: a state-changing request must come from the API's own origin or from a non-browser client (Sec-Fetch-Site/Origin say another site sent it; see --admin-trusted-origins)", nil)
			return "", false
		}
	}
	if wait := g.throttled(r.Context(), addr); wait > 0 {
		g.failed(r, addr, FailThrottled)
		tooMany(w, wait)
		return "", false
	}
	header := r.Header.Get("Authorization")
	if _, bearer := bearerToken(header); unsafe && header != "" && !bearer {
		g.failed(r, addr, FailBasicWrite)
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
		problem(w, http.StatusUnauthorized, "a state-changing request needs Authorization: Bearer <token>; HTTP Basic credentials are accepted for reading only", nil)
		return "", false
	}
	name, access, ok := t.check(header)
	if !ok {
		reason := FailInvalid
		if header == "" {
			reason = FailMissing
		} else if wait := g.charge(r.Context(), addr); wait > 0 {
			g.failed(r, addr, FailThrottled)
			tooMany(w, wait)
			return "", false
		}
		g.failed(r, addr, reason)
		w.Header().Set("WWW-Authenticate", challenge)
		detail := "a valid bearer token is required (Authorization: Bearer <token>)"
		if strings.HasPrefix(challenge, "Basic") {
			detail = "a valid admin token is required (Authorization: Bearer <token>, or as the Basic password)"
		}
		problem(w, http.StatusUnauthorized, detail, nil)
		return "", false
	}
	if !access.allows(n) {
		problem(w, http.StatusForbidden, forbidden(name, access), nil)
		return "", false
	}
	if unsafe {
		if err := jsonBody(r); err != nil {
			problem(w, http.StatusUnsupportedMediaType, err.Error(), nil)
			return "", false
		}
	}
	return name, true
}
