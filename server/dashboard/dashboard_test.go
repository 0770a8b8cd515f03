package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/observe"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/service/promstats"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/tenant"
)

const testRules = `
domain: edge
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 100
      tiers:
        free: {requests_per_unit: 20}
        pro: {requests_per_unit: 1000}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`

const testToken = "read-token-for-tests"

// bearerAuth admits requests carrying testToken as a bearer token or as a
// basic-auth password (what a browser sends).
func bearerAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pass, basic := r.BasicAuth()
		if r.Header.Get("Authorization") != "Bearer "+testToken && !(basic && pass == testToken) {
			w.Header().Set("WWW-Authenticate", `Basic realm="sluice admin"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// instance is one engine with its dashboard.
type instance struct {
	eng *service.Engine
	h   *Handler
	srv *httptest.Server
}

func newInstance(t testing.TB, name string, fleet Fleet) *instance {
	t.Helper()
	snap, err := rules.Parse("edge.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	tr := observe.NewTracker(observe.Options{})
	cfg := service.DefaultConfig()
	cfg.Observer = tr
	tenants := tenant.NewRegistry(nil, tenant.Options{})
	tenants.Set(tenant.NewSnapshot([]tenant.Record{{Tenant: "acme", Tier: rules.TierPro}}, nil, time.Now()))
	cfg.Overrides = tenants
	eng, err := service.New(cfg, service.StaticRules{Snapshot: snap}, st, promstats.New(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Tracker: tr, Gatherer: reg, Auth: bearerAuth, Fleet: fleet, Instance: name,
		Health: func() []stack.NodeHealth { return []stack.NodeHealth{{Node: "127.0.0.1:6379", State: "closed"}} },
		Reload: func() ReloadStatus { return ReloadStatus{OK: true, LastReload: time.Now()} }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &instance{eng: eng, h: h, srv: srv}
}

func (in *instance) check(t testing.TB, key, value string) service.Code {
	t.Helper()
	resp, err := in.eng.Check(context.Background(), service.Request{Domain: "edge",
		Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: decoding: %v", url, err)
		}
	}
	return resp.StatusCode
}

func TestTopAndStats(t *testing.T) {
	in := newInstance(t, "a", nil)
	for range 5 {
		in.check(t, "remote_address", "6.6.6.6") // 3 allowed, 2 denied
	}
	in.check(t, "remote_address", "1.1.1.1")
	in.check(t, "path", "/x")
	in.check(t, "path", "/x") // shadow: would deny

	var top TopResponse
	if code := getJSON(t, in.srv.URL+"/admin/v1/top?domain=edge&rule=remote_address&n=10&window=5m", &top); code != 200 {
		t.Fatalf("/admin/v1/top = %d, want 200", code)
	}
	if len(top.Rules) != 1 {
		t.Fatalf("top rules = %d, want 1: %+v", len(top.Rules), top)
	}
	r := top.Rules[0]
	if r.Checks != 6 || r.Denials != 2 || len(r.TopDenied) != 1 || r.TopDenied[0] != (observe.Offender{Key: "remote_address=6.6.6.6", Denials: 2, Checks: 5}) {
		t.Errorf("top report = %+v, want 6 checks, 2 denials, remote_address=6.6.6.6 denied 2 of 5", r)
	}
	var st Stats
	if code := getJSON(t, in.srv.URL+"/admin/v1/stats", &st); code != 200 {
		t.Fatalf("/admin/v1/stats = %d, want 200", code)
	}
	got := map[string]float64{}
	for _, d := range st.Decisions {
		got[d.Rule+"/"+d.Outcome] = d.Count
	}
	for k, want := range map[string]float64{"remote_address/allowed": 4, "remote_address/denied": 2, "path/shadow_denied": 1, "path/allowed": 1} {
		if got[k] != want {
			t.Errorf("stats decisions %s = %v, want %v", k, got[k], want)
		}
	}
	if st.Latency.Count != 8 {
		t.Errorf("latency count = %d, want 8 checks", st.Latency.Count)
	}
	if len(st.Breakers) != 1 || st.Breakers[0].State != "closed" || len(st.Reload) != 1 || !st.Reload[0].OK {
		t.Errorf("breakers %+v reload %+v, want one closed node and an ok reload", st.Breakers, st.Reload)
	}
}

func TestFleetMergesInstances(t *testing.T) {
	fleet := NewMemoryFleet()
	a, b := newInstance(t, "a", fleet), newInstance(t, "b", fleet)
	for range 4 {
		a.check(t, "remote_address", "6.6.6.6") // 1 denied on a
		b.check(t, "remote_address", "6.6.6.6") // 1 denied on b
	}
	b.check(t, "remote_address", "7.7.7.7")
	if err := b.h.publish(context.Background()); err != nil {
		t.Fatal(err)
	}
	var top TopResponse
	getJSON(t, a.srv.URL+"/admin/v1/top?rule=remote_address", &top)
	if len(top.Instances) != 2 || len(top.Rules) != 1 {
		t.Fatalf("fleet top: instances %v, rules %d; want 2 instances, 1 rule", top.Instances, len(top.Rules))
	}
	if r := top.Rules[0]; r.Checks != 9 || r.Denials != 2 || r.TopDenied[0].Key != "remote_address=6.6.6.6" || r.TopDenied[0].Denials != 2 {
		t.Errorf("fleet report = %+v, want 9 checks, 2 denials of 6.6.6.6", r)
	}
	var st Stats
	getJSON(t, a.srv.URL+"/admin/v1/stats", &st)
	var denied float64
	for _, d := range st.Decisions {
		if d.Outcome == "denied" {
			denied += d.Count
		}
	}
	if denied != 2 || st.Latency.Count != 9 {
		t.Errorf("fleet stats: %v denied, %d checks timed; want 2 and 9", denied, st.Latency.Count)
	}
}

func TestAuthAndBadInput(t *testing.T) {
	in := newInstance(t, "a", nil)
	for _, path := range []string{"/dashboard/", "/admin/v1/stats", "/admin/v1/top"} {
		resp, err := http.Get(in.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %d, want 401", path, resp.StatusCode)
		}
	}
	for _, q := range []string{"n=0", "n=101", "n=x", "window=0s", "window=2h", "window=soon", "domain=" + strings.Repeat("d", 300)} {
		if code := getJSON(t, in.srv.URL+"/admin/v1/top?"+q, nil); code != http.StatusBadRequest {
			t.Errorf("/admin/v1/top?%.30s = %d, want 400", q, code)
		}
	}
	if code := getJSON(t, in.srv.URL+"/dashboard/", nil); code != 200 {
		t.Errorf("/dashboard/ with a token = %d, want 200", code)
	}
	if _, err := New(Options{Tracker: observe.NewTracker(observe.Options{}), Gatherer: prometheus.NewRegistry()}); err == nil {
		t.Error("New without Auth: nil error, want one")
	}
}

func BenchmarkCheckObserved(b *testing.B) {
	for _, observed := range []bool{false, true} {
		b.Run(fmt.Sprintf("observed=%v", observed), func(b *testing.B) {
			snap, _ := rules.Parse("edge.yaml", []byte(testRules), rules.Options{})
			st := memory.New(memory.Options{})
			defer st.Close()
			cfg := service.DefaultConfig()
			if observed {
				cfg.Observer = observe.NewTracker(observe.Options{})
			}
			eng, _ := service.New(cfg, service.StaticRules{Snapshot: snap}, st, nil, nil)
			reqs := make([]service.Request, 1024)
			for i := range reqs {
				reqs[i] = service.Request{Domain: "edge", Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: fmt.Sprintf("10.0.%d.%d", i/256, i%256)}}}}}
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_, _ = eng.Check(ctx, reqs[i%len(reqs)])
			}
		})
	}
}

func TestMergeStatsSumsTiers(t *testing.T) {
	a := Snapshot{Instance: "a", Stats: Stats{Tiers: []Decision{{Rule: "pro", Outcome: "allowed", Count: 3}, {Rule: "free", Outcome: "denied", Count: 1}}}}
	b := Snapshot{Instance: "b", Stats: Stats{Tiers: []Decision{{Rule: "pro", Outcome: "allowed", Count: 4}}}}
	got := mergeStats([]Snapshot{a, b}).Tiers
	want := []Decision{{Rule: "free", Outcome: "denied", Count: 1}, {Rule: "pro", Outcome: "allowed", Count: 7}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged tiers = %v, want %v", got, want)
	}
}
