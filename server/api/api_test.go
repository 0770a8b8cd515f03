package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/rules/watch"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

const testRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: bucket
    rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 1, burst: 3}
`

// newEngine returns a real engine over a memory store with a fake clock.
func newEngine(t testing.TB, src service.RuleSource) *service.Engine {
	t.Helper()
	clock := storetest.NewClock()
	st := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { st.Close() })
	if src == nil {
		snap, err := rules.Parse("edge.yaml", []byte(testRules), rules.Options{})
		if err != nil {
			t.Fatalf("rules.Parse: %v", err)
		}
		src = service.StaticRules{Snapshot: snap}
	}
	e, err := service.New(service.DefaultConfig(), src, st, nil, nil)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	return e
}

func do(t *testing.T, h http.Handler, method, path, body string) (int, http.Header, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, rec.Header(), string(b)
}

func TestDecodeCheckRequest(t *testing.T) {
	tests := []struct {
		name, body, wantErr string
	}{
		{"empty body", ``, "body: empty"},
		{"not JSON", `{"domain":`, "body: truncated JSON"},
		{"syntax", `{"domain" "x"}`, "invalid JSON at byte"},
		{"unknown field", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}],"hitz":1}`, `unknown field "hitz"`},
		{"duplicate member", `{"domain":"edge","domain":"other","descriptors":[{"entries":[{"key":"a"}]}]}`, `duplicate member "domain"`},
		{"duplicate nested member", `{"domain":"edge","descriptors":[{"entries":[{"key":"a","value":"x","value":"y"}]}]}`, `duplicate member "descriptors[0].entries[0].value"`},
		{"every unknown at once", `{"domain":"edge","descriptors":[{"entries":[{"kee":"a"}]}],"hitz":1}`, `unknown field "descriptors[0].entries[0].kee"; unknown field "hitz"`},
		{"wrong type", `{"domain":5}`, "domain: got JSON number, want a string"},
		{"negative hits", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":-1}]}`, "hits: got JSON number -1, want a non-negative integer"},
		{"trailing data", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}]} {}`, "exactly one JSON object"},
		{"array", `[]`, "body: got JSON array, want an object"},
		{"empty domain", `{"descriptors":[{"entries":[{"key":"a"}]}]}`, "domain: empty"},
		{"no descriptors", `{"domain":"edge","descriptors":[]}`, "descriptors: none given"},
		{"no entries", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]},{}]}`, "descriptors[1].entries: none given"},
		{"empty key", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"},{"value":"b"}]}]}`, "descriptors[0].entries[1].key: empty"},
		{"bad unit", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requests_per_unit":1,"unit":"fortnight"}}]}`, `descriptors[0].limit.unit: unknown unit "fortnight"`},
		{"limit with an algorithm", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requests_per_unit":1,"unit":"second","algorithm":"gcra"}}]}`, `descriptors[0].limit.algorithm: not allowed in a request's limit`},
		{"limit without a unit", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requests_per_unit":1}}]}`, `descriptors[0].limit.unit: required`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeCheckRequest(strings.NewReader(tt.body))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("DecodeCheckRequest(%s) error = %v, want one containing %q", tt.body, err, tt.wantErr)
			}
		})
	}

	req, err := DecodeCheckRequest(strings.NewReader(`{"domain":"edge","hits":4,"descriptors":[
		{"entries":[{"key":"a","value":"1"},{"key":"b"}],"hits":0},
		{"entries":[{"key":"c","value":"2"}],"limit":{"requests_per_unit":9,"unit":"Minute"}}]}`))
	if err != nil {
		t.Fatalf("DecodeCheckRequest: %v", err)
	}
	d0, d1 := req.Descriptors[0], req.Descriptors[1]
	if req.Domain != "edge" || req.Hits != 4 || len(req.Descriptors) != 2 ||
		len(d0.Entries) != 2 || d0.Entries[0] != (rules.Entry{Key: "a", Value: "1"}) || d0.Entries[1] != (rules.Entry{Key: "b"}) ||
		d0.Hits == nil || *d0.Hits != 0 || d0.Limit != nil ||
		d1.Hits != nil || d1.Limit == nil || *d1.Limit != (service.LimitOverride{RequestsPerUnit: 9, Unit: "minute"}) {
		t.Errorf("DecodeCheckRequest = %+v, want the request as written (unit lower-cased)", req)
	}
}

func TestCheckEndpoint(t *testing.T) {
	h, err := New(Options{Checker: newEngine(t, nil), ResponseHeaders: true, MaxBodyBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]},{"entries":[{"key":"ldap","value":"x"}]},{"entries":[{"key":"nope","value":"x"}]}]}`
	wants := []struct {
		code      string
		remaining int64
		allowed   bool
	}{{"OK", 1, true}, {"OK", 0, true}, {"OVER_LIMIT", 0, false}}
	for i, w := range wants {
		code, hdr, out := do(t, h, "POST", "/v1/check", body)
		if code != 200 {
			t.Fatalf("#%d: POST /v1/check = %d %s, want 200", i, code, out)
		}
		var got CheckResponse
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("#%d: body %s: %v", i, out, err)
		}
		s := got.Statuses
		if got.Allowed != w.allowed || got.Code != w.code || len(s) != 3 ||
			s[0].Code != w.code || s[0].Remaining != w.remaining || s[0].Rule != "remote_address" || s[0].Limit == nil || s[0].Limit.WindowMs != 3600_000 ||
			!s[1].Unlimited || s[1].Limit != nil || s[2].Code != "OK" || s[2].Rule != "" || s[2].Limit != nil {
			t.Errorf("#%d: body = %s, want code %s remaining %d, then unlimited, then no match", i, out, w.code, w.remaining)
		}
		if w.code == "OVER_LIMIT" {
			if s[0].RetryAfterMs <= 0 || hdr.Get("Retry-After") == "" {
				t.Errorf("#%d: over limit without retry_after_ms (%d) or Retry-After (%q)", i, s[0].RetryAfterMs, hdr.Get("Retry-After"))
			}
		}
		if hdr.Get("Content-Type") != "application/json" || hdr.Get("RateLimit") == "" || hdr.Get("RateLimit-Policy") == "" {
			t.Errorf("#%d: headers = %v, want JSON with RateLimit and RateLimit-Policy", i, hdr)
		}
	}

	do(t, h, "POST", "/v1/check", `{"domain":"edge","descriptors":[{"entries":[{"key":"bucket","value":"b"}]}]}`)
	code, _, out := do(t, h, "POST", "/v1/check", `{"domain":"edge","descriptors":[{"entries":[{"key":"bucket","value":"b"}]}]}`)
	if code != 200 || !strings.Contains(out, `"delay_ms":1000`) {
		t.Errorf("second leaky bucket check (1/s) = %d %s, want 200 with delay_ms 1000", code, out)
	}

	for _, tt := range []struct {
		method, path, body string
		code               int
		want               string
	}{
		{"POST", "/v1/check", `{"domain":""}`, 400, `"detail":"domain: empty"`},
		{"POST", "/v1/check", strings.Repeat(" ", 600), 413, "larger than the limit max-request-bytes=512"},
		{"GET", "/v1/check", "", 405, ""},
		{"POST", "/v1/check", `{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":9007199254740993}]}`, 400, "invalid request"},
		{"GET", "/nowhere", "", 404, "no endpoint GET /nowhere"},
		{"GET", "/metrics", "", 404, ""},
		{"GET", "/debug/rules", "", 404, ""},
	} {
		code, hdr, out := do(t, h, tt.method, tt.path, tt.body)
		if code != tt.code || !strings.Contains(out, tt.want) {
			t.Errorf("%s %s %.40q = %d %s, want %d containing %q", tt.method, tt.path, tt.body, code, out, tt.code, tt.want)
		}
		if code >= 400 && code != 405 && hdr.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: error Content-Type %q, want application/problem+json", tt.method, tt.path, hdr.Get("Content-Type"))
		}
	}
}

func TestEnvoyJSONEndpoint(t *testing.T) {
	h, err := New(Options{Checker: newEngine(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`
	for i, want := range []int{200, 200, 429, 429} {
		code, _, out := do(t, h, "POST", "/json", body)
		wantOverall := map[int]string{200: `"overallCode":"OK"`, 429: `"overallCode":"OVER_LIMIT"`}[want]
		if code != want || !strings.Contains(strings.ReplaceAll(out, " ", ""), wantOverall) {
			t.Errorf("#%d: POST /json = %d %s, want %d with %s", i, code, out, want, wantOverall)
		}
	}
	for _, tt := range []struct{ body, want string }{
		{``, "body:"},
		{`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}]}],"nope":1}`, "nope"},
		{`{"domain":"edge"}`, "descriptors: none given"},
		{`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"limit":{"requestsPerUnit":1}}]}`, "limit.unit"},
	} {
		code, _, out := do(t, h, "POST", "/json", tt.body)
		if code != 400 || !strings.Contains(out, tt.want) {
			t.Errorf("POST /json %q = %d %s, want 400 containing %q", tt.body, code, out, tt.want)
		}
	}
}

func TestHealthAndReadiness(t *testing.T) {
	e := newEngine(t, nil)
	ready := errors.New("store not answering")
	var readyErr error
	h, err := New(Options{Checker: e, Ready: func(context.Context) error { return readyErr }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		err        error
		path       string
		code       int
		wantInBody string
	}{
		{nil, "/healthz", 200, "ok"},
		{nil, "/readyz", 200, "ready"},
		{nil, "/healthcheck", 200, "ready"},
		{ready, "/healthz", 200, "ok"},
		{ready, "/readyz", 503, "not ready: store not answering"},
		{ready, "/healthcheck", 503, "not ready: store not answering"},
	} {
		readyErr = tt.err
		code, _, out := do(t, h, "GET", tt.path, "")
		if code != tt.code || !strings.Contains(out, tt.wantInBody) {
			t.Errorf("ready error %v: GET %s = %d %q, want %d containing %q", tt.err, tt.path, code, out, tt.code, tt.wantInBody)
		}
	}
	if _, err := New(Options{}); err == nil {
		t.Errorf("New without a Checker: no error, want one")
	}

	// The store's health is reported beside readiness, not decisive.
	storeErr := errors.New("dial tcp 10.0.0.1:6379: connection refused")
	h, err = New(Options{Checker: e, Ready: func(context.Context) error { return nil }, StoreHealth: func(context.Context) error { return storeErr }})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, out := do(t, h, "GET", "/readyz", ""); code != 200 || !strings.Contains(out, "ready\nstore: down: dial tcp") {
		t.Errorf("store down, ready: GET /readyz = %d %q, want 200 with the store's line", code, out)
	}
	code, hdr, out := do(t, h, "GET", "/healthz?verbose", "")
	if code != 200 || hdr.Get("Content-Type") != "application/json" || !strings.Contains(out, `"ready":{"ok":true}`) || !strings.Contains(out, `"store":{"ok":false,"error":"dial tcp`) {
		t.Errorf("GET /healthz?verbose = %d %s, want JSON: ready, store not ok with its error", code, out)
	}
	storeErr = nil
	if code, _, out := do(t, h, "GET", "/readyz", ""); code != 200 || !strings.Contains(out, "store: ok") {
		t.Errorf("store up: GET /readyz = %d %q, want 200 with store: ok", code, out)
	}
}

// TestDebugRules: /debug/rules lists the rules in force and, after a bad
// reload, every problem with file and line while the last good rules stay.
func TestDebugRules(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(file, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := watch.New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Checker: newEngine(t, w), Rules: w}
	open, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, out := do(t, open, "GET", "/debug/rules", ""); code != 404 {
		t.Errorf("GET /debug/rules on the public listener without ReadAuth = %d %s, want 404 (it names every limit and file path)", code, out)
	}
	dh, err := NewDebug(opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.ReadAuth = func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer reader" {
				problem(w, http.StatusUnauthorized, "token needed")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	guarded, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, out := do(t, guarded, "GET", "/debug/rules", ""); code != 401 {
		t.Errorf("GET /debug/rules behind ReadAuth without a token = %d %s, want 401", code, out)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer reader")
		guarded.ServeHTTP(w, r)
	})
	code, _, out := do(t, h, "GET", "/debug/rules", "")
	if code != 200 || !strings.Contains(out, `"id":"remote_address"`) || !strings.Contains(out, `"source":"`) || strings.Contains(out, "reload_error") {
		t.Fatalf("GET /debug/rules = %d %s, want 200 listing remote_address with its source and no error", code, out)
	}
	bad := "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - key: a\n    bogus: 1\n"
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err == nil {
		t.Fatalf("Reload of a broken file: no error")
	}
	for _, hh := range []http.Handler{h, dh} {
		code, _, out = do(t, hh, "GET", "/debug/rules", "")
		var got struct {
			ReloadError string   `json:"reload_error"`
			Problems    []string `json:"problems"`
			Rules       []struct{ ID string }
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("/debug/rules body %s: %v", out, err)
		}
		if code != 200 || got.ReloadError == "" || len(got.Problems) < 2 || !strings.Contains(got.Problems[0], "edge.yaml:4") || len(got.Rules) != 3 {
			t.Errorf("GET /debug/rules after a bad reload = %d %s, want every problem with file:line and the 3 last good rules", code, out)
		}
	}
	code, _, out = do(t, dh, "GET", "/debug/pprof/", "")
	if code != 200 || !strings.Contains(out, "goroutine") {
		t.Errorf("debug GET /debug/pprof/ = %d, want 200 with the profile index", code)
	}
	if code, _, _ := do(t, dh, "POST", "/v1/check", `{}`); code != 404 {
		t.Errorf("debug POST /v1/check = %d, want 404 (checks only on the public listener)", code)
	}
}

func TestReleaseEndpoint(t *testing.T) {
	snap, err := rules.Parse("edge.yaml", []byte(`domain: edge
descriptors:
  - key: slots
    rate_limit: {algorithm: concurrency, requests_per_unit: 1, window: 1m}
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 100}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Checker: newEngine(t, service.StaticRules{Snapshot: snap})})
	if err != nil {
		t.Fatal(err)
	}
	check := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]},{"entries":[{"key":"slots","value":"a"}]}]}`
	checkOnce := func(wantCode string) CheckResponse {
		t.Helper()
		code, _, out := do(t, h, "POST", "/v1/check", check)
		var got CheckResponse
		if err := json.Unmarshal([]byte(out), &got); code != 200 || err != nil {
			t.Fatalf("POST /v1/check = %d %s (%v)", code, out, err)
		}
		if got.Code != wantCode {
			t.Fatalf("POST /v1/check: code %s, want %s: %s", got.Code, wantCode, out)
		}
		return got
	}
	first := checkOnce("OK")
	if first.Statuses[0].Lease != 0 || first.Statuses[1].Lease == 0 {
		t.Fatalf("leases = %d, %d; want none for the rate limit, one for the concurrency limit", first.Statuses[0].Lease, first.Statuses[1].Lease)
	}
	denied := checkOnce("OVER_LIMIT")
	if denied.Statuses[1].Lease != 0 {
		t.Errorf("denied check holds lease %d", denied.Statuses[1].Lease)
	}
	_, _, out := do(t, h, "POST", "/v1/check", check)
	if strings.Contains(out, `"lease"`) {
		t.Errorf("a status without a lease names one: %s", out)
	}

	release := fmt.Sprintf(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]},{"entries":[{"key":"slots","value":"a"}]}],"leases":[0,%d]}`, first.Statuses[1].Lease)
	for i := range 2 { // the second time is harmless
		if code, hdr, out := do(t, h, "POST", "/v1/release", release); code != 204 || out != "" || hdr.Get("Cache-Control") != "no-store" {
			t.Fatalf("#%d: POST /v1/release = %d %q, want 204", i, code, out)
		}
	}
	checkOnce("OK")
	checkOnce("OVER_LIMIT")

	for _, tt := range []struct {
		method, body string
		code         int
		want         string
	}{
		{"POST", `{"domain":"edge","descriptors":[{"entries":[{"key":"slots","value":"a"}]}]}`, 400, "leases: 0 given for 1 descriptors"},
		{"POST", `{"domain":"edge","descriptors":[{"entries":[{"key":"slots","value":"a"}]}],"leases":[1,2]}`, 400, "leases: 2 given for 1 descriptors"},
		{"POST", `{"domain":"edge","descriptors":[{"entries":[{"key":"slots","value":"a"}]}],"leases":[-1]}`, 400, "want a non-negative integer"},
		{"POST", `{"domain":"edge","descriptors":[{"entries":[{"key":"slots","value":"a"}]}],"leases":[1],"lease":1}`, 400, `unknown field \"lease\"`},
		{"POST", `{"domain":"","descriptors":[{"entries":[{"key":"slots","value":"a"}]}],"leases":[1]}`, 400, "domain: empty"},
		{"GET", "", 405, ""},
	} {
		code, _, out := do(t, h, tt.method, "/v1/release", tt.body)
		if code != tt.code || !strings.Contains(out, tt.want) {
			t.Errorf("%s /v1/release %.60q = %d %s, want %d containing %q", tt.method, tt.body, code, out, tt.code, tt.want)
		}
	}
}

// downStore is a store that is down.
type downStore struct{}

func (downStore) Take(context.Context, []sluice.Op, []sluice.Result) error {
	return errors.New("connection refused")
}

func TestReleaseEndpointStoreDown(t *testing.T) {
	snap, err := rules.Parse("edge.yaml", []byte(`domain: edge
descriptors:
  - key: slots
    rate_limit: {algorithm: concurrency, requests_per_unit: 1, window: 1m}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, downStore{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Checker: e})
	if err != nil {
		t.Fatal(err)
	}
	code, hdr, out := do(t, h, "POST", "/v1/release", `{"domain":"edge","descriptors":[{"entries":[{"key":"slots","value":"a"}]}],"leases":[7]}`)
	if code != 503 || !strings.Contains(out, "connection refused") || hdr.Get("Content-Type") != "application/problem+json" {
		t.Errorf("POST /v1/release with the store down = %d %s, want 503 problem+json", code, out)
	}
}

// checkerOnly is a Checker that cannot release.
type checkerOnly struct{ Checker }

func TestReleaseEndpointNeedsReleaser(t *testing.T) {
	h, err := New(Options{Checker: checkerOnly{newEngine(t, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, _ := do(t, h, "POST", "/v1/release", `{}`); code != 404 {
		t.Errorf("POST /v1/release without a Releaser = %d, want 404", code)
	}
}

// TestEveryDecoderRefusesDuplicates: each JSON body the HTTP API reads
// refuses a member named twice, naming it, instead of keeping the last.
func TestEveryDecoderRefusesDuplicates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decode func([]byte) error
		body   string
	}{
		{"/v1/check", func(b []byte) error { _, err := DecodeCheckRequest(bytes.NewReader(b)); return err },
			`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":1,"hits":0}]}`},
		{"/v1/release", func(b []byte) error { _, _, err := DecodeReleaseRequest(bytes.NewReader(b)); return err },
			`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":1,"hits":0}],"leases":[1]}`},
		{"/v1/charge", func(b []byte) error { _, err := DecodeChargeRequest(bytes.NewReader(b)); return err },
			`{"domain":"edge","descriptors":[{"entries":[{"key":"a"}],"hits":1,"hits":0}]}`},
		{"/json", func(b []byte) error { _, err := DecodeEnvoyJSON(b); return err },
			`{"domain":"edge","descriptors":[{"entries":[{"key":"a","value":"v"}]}],"hits_addend":1,"hits_addend":0}`},
	} {
		err := tc.decode([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), "duplicate") || !strings.Contains(err.Error(), "hits") {
			t.Errorf("%s with a repeated hits member: %v, want an error naming the duplicate", tc.name, err)
		}
	}
}

// TestDegradedStatusHidesRemaining: a status the store did not decide
// (failed_open, failed_closed) carries no remaining (0 would claim nothing
// is left); a local fallback's status, which read a counter, does.
func TestDegradedStatusHidesRemaining(t *testing.T) {
	lim := &LimitJSON{RequestsPerUnit: 10, Unit: "second", WindowMs: 1000}
	for _, tc := range []struct {
		degraded string
		want     bool
	}{{"", true}, {"local", true}, {"failed_open", false}, {"failed_closed", false}} {
		b, err := json.Marshal(CheckStatus{Code: "OK", Limit: lim, Degraded: tc.degraded})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(b), `"remaining":0`) && strings.Contains(string(b), `"reset_after_ms":0`); got != tc.want {
			t.Errorf("degraded %q: %s; remaining and reset_after_ms present: %v, want %v", tc.degraded, b, got, tc.want)
		}
	}
}
