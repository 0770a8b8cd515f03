// Package api is Sluice's HTTP interface: POST /v1/check, POST
// /v1/release and POST /v1/charge (Sluice's own JSON), POST /json (envoyproxy/ratelimit's protojson endpoint), /healthz, /readyz
// (and envoy's /healthcheck), /metrics and /debug/rules; and, on a separate
// debug listener only, pprof. Decisions come from the engine (package
// service); this package decodes, validates and encodes.
package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/headers/edge"
	"github.com/sluice-rl/sluice/internal/rlsproto"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// Checker decides rate-limit requests. *service.Engine implements it.
type Checker interface {
	Check(ctx context.Context, req service.Request) (service.Response, error)
}

// Releaser gives back the concurrency leases a check took (see
// service.Engine.ReleaseLeases). When the Checker is also a Releaser,
// POST /v1/release is served.
type Releaser interface {
	ReleaseLeases(ctx context.Context, req service.Request, leases []uint64) error
}

// Charger settles costs known only after the fact (see
// service.Engine.Charge): POST /v1/charge. *service.Engine implements it.
type Charger interface {
	Charge(ctx context.Context, req service.ChargeRequest) (service.Response, error)
}

// RuleSource is where /debug/rules reads the rules in force. *watch.Watcher
// implements it.
type RuleSource interface {
	// Current returns the snapshot in force.
	Current() *rules.Snapshot
	// LastError returns why the last reload failed, or nil.
	LastError() error
}

// DefaultMaxBodyBytes is the largest request body accepted when
// Options.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 1 << 20

// Options configure the handlers. Checker is required; every other field is
// optional and its zero value is documented.
type Options struct {
	// Checker decides /v1/check and /json. Required.
	Checker Checker
	// Ready reports whether the service can decide (rules loaded, store
	// answering); /readyz and /healthcheck answer 503 with its error. Nil
	// means always ready.
	Ready func(ctx context.Context) error
	// Metrics serves /metrics (promhttp); nil leaves /metrics out.
	Metrics http.Handler
	// Rules feeds /debug/rules; nil leaves it out. It lists every limit
	// and the rule files' absolute paths, so New serves it only behind
	// ReadAuth; NewDebug (a loopback listener) serves it as it is.
	Rules RuleSource
	// ReadAuth wraps /debug/rules on the public listener (New): it answers
	// the requests it refuses itself (401, 403, 429) and passes the others
	// on. Nil leaves /debug/rules off the public listener. `sluice serve`
	// uses the admin tokens that may read (admin.Tokens.Read).
	ReadAuth func(http.Handler) http.Handler
	// Logger receives engine errors (not the client's mistakes). Nil
	// discards.
	Logger *slog.Logger
	// MaxBodyBytes bounds request bodies; zero means DefaultMaxBodyBytes. A
	// larger body is answered 413 naming the limit.
	MaxBodyBytes int64
	// RequestBounds bound the size of check and release requests (see
	// service.RequestBounds); a request over one is answered 400 naming the limit,
	// before it is converted. The zero value is the defaults.
	RequestBounds service.RequestBounds
	// ResponseHeaders adds RateLimit, RateLimit-Policy and Retry-After to
	// /v1/check and /json answers.
	ResponseHeaders bool
	// DecisionInstant adds the DecidedAtHeader to /v1/check answers whose
	// check the store decided (service.Response.DecidedAt not zero), for a
	// harness that places decisions in time (`sluice serve
	// --debug-decision-instant`; internal/proof/fleet). Off by default: it
	// tells a client the store's clock.
	DecisionInstant bool
	// StoreHealth, if set, reports whether the store answers; /readyz
	// prints it beside its answer ("store: ok" or "store: down: …") and
	// /healthz?verbose in JSON. It never decides readiness by itself: Ready
	// does (`sluice serve --readyz-strict` makes Ready include it).
	StoreHealth func(ctx context.Context) error
	// ReadyNotes, if set, adds lines to a 200 /readyz answer: conditions
	// that leave the service able to decide but degraded (stale tenant
	// overrides, for one).
	ReadyNotes func() []string
	// RuleSwitch, if set, gives the kill-switch state ("off", "shadow"; ""
	// or "on" when on) of a rule for /debug/rules.
	RuleSwitch func(domain, id string) string
	// Charger, if set, serves POST /v1/charge; without it the endpoint
	// answers 404 saying charges are off. A charge can refund quota, so it
	// needs ChargeAuth.
	Charger Charger
	// ChargeAuth wraps POST /v1/charge: it answers the requests it refuses
	// itself (401, 403) and passes the others on. Required with Charger;
	// `sluice serve` uses the read-write and charge-only admin tokens
	// (admin.Tokens.Charge).
	ChargeAuth func(http.Handler) http.Handler
}

// handler holds the options every endpoint shares.
type handler struct {
	opts   Options
	log    *slog.Logger
	served map[string]bool // paths this handler's mux serves
}

func newHandler(opts Options) (*handler, error) {
	if opts.Checker == nil {
		return nil, errors.New("api: Options.Checker is required")
	}
	if opts.Charger != nil && opts.ChargeAuth == nil {
		return nil, errors.New("api: Options.Charger needs Options.ChargeAuth: a charge can refund quota, so it must be authenticated")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &handler{opts: opts, log: log, served: map[string]bool{}}, nil
}

// New returns the public HTTP handler: /v1/check, /v1/release (when the
// Checker is a Releaser), /v1/charge (with Options.Charger), /json, /healthz, /readyz,
// /healthcheck, and /metrics and /debug/rules when configured. It is safe
// for concurrent use.
func New(opts Options) (http.Handler, error) {
	h, err := newHandler(opts)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	h.handle(mux, "POST /v1/check", h.check)
	if rel, ok := opts.Checker.(Releaser); ok {
		h.handle(mux, "POST /v1/release", h.release(rel))
	}
	if opts.Charger != nil {
		mux.Handle("POST /v1/charge", opts.ChargeAuth(http.HandlerFunc(h.charge)))
		h.served["/v1/charge"] = true
	} else {
		h.handle(mux, "POST /v1/charge", func(w http.ResponseWriter, _ *http.Request) {
			problem(w, http.StatusNotFound, "POST /v1/charge is off on this server: a charge can refund quota, so it needs admin tokens (sluice serve --admin-token-file or SLUICE_ADMIN_TOKEN)")
		})
	}
	h.handle(mux, "POST /json", h.json)
	h.handle(mux, "GET /healthz", h.healthz)
	h.handle(mux, "GET /readyz", h.readyz)
	h.handle(mux, "GET /healthcheck", h.readyz)
	if opts.Metrics != nil {
		h.handle(mux, "GET /metrics", opts.Metrics.ServeHTTP)
	}
	if opts.Rules != nil && opts.ReadAuth != nil {
		h.handle(mux, "GET /debug/rules", opts.ReadAuth(http.HandlerFunc(h.debugRules)).ServeHTTP)
	}
	mux.HandleFunc("/", h.notFound)
	return mux, nil
}

// NewDebug returns the handler for the debug listener: pprof under
// /debug/pprof/ (except cmdline, which may hold secrets), plus /metrics and /debug/rules when configured. Serve it
// only on a loopback or otherwise private address.
func NewDebug(opts Options) (http.Handler, error) {
	if opts.Checker == nil {
		opts.Checker = noChecker{}
	}
	h, err := newHandler(opts)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	// Not pprof.Cmdline: the command line may hold secrets (a Redis URL
	// with its password), and no profile needs it.
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		problem(w, http.StatusNotFound, "the command line is not served: it may hold secrets")
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	h.handle(mux, "GET /healthz", h.healthz)
	h.admin(mux)
	mux.HandleFunc("/", h.notFound)
	return mux, nil
}

// handle registers f for pattern ("METHOD /path") and remembers the path.
func (h *handler) handle(mux *http.ServeMux, pattern string, f http.HandlerFunc) {
	mux.HandleFunc(pattern, f)
	_, path, _ := strings.Cut(pattern, " ")
	h.served[path] = true
}

type noChecker struct{}

func (noChecker) Check(context.Context, service.Request) (service.Response, error) {
	return service.Response{}, errors.New("api: no checker on the debug listener")
}

func (h *handler) admin(mux *http.ServeMux) {
	if h.opts.Metrics != nil {
		h.handle(mux, "GET /metrics", h.opts.Metrics.ServeHTTP)
	}
	if h.opts.Rules != nil {
		h.handle(mux, "GET /debug/rules", h.debugRules)
	}
}

// problem writes an RFC 9457 problem+json body of type about:blank.
func problem(w http.ResponseWriter, status int, detail string) {
	headers.WriteProblem(w, headers.Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// methods names the method of each endpoint, for 405 answers.
var methods = map[string]string{
	"/v1/check": http.MethodPost, "/v1/release": http.MethodPost, "/v1/charge": http.MethodPost, "/json": http.MethodPost,
	"/healthz": http.MethodGet, "/readyz": http.MethodGet, "/healthcheck": http.MethodGet,
	"/metrics": http.MethodGet, "/debug/rules": http.MethodGet,
}

// notFound answers what no endpoint matched: 405 for a known path with the
// wrong method, 404 otherwise.
func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	if m, ok := methods[r.URL.Path]; ok && r.Method != m && h.served[r.URL.Path] {
		w.Header().Set("Allow", m)
		problem(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, m))
		return
	}
	problem(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
}

// body reads the request body within the size limit, or writes the error
// response and returns false.
func (h *handler) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	// The Content-Type is not checked: curl -d sends form encoding, and the
	// body must parse as JSON either way.
	size := int64(512) // io.ReadAll's first buffer
	if n := r.ContentLength; n > 0 && n < h.opts.MaxBodyBytes {
		// Room for the body and the read that finds its end: one
		// allocation of its size.
		size = n + 1
	}
	buf := make([]byte, 0, size)
	b, err := readAll(buf, http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than the limit max-request-bytes=%d", tooBig.Limit))
		} else {
			problem(w, http.StatusBadRequest, "body: "+err.Error())
		}
		return nil, false
	}
	return b, true
}

// readAll is io.ReadAll appending to b.
func readAll(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow as append does
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
	}
}

// decide reads the body, decodes it with decode and asks the engine; or it
// writes the error response (400 for a body decode rejects) and returns
// false.
func (h *handler) decide(w http.ResponseWriter, r *http.Request, decode func([]byte) (service.Request, error)) (service.Response, bool) {
	b, ok := h.body(w, r)
	if !ok {
		return service.Response{}, false
	}
	req, err := decode(b)
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return service.Response{}, false
	}
	resp, err := h.opts.Checker.Check(r.Context(), req)
	if err == nil {
		return resp, true
	}
	switch {
	case errors.Is(err, service.ErrInvalidRequest):
		problem(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		problem(w, http.StatusServiceUnavailable, err.Error())
	default:
		h.log.ErrorContext(r.Context(), "check failed", "err", err)
		problem(w, http.StatusInternalServerError, err.Error())
	}
	return service.Response{}, false
}

// fields adds the RateLimit, RateLimit-Policy and Retry-After fields of
// resp, as every transport renders them, when configured to.
func (h *handler) fields(w http.ResponseWriter, resp service.Response) {
	if !h.opts.ResponseHeaders {
		return
	}
	var d edge.Decision
	d.Add(&resp)
	d.Write(w.Header())
}

// DecidedAtHeader is the header Options.DecisionInstant adds to /v1/check
// answers: the latest instant at which the store decided one of the
// check's limits, in µs since the Unix epoch on the store's clock (for
// Redis, the TIME its call read), as a decimal integer.
const DecidedAtHeader = "Sluice-Decided-At"

// ChoiceHeader is the header of a /v1/check answer that chose an
// alternative (first with quota, rate_limit.choice): a structured-field
// dictionary (RFC 9651) of one member, the group, whose value is the
// chosen descriptor's last entry value as a string, with parameters key
// (a string) and index (among the group's alternatives, from 0), e.g.
// Sluice-Choice: model="gpt-4o-mini";key="model";index=1. It is left out
// when the value or key holds a byte a structured-field string cannot
// (outside printable ASCII); the body's choice field always has it.
const ChoiceHeader = "Sluice-Choice"

// choiceHeader is ChoiceHeader's value for c, ok false when there is none
// (no choice, or a value it cannot carry).
func choiceHeader(c *service.Choice) (string, bool) {
	if c == nil {
		return "", false
	}
	b := make([]byte, 0, 32+len(c.Group)+len(c.Value)+len(c.Key))
	b = append(b, c.Group...)
	b = append(b, '=')
	var ok bool
	if b, ok = appendSFString(b, c.Value); !ok {
		return "", false
	}
	b = append(b, ";key="...)
	if b, ok = appendSFString(b, c.Key); !ok {
		return "", false
	}
	b = append(b, ";index="...)
	b = strconv.AppendInt(b, int64(c.Index), 10)
	return string(b), true
}

// appendSFString appends s as a structured-field string ('"' and '\'
// escaped), or reports false when s holds a byte outside printable ASCII.
func appendSFString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return b, false
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"'), true
}

// check serves POST /v1/check: 200 with a CheckResponse for any decision
// (allowed or not: the call itself succeeded), 400 with problem+json for a
// malformed request.
func (h *handler) check(w http.ResponseWriter, r *http.Request) {
	resp, ok := h.decide(w, r, h.decodeCheck)
	if !ok {
		return
	}
	h.fields(w, resp)
	hdr := w.Header()
	if h.opts.DecisionInstant && resp.DecidedAt != 0 {
		hdr.Set(DecidedAtHeader, strconv.FormatInt(resp.DecidedAt, 10))
	}
	if v, ok := choiceHeader(resp.Choice); ok {
		hdr[ChoiceHeader] = []string{v}
	}
	// Canonical keys, values shared by every answer (net/http only reads
	// them): Set would canonicalize and allocate each.
	hdr["Content-Type"], hdr["Cache-Control"] = jsonContentType, noStore
	_, _ = w.Write(appendCheck(make([]byte, 0, 128+160*len(resp.Statuses)), &resp))
}

// The values of check's Content-Type and Cache-Control.
var jsonContentType, noStore = []string{"application/json"}, []string{"no-store"}

// decodeCheck decodes a /v1/check body with the handler's bounds.
func (h *handler) decodeCheck(b []byte) (service.Request, error) {
	return decodeCheckBytes(b, h.opts.RequestBounds)
}

// release serves POST /v1/release: 204 once the leases are given back, 400
// with problem+json for a malformed request, 503 when the store could not
// release (the leases are then freed when their limits' windows pass).
func (h *handler) release(rel Releaser) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := h.body(w, r)
		if !ok {
			return
		}
		req, leases, err := decodeRelease(bytes.NewReader(b), h.opts.RequestBounds)
		if err != nil {
			problem(w, http.StatusBadRequest, err.Error())
			return
		}
		err = rel.ReleaseLeases(r.Context(), req, leases)
		switch {
		case err == nil:
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, service.ErrInvalidRequest):
			problem(w, http.StatusBadRequest, err.Error())
		default:
			h.log.WarnContext(r.Context(), "release failed; the leases will expire", "err", err)
			problem(w, http.StatusServiceUnavailable, err.Error()+" (the leases are freed when their window passes)")
		}
	}
}

// charge serves POST /v1/charge: 200 with a ChargeResponse (the counters
// after the charge), 400 with problem+json for a malformed request, 503
// when the store could not charge (nothing may be assumed charged: the
// store's outcome is unknown).
func (h *handler) charge(w http.ResponseWriter, r *http.Request) {
	b, ok := h.body(w, r)
	if !ok {
		return
	}
	req, err := decodeCharge(bytes.NewReader(b), h.opts.RequestBounds)
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	resp, err := h.opts.Charger.Charge(r.Context(), req)
	switch {
	case err == nil:
	case errors.Is(err, service.ErrInvalidRequest):
		problem(w, http.StatusBadRequest, err.Error())
		return
	default:
		if r.Context().Err() == nil {
			h.log.WarnContext(r.Context(), "charge failed", "err", err)
		}
		note := " (the charge may or may not have been applied)"
		if errors.Is(err, sluice.ErrStoreUnavailable) {
			w.Header().Set("Retry-After", "1")
			note = " (nothing was charged)"
		}
		problem(w, http.StatusServiceUnavailable, err.Error()+note)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(marshal(EncodeChargeResponse(resp)))
}

// json serves POST /json as envoyproxy/ratelimit does: 200 and the protojson
// RateLimitResponse when allowed, 429 with it when over limit, 400 for bad
// input.
func (h *handler) json(w http.ResponseWriter, r *http.Request) {
	resp, ok := h.decide(w, r, func(b []byte) (service.Request, error) { return decodeEnvoyJSON(b, h.opts.RequestBounds) })
	if !ok {
		return
	}
	out, err := protojson.Marshal(rlsproto.ToProto(resp))
	if err != nil {
		problem(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		return
	}
	h.fields(w, resp)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if resp.OverallCode == service.CodeOverLimit {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(append(out, '\n'))
}

// healthz is the liveness probe: always 200 "ok". With ?verbose it
// answers JSON: readiness and the store's health, which are probed.
func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	if !r.URL.Query().Has("verbose") {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	st := h.probe(r.Context())
	type health struct {
		OK    bool   `json:"ok"`
		Error string `json:"error,omitempty"`
	}
	out := struct {
		Status string   `json:"status"`
		Ready  health   `json:"ready"`
		Store  *health  `json:"store,omitempty"`
		Notes  []string `json:"notes,omitempty"`
	}{Status: "ok", Ready: health{OK: st.ready == nil}, Notes: st.notes}
	if st.ready != nil {
		out.Ready.Error = st.ready.Error()
	}
	if h.opts.StoreHealth != nil {
		out.Store = &health{OK: st.store == nil}
		if st.store != nil {
			out.Store.Error = st.store.Error()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(marshal(out))
}

// readyTimeout bounds one readiness probe.
const readyTimeout = 2 * time.Second

// probed is one look at readiness and the store.
type probed struct {
	ready, store error
	notes        []string
}

// probe asks Ready and StoreHealth, each within readyTimeout.
func (h *handler) probe(ctx context.Context) probed {
	var p probed
	if h.opts.Ready != nil {
		c, cancel := context.WithTimeout(ctx, readyTimeout)
		p.ready = h.opts.Ready(c)
		cancel()
	}
	if h.opts.StoreHealth != nil {
		c, cancel := context.WithTimeout(ctx, readyTimeout)
		p.store = h.opts.StoreHealth(c)
		cancel()
	}
	if h.opts.ReadyNotes != nil {
		p.notes = h.opts.ReadyNotes()
	}
	return p
}

// readyz is the readiness probe: 503 when Ready says the service cannot
// decide, 200 otherwise; the store's health and the notes follow, one per
// line, either way.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	p := h.probe(r.Context())
	var lines []string
	if h.opts.StoreHealth != nil {
		if p.store == nil {
			lines = append(lines, "store: ok")
		} else {
			lines = append(lines, "store: down: "+p.store.Error()+" (decisions follow each limit's failure_mode)")
		}
	}
	lines = append(lines, p.notes...)
	if p.ready != nil {
		problem(w, http.StatusServiceUnavailable, "not ready: "+p.ready.Error()+suffix(lines))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, "ready\n")
	for _, l := range lines {
		_, _ = io.WriteString(w, l+"\n")
	}
}

// suffix joins lines after "; ", or returns "".
func suffix(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return "; " + strings.Join(lines, "; ")
}

// ruleJSON is one rule in /debug/rules.
type ruleJSON struct {
	Domain          string   `json:"domain"`
	ID              string   `json:"id"`
	Name            string   `json:"name,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	Algorithm       string   `json:"algorithm,omitempty"`
	Quota           int64    `json:"quota"`
	Window          string   `json:"window,omitempty"`
	Burst           int64    `json:"burst,omitempty"`
	Unit            string   `json:"unit,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit,omitempty"`
	ShadowMode      bool     `json:"shadow_mode,omitempty"`
	DetailedMetric  bool     `json:"detailed_metric,omitempty"`
	FailureMode     string   `json:"failure_mode,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
	// Switch is the admin API's kill switch when not on: "off", "shadow".
	Switch string `json:"switch,omitempty"`
	Source string `json:"source"`
}

// debugRules serves the rules in force and the last reload error.
func (h *handler) debugRules(w http.ResponseWriter, _ *http.Request) {
	src := h.opts.Rules
	var out struct {
		LastReload  *time.Time `json:"last_reload,omitempty"`
		ReloadError string     `json:"reload_error,omitempty"`
		Problems    []string   `json:"problems,omitempty"`
		// Held: the removal guard holds the files' rules back (watch.Guard).
		Held  *rules.Hold `json:"held,omitempty"`
		Rules []ruleJSON  `json:"rules"`
	}
	if hs, ok := src.(interface{ Held() *rules.Hold }); ok {
		out.Held = hs.Held()
	}
	if lr, ok := src.(interface{ LastReload() time.Time }); ok {
		t := lr.LastReload().UTC()
		out.LastReload = &t
	}
	if err := src.LastError(); err != nil {
		out.ReloadError = "the last reload failed; the rules below are the last good ones"
		var probs rules.Errors
		if errors.As(err, &probs) {
			for _, p := range probs {
				out.Problems = append(out.Problems, p.Error())
			}
		} else {
			out.Problems = []string{err.Error()}
		}
	}
	out.Rules = []ruleJSON{}
	for _, r := range src.Current().Rules() {
		rj := ruleJSON{
			Domain: r.Domain, ID: r.ID, Name: r.Name, Unlimited: r.Unlimited,
			Unit: r.Unit, RequestsPerUnit: r.RequestsPerUnit, ShadowMode: r.ShadowMode,
			DetailedMetric: r.DetailedMetric, FailureMode: r.FailureMode.String(), Replaces: r.Replaces,
			Source: fmt.Sprintf("%s:%d", r.File, r.Line),
		}
		if h.opts.RuleSwitch != nil {
			if sw := h.opts.RuleSwitch(r.Domain, r.ID); sw != "on" {
				rj.Switch = sw
			}
		}
		if !r.Unlimited {
			rj.Algorithm = r.Limit.Algorithm.String()
			rj.Quota = r.Limit.Quota
			rj.Window = r.Limit.Window.String()
			rj.Burst = r.Limit.Burst
		}
		out.Rules = append(out.Rules, rj)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(marshal(out))
}
