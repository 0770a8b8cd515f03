package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/notify"
	"github.com/sluice-rl/sluice/server/admin"
)

const notifyRuleFile = `domain: llm
descriptors:
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 10, notify_at: [50, 100]}
`

// hookLog is a real HTTP receiver of webhook POSTs.
type hookLog struct {
	mu     sync.Mutex
	bodies [][]byte
	sigs   []string
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.bodies, h.sigs = append(h.bodies, b), append(h.sigs, r.Header.Get(notify.SignatureHeader))
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookLog) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.bodies)
}

// TestNotifyServe: sluice serve with --notify-webhook and
// --notify-secret-file tells each notify_at level a budget crosses, over
// gRPC and HTTP alike: a signed POST (verified with the secret), a
// sluice_notify_fired_total series per level, and a row sluice
// notifications lists (table and JSON). The secret is in no log line.
func TestNotifyServe(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "llm.yaml"), []byte(notifyRuleFile), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\nviewer ro "+e2eRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "whsec-e2e-0123456789abcdef"
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hooks := &hookLog{}
	recv := httptest.NewServer(hooks)
	t.Cleanup(recv.Close)
	s := startServer(t, dir, func(c *serveConfig) {
		c.Tenants.AdminTokenFile = tokFile
		c.Notify.Webhook, c.Notify.SecretFile = recv.URL+"/hooks?token=receiver-token-42", secretFile
		if err := c.Notify.load(); err != nil {
			t.Fatal(err)
		}
	})
	// Five hits over gRPC reach 50 %, five over HTTP 100 %.
	for range 5 {
		resp := s.should(t, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("team", "ml")}})
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("gRPC check: %v", resp.OverallCode)
		}
	}
	for range 5 {
		if code, body := post(t, s.base+"/v1/check", `{"domain":"llm","descriptors":[{"entries":[{"key":"team","value":"ml"}]}]}`); code != 200 {
			t.Fatalf("HTTP check: %d %s", code, body)
		}
	}
	waitUntil(t, "two webhook POSTs accepted", 10*time.Second, func() bool { return hooks.count() == 2 && s.notifier.Stats().Webhook.Sent == 2 })
	hooks.mu.Lock()
	levels := []int{}
	for i, b := range hooks.bodies {
		if err := notify.Verify([]byte(secret), hooks.sigs[i], b, time.Now(), time.Hour); err != nil {
			t.Errorf("POST %d: %v", i, err)
		}
		var f notify.Fired
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		if f.Domain != "llm" || f.Rule != "team" || f.Key != "team=ml" || f.Limit != 10 {
			t.Errorf("POST %d: %s", i, b)
		}
		levels = append(levels, f.Level)
	}
	hooks.mu.Unlock()
	if len(levels) != 2 || levels[0] != 50 || levels[1] != 100 {
		t.Errorf("levels posted %v, want 50 then 100", levels)
	}
	_, metrics := get(t, s.base+"/metrics")
	for _, want := range []string{`sluice_notify_fired_total{domain="llm",level="50",rule="team"} 1`, `sluice_notify_fired_total{domain="llm",level="100",rule="team"} 1`,
		`sluice_notify_webhook_sent_total 2`, `sluice_notify_crossings_total 2`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	viewer := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRO, "SLUICE_ADMIN_URL": s.base}
	out, err := sluiceCmd(t, viewer, "notifications", "--output", "json")
	if err != nil {
		t.Fatalf("sluice notifications: %v\n%s", err, out)
	}
	var page admin.NotificationsJSON
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Notifications) != 2 || page.Notifications[0].Level != 100 {
		t.Fatalf("sluice notifications --output json: %v\n%s", err, out)
	}
	out, err = sluiceCmd(t, viewer, "notifications", "--limit", "1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "FIRED AT") || !strings.Contains(lines[1], "100%") ||
		!strings.Contains(lines[1], "team=ml") || !strings.HasPrefix(lines[2], "more: run again with --cursor ") {
		t.Errorf("sluice notifications --limit 1: %v\n%s", err, out)
	}
	for _, sec := range []string{secret, "receiver-token-42"} {
		if strings.Contains(s.logs.String(), sec) {
			t.Errorf("a log line holds the secret %q", sec)
		}
	}
}

// --notify-webhook needs a signing key of 16 bytes or more, and the key
// file needs the webhook.
func TestNotifyConfig(t *testing.T) {
	for _, tc := range []struct {
		c    notifyConfig
		want string
	}{
		{notifyConfig{Webhook: "https://hooks.example/x"}, "--notify-secret-file: required"},
		{notifyConfig{Webhook: "https://hooks.example/x", SecretFile: "f", secret: []byte("short")}, "want at least 16"},
		{notifyConfig{Webhook: "hooks.example/x", SecretFile: "f", secret: []byte("0123456789abcdef")}, "--notify-webhook: want an http or https URL"},
		{notifyConfig{SecretFile: "f"}, "given without --notify-webhook"},
	} {
		var got []string
		tc.c.validate(func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
		if len(got) != 1 || !strings.Contains(got[0], tc.want) {
			t.Errorf("validate(%+v) = %q, want one error like %q", tc.c, got, tc.want)
		}
	}
	ok := notifyConfig{Webhook: "https://hooks.example/x", SecretFile: "f", secret: []byte("0123456789abcdef")}
	ok.validate(func(f string, a ...any) { t.Errorf("valid config: "+f, a...) })
}

const notifyFleetRules = `domain: llm
descriptors:
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 10, notify_at: [50, 100]}
  - key: spend
    rate_limit: {unit: hour, requests_per_unit: 100, settle: after, notify_at: [50, 100]}
`

// TestNotifyFleetRedis: two servers sharing one Redis (single and
// Cluster), checked concurrently, one over gRPC and one over HTTP, with
// charges into debt that make each engine report levels again: every
// level is POSTed exactly once for the fleet.
func TestNotifyFleetRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"single", func(t *testing.T) string { return redistest.Start(t).URL() }},
		{"cluster", func(t *testing.T) string { return redistest.StartCluster(t).URL() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url(t)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "llm.yaml"), []byte(notifyFleetRules), 0o644); err != nil {
				t.Fatal(err)
			}
			secretFile := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(secretFile, []byte("whsec-fleet-0123456789abcdef"), 0o600); err != nil {
				t.Fatal(err)
			}
			hooks := &hookLog{}
			recv := httptest.NewServer(hooks)
			t.Cleanup(recv.Close)
			edit := withRedis(url, func(c *serveConfig) {
				c.Notify.Webhook, c.Notify.SecretFile = recv.URL, secretFile
				if err := c.Notify.load(); err != nil {
					t.Fatal(err)
				}
			})
			a, b := startServer(t, dir, edit), startServer(t, dir, edit)
			var wg sync.WaitGroup
			for i := range 12 {
				wg.Go(func() {
					for _, d := range []struct {
						key  string
						hits int
					}{{"team", 1}, {"spend", 30}} {
						if i%2 == 0 {
							h := uint32(d.hits)
							a.should(t, &rlsv3.RateLimitRequest{Domain: "llm", HitsAddend: h, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(d.key, "x")}})
						} else {
							body := fmt.Sprintf(`{"domain":"llm","hits":%d,"descriptors":[{"entries":[{"key":%q,"value":"x"}]}]}`, d.hits, d.key)
							if code, out := post(t, b.base+"/v1/check", body); code != 200 && code != 429 {
								t.Errorf("HTTP check: %d %s", code, out)
							}
						}
					}
				})
			}
			wg.Wait()
			handled := func(s *testServer) bool {
				st := s.notifier.Stats()
				var fired uint64
				for _, n := range st.Fired {
					fired += n
				}
				return st.Heard == st.Held+fired+st.ClaimErrors+st.Dropped && st.Webhook.Sent == fired
			}
			waitUntil(t, "both notifiers to handle what they heard", 10*time.Second, func() bool { return handled(a) && handled(b) })
			hooks.mu.Lock()
			defer hooks.mu.Unlock()
			seen := map[string]int{}
			for _, body := range hooks.bodies {
				var f notify.Fired
				if err := json.Unmarshal(body, &f); err != nil {
					t.Fatal(err)
				}
				seen[fmt.Sprintf("%s@%d", f.Rule, f.Level)]++
			}
			want := map[string]int{"team@50": 1, "team@100": 1, "spend@50": 1, "spend@100": 1}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("the fleet POSTed %v, want each level once: %v", seen, want)
			}
			if held := a.notifier.Stats().Held + b.notifier.Stats().Held; held == 0 {
				t.Error("no crossing was found claimed: the test did not make the engines report a level twice")
			}
		})
	}
}
