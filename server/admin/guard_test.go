package admin

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func basic(tok string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+tok))
}

// TestWriteGuard: a state-changing request is admitted only with a bearer
// token, a JSON body and no sign of another site having sent it; reads
// still take HTTP Basic and are not checked for origin.
func TestWriteGuard(t *testing.T) {
	toks, err := ParseTokens([]byte("alice rw " + rwToken + "\nreader ro " + roToken + "\nbilling charge " + chargeToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := ParseTokens([]byte("alice rw " + rwToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := trusted.Guard(GuardOptions{TrustedOrigins: []string{"https://ops.example.net"}}); err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := &handler{opts: Options{Tokens: toks}}
	reach := func(w http.ResponseWriter, _ *http.Request, _ string) { w.WriteHeader(http.StatusTeapot) }
	write := h.auth(true, reach)
	charge := toks.Charge()(ok)
	read := toks.Read()(ok)
	json := "application/json"
	for _, tc := range []struct {
		name            string
		h               http.Handler
		method, auth    string
		ctype, body     string
		origin, secSite string
		want            int
		inDetail        string
	}{
		{"bearer json", write, "POST", "Bearer " + rwToken, json, "{}", "", "", http.StatusTeapot, ""},
		{"bearer json with charset", write, "PUT", "Bearer " + rwToken, json + "; charset=utf-8", "{}", "", "", http.StatusTeapot, ""},
		{"same-origin fetch", write, "POST", "Bearer " + rwToken, json, "{}", "http://example.com", "same-origin", http.StatusTeapot, ""},
		{"typed by a user (none)", write, "POST", "Bearer " + rwToken, json, "{}", "", "none", http.StatusTeapot, ""},
		{"text/plain body", write, "POST", "Bearer " + rwToken, "text/plain", "{}", "", "", http.StatusUnsupportedMediaType, "application/json"},
		{"form body", charge, "POST", "Bearer " + rwToken, "application/x-www-form-urlencoded", "a=b", "", "", http.StatusUnsupportedMediaType, "application/json"},
		{"no content type", write, "POST", "Bearer " + rwToken, "", "{}", "", "", http.StatusUnsupportedMediaType, "application/json"},
		{"body-less delete", write, "DELETE", "Bearer " + rwToken, "", "", "", "", http.StatusTeapot, ""},
		{"basic on a write", write, "POST", basic(rwToken), json, "{}", "", "", http.StatusUnauthorized, "Basic"},
		{"basic on a charge", charge, "POST", basic(rwToken), json, "{}", "", "", http.StatusUnauthorized, "Basic"},
		{"cross-site", write, "POST", "Bearer " + rwToken, json, "{}", "", "cross-site", http.StatusForbidden, "cross-origin"},
		{"same-site other port", charge, "POST", "Bearer " + rwToken, json, "{}", "http://example.com:81", "same-site", http.StatusForbidden, "cross-origin"},
		{"foreign Origin only", write, "POST", "Bearer " + rwToken, json, "{}", "http://evil.example", "", http.StatusForbidden, "cross-origin"},
		{"opaque Origin", charge, "POST", "Bearer " + rwToken, json, "{}", "null", "", http.StatusForbidden, "cross-origin"},
		{"cross-site read", read, "GET", basic(roToken), "", "", "http://evil.example", "cross-site", http.StatusTeapot, ""},
		{"basic read", read, "GET", basic(roToken), "", "", "", "", http.StatusTeapot, ""},
		{"basic post to a read guard", read, "POST", basic(roToken), json, "{}", "", "", http.StatusUnauthorized, "Basic"},
		{"trusted origin", trusted.Charge()(ok), "POST", "Bearer " + rwToken, json, "{}", "https://ops.example.net", "cross-site", http.StatusTeapot, ""},
		{"untrusted origin beside a trusted one", trusted.Charge()(ok), "POST", "Bearer " + rwToken, json, "{}", "https://evil.example", "cross-site", http.StatusForbidden, "cross-origin"},
	} {
		req := httptest.NewRequest(tc.method, "http://example.com/x", strings.NewReader(tc.body))
		for k, v := range map[string]string{"Authorization": tc.auth, "Content-Type": tc.ctype, "Origin": tc.origin, "Sec-Fetch-Site": tc.secSite} {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		rec := httptest.NewRecorder()
		tc.h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s: status %d %s, want %d", tc.name, rec.Code, rec.Body, tc.want)
			continue
		}
		if tc.want != http.StatusTeapot {
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("%s: Content-Type %q, want application/problem+json", tc.name, ct)
			}
			if !strings.Contains(rec.Body.String(), tc.inDetail) {
				t.Errorf("%s: body %s, want it to name %q", tc.name, rec.Body, tc.inDetail)
			}
		}
	}
}

// TestAuthFailuresLimited: N wrong tokens from one address are answered
// 401, the next 429 with Retry-After (and then every request from it, a
// right token too, until a unit is back); a right token from another
// address is still admitted; successes take nothing from the budget; every
// failure is counted by reason, and the log has one line per address per
// minute with the count, never the token.
func TestAuthFailuresLimited(t *testing.T) {
	const n = 5
	clock := &fakeClock{now: time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC)}
	ms := memory.New(memory.Options{Now: clock.Now})
	defer ms.Close()
	lim, err := sluice.NewLimiter(ms, sluice.Limit{Algorithm: sluice.GCRA, Quota: n, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	var logs bytes.Buffer
	toks, err := ParseTokens([]byte("alice rw " + rwToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = toks.Guard(GuardOptions{
		Failures:  lim,
		OnFailure: func(r string) { mu.Lock(); counts[r]++; mu.Unlock() },
		Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
		Now:       clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := (&handler{opts: Options{Tokens: toks}}).auth(false, func(w http.ResponseWriter, _ *http.Request, _ string) { w.WriteHeader(http.StatusTeapot) })
	try := func(addr, tok string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "/admin/v1/quotas", nil)
		req.RemoteAddr = addr + ":40000"
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const wrong = "wrong-token-0123456789abcdef"
	attacker, operator := "192.0.2.1", "192.0.2.2"
	for i := range 100 { // successes take nothing from the budget
		if rec := try(attacker, rwToken); rec.Code != http.StatusTeapot {
			t.Fatalf("right token #%d: status %d, want 418", i, rec.Code)
		}
	}
	for i := range n {
		if rec := try(attacker, wrong); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token #%d: status %d, want 401", i+1, rec.Code)
		}
	}
	rec := try(attacker, wrong)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "12" {
		t.Fatalf("wrong token #%d: status %d Retry-After %q, want 429 and 12 (one failure per 60s/%d comes back)", n+1, rec.Code, rec.Header().Get("Retry-After"), n)
	}
	if rec := try(attacker, rwToken); rec.Code != http.StatusTooManyRequests {
		t.Errorf("right token from the throttled address: status %d, want 429 (the token is not looked at)", rec.Code)
	}
	if rec := try(operator, rwToken); rec.Code != http.StatusTeapot {
		t.Errorf("right token from another address: status %d, want 418", rec.Code)
	}
	clock.Add(12 * time.Second)
	if rec := try(attacker, wrong); rec.Code != http.StatusUnauthorized {
		t.Errorf("wrong token after Retry-After: status %d, want 401 (one failure came back)", rec.Code)
	}
	if rec := try(attacker, wrong); rec.Code != http.StatusTooManyRequests {
		t.Errorf("the next wrong token: status %d, want 429", rec.Code)
	}
	mu.Lock()
	if counts[FailInvalid] != n+1 || counts[FailThrottled] != 3 || counts[FailMissing] != 0 {
		t.Errorf("failures counted %v, want invalid %d, throttled 3", counts, n+1)
	}
	mu.Unlock()
	lines := strings.Count(logs.String(), "admin authentication failed")
	if lines != 1 || !strings.Contains(logs.String(), "client=192.0.2.1") || !strings.Contains(logs.String(), "failures=1") {
		t.Errorf("log within the first minute:\n%s\nwant one line naming 192.0.2.1 with failures=1", logs.String())
	}
	clock.Add(time.Minute)
	try(attacker, wrong)
	if lines := strings.Count(logs.String(), "admin authentication failed"); lines != 2 || !strings.Contains(logs.String(), "failures=9") {
		t.Errorf("log after a minute:\n%s\nwant a second line with failures=9 (the 8 since the first line and this one)", logs.String())
	}
	if strings.Contains(logs.String(), wrong) || strings.Contains(logs.String(), rwToken) {
		t.Error("the log holds a token")
	}
}
