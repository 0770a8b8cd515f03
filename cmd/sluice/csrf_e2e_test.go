package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath returns a headless-capable Chromium, skipping the test when
// there is none (failing under CI=true, where .ci/run installs Debian's
// chromium).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found: CI must install Debian's chromium package (.ci/run does)")
	}
	t.Skip("chromium not found: install Debian's chromium package to run the browser test")
	return ""
}

// browser starts a headless Chromium for the test, as the dashboard's
// browser test does.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return ctx
}

// sharedRemaining looks at the "shared" limit of testdata/rules/failure
// (50/hour) without charging.
func sharedRemaining(t *testing.T, base string) int64 {
	t.Helper()
	code, body := post(t, base+"/v1/check", `{"domain":"failure","hits":0,"descriptors":[{"entries":[{"key":"shared","value":"v"}]}]}`)
	m := regexp.MustCompile(`"remaining":(\d+)`).FindStringSubmatch(body)
	if code != 200 || m == nil {
		t.Fatalf("check: %d %s", code, body)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// metricValue reads one sample of the server's /metrics (read token).
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	_, body := adminDo(t, "GET", base+"/metrics", csrfRW, "")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("/metrics has no %s", series)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

const csrfRW = "csrf-rw-token-0123456789"

// attackPage is what another origin serves: no-cors fetches and form
// posts, with the browser's credentials, to reset and to refund quota.
const attackPage = `<!doctype html><html><body>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<form id="f1" method="POST" target="sink1" enctype="text/plain" action="%[1]s/admin/v1/reset">
<input name='{"domain":"failure","descriptor":[{"key":"shared","value":"v"}],"x":"' value='"}'></form>
<form id="f2" method="POST" target="sink2" enctype="text/plain" action="%[1]s/v1/charge">
<input name='{"domain":"failure","hits":-10,"descriptors":[{"entries":[{"key":"shared","value":"v"}]}],"x":"' value='"}'></form>
<script>
async function attack() {
  const opts = body => ({method: "POST", mode: "no-cors", credentials: "include", body: JSON.stringify(body)});
  await fetch("%[1]s/admin/v1/reset", opts({domain: "failure", descriptor: [{key: "shared", value: "v"}]}));
  await fetch("%[1]s/v1/charge", opts({domain: "failure", hits: -10, descriptors: [{entries: [{key: "shared", value: "v"}]}]}));
  const loaded = name => new Promise(r => document.querySelector("iframe[name=" + name + "]").addEventListener("load", r, {once: true}));
  const l1 = loaded("sink1"), l2 = loaded("sink2");
  document.getElementById("f1").submit();
  document.getElementById("f2").submit();
  await Promise.all([l1, l2]);
  return "done";
}
</script></body></html>`

// TestCrossSiteWritesRefusedInBrowser: a real Chromium holds the admin
// origin's HTTP Basic credentials (after opening the dashboard as
// user:token@host, which then fills in); a page
// of another origin (another loopback port) then posts, no-cors and by
// form, to POST /admin/v1/reset and to POST /v1/charge with negative hits.
// The counters do not move, every one of the four requests reached the
// server and was refused as cross-origin, and the admin origin's own page
// cannot write with the Basic credentials either; with a bearer token and
// a JSON body, a write from that page moves the counter (the control).
func TestCrossSiteWritesRefusedInBrowser(t *testing.T) {
	t.Parallel() // its own server and browser (a profile of its own); it mostly waits for them
	ctx := browser(t)
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+csrfRW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), func(c *serveConfig) { c.Tenants.AdminTokenFile = tokFile })
	for range 10 {
		checkJSON(t, s, "shared")
	}
	if got := sharedRemaining(t, s.base); got != 40 {
		t.Fatalf("after 10 checks: %d remaining, want 40", got)
	}
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, attackPage, s.base)
	}))
	defer evil.Close()

	// The browser learns the Basic credentials for the admin origin (from
	// the URL, as a user opening user:token@host would), then loads the
	// dashboard without them: it is served, so they are cached.
	// Opened so, the dashboard fills in (its polls are not refused for
	// the credentials in the page's URL).
	admin := strings.Replace(s.base, "http://", "http://ops:"+csrfRW+"@", 1)
	if err := chromedp.Do(ctx, chromedp.Navigate(admin+"/dashboard/"),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("#rules tbody tr").length > 0`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		upd, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("updated").textContent`))
		t.Fatalf("the dashboard opened as user:token@host stays empty: %v (%q)", err, upd)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/dashboard/")); err != nil {
		t.Fatalf("opening the dashboard: %v", err)
	}
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/admin/v1/stats").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 200 {
		t.Fatalf("the browser's same-origin GET /admin/v1/stats = %d (%v), want 200: it must hold the Basic credentials", status, err)
	}
	before := metricValue(t, s.base, `sluice_auth_failures_total{reason="cross_origin"}`)

	if err := chromedp.Do(ctx, chromedp.Navigate(evil.URL)); err != nil {
		t.Fatalf("opening the other origin's page: %v", err)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`attack()`, chromedp.EvalAwaitPromise)); err != nil || got != "done" {
		t.Fatalf("the attack page: %q %v", got, err)
	}
	if got := sharedRemaining(t, s.base); got != 40 {
		t.Errorf("after the cross-origin reset and refund: %d remaining, want 40 (nothing moved)", got)
	}
	if got := metricValue(t, s.base, `sluice_auth_failures_total{reason="cross_origin"}`) - before; got != 4 {
		t.Errorf("cross-origin refusals counted: %v, want 4 (two fetches, two forms)", got)
	}

	// The admin origin's own page: the cached Basic credentials may read,
	// not write; a bearer token with a JSON body may.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.base+"/dashboard/")); err != nil {
		t.Fatalf("back to the dashboard: %v", err)
	}
	const charge = `JSON.stringify({domain: "failure", hits: 5, descriptors: [{entries: [{key: "shared", value: "v"}]}]})`
	status, err = chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/v1/charge", {method: "POST", headers: {"Content-Type": "application/json"}, body: `+charge+`}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 401 {
		t.Errorf("same-origin charge with the Basic credentials only = %d (%v), want 401", status, err)
	}
	if got := sharedRemaining(t, s.base); got != 40 {
		t.Errorf("after a charge with Basic credentials: %d remaining, want 40", got)
	}
	status, err = chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/v1/charge", {method: "POST", headers: {"Content-Type": "application/json", "Authorization": "Bearer `+csrfRW+`"}, body: `+charge+`}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 200 {
		t.Errorf("same-origin charge with a bearer token = %d (%v), want 200", status, err)
	}
	if got := sharedRemaining(t, s.base); got != 35 {
		t.Errorf("after a bearer charge of 5: %d remaining, want 35", got)
	}
}
