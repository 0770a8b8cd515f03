package gateway

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/shed"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

func TestShedConfigErrorsHaveLines(t *testing.T) {
	c, err := ParseFile("gw.yaml", []byte(`upstream: http://127.0.0.1:9
rules: ./r
domain: edge
shed:
  priority_from: cookie:x
  priority:
    routes:
      - {prefix: /a, default: critical}
      - prefix: /b
        default: critical
        max: sheddable
  adaptive:
    percentile: 1.5
  fleet:
    capacity: 10
    reserve: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	c.Default()
	err = c.Validate()
	if err == nil {
		t.Fatal("Validate: nil, want errors")
	}
	for _, want := range []string{
		"gw.yaml:5: shed.priority_from: ",
		"gw.yaml:11: shed.priority.routes[1].max: sheddable is below the route's default critical",
		"gw.yaml:13: shed.adaptive.percentile: 1.5 is outside (0, 1]",
		"gw.yaml:16: shed.fleet.reserve: 1 is outside [0, 1)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors:\n%v\nwant a line containing %q", err, want)
		}
	}
}

func TestShedConfigUnknownPriority(t *testing.T) {
	_, err := ParseFile("gw.yaml", []byte("shed:\n  priority:\n    default: urgent\n"))
	if err == nil || !strings.Contains(err.Error(), "gw.yaml") || !strings.Contains(err.Error(), "gw.yaml:3: shed.priority.default") || !strings.Contains(err.Error(), "urgent") {
		t.Errorf("ParseFile: %v, want an error naming gw.yaml, line 3 and urgent", err)
	}
	_, err = ParseFile("gw.yaml", []byte("shed:\n  fleet:\n    capacty: 3\n"))
	if err == nil || !strings.Contains(err.Error(), "capacty") {
		t.Errorf("ParseFile: %v, want an unknown-field error", err)
	}
}

// TestGatewayShedsBeforeRateLimits: through the gateway, the fleet layer
// sheds non-critical requests past its share, the 503 names the layer, and
// the rate limit is not charged for them.
func TestGatewayShedsBeforeRateLimits(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	clock := storetest.NewClock()
	snap, err := rules.Parse("edge.yaml", []byte(edgeRules), rules.Options{}) // per_ip: 2 a minute
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New(memory.Options{Now: clock.Now})
	defer mem.Close()
	engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseFile("gw.yaml", []byte(`
upstream: `+upstream.URL+`
rules: ./unused-here
domain: edge
shed:
  priority_from: header:X-Priority
  priority: {max: critical}
  fleet: {capacity: 2, reserve: 0.5, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Default()
	h, s, err := NewHandler(cfg, engine, mem, shed.Options{Now: clock.Now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func(remote, priority string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://gw.test/x", nil)
		r.RemoteAddr = remote
		if priority != "" {
			r.Header.Set("X-Priority", priority)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := get("192.0.2.1:1", ""); w.Code != 200 {
		t.Fatalf("first request: %d, want 200", w.Code)
	}
	w := get("192.0.2.1:1", "")
	if w.Code != 503 {
		t.Fatalf("second default request: %d, want 503 (past the fleet's non-critical share)", w.Code)
	}
	if p, _ := headers.ParseProblem(w.Body.Bytes()); p.Layer != "fleet_usage" {
		t.Errorf("problem %s, want layer fleet_usage", w.Body)
	}
	// The critical request uses the reserved share, and the 503 above did
	// not charge per_ip (2 a minute): this one is its second, still allowed.
	if w := get("192.0.2.1:1", "critical"); w.Code != 200 {
		t.Errorf("critical request: %d %s, want 200", w.Code, w.Body)
	}
	if got := s.Stats().Shed[shed.LayerFleet][shed.Default]; got != 1 {
		t.Errorf("fleet sheds of default: %d, want 1", got)
	}
}

// FuzzParseShed: ParseFile and Validate never panic on a shed section, and a
// configuration they accept builds a Shedder.
func FuzzParseShed(f *testing.F) {
	f.Add("shed:\n  priority: {routes: [{prefix: /a, default: critical}]}\n  adaptive: {}\n  fleet: {capacity: 5}\n")
	f.Add("shed:\n  worker: {max_inflight: 3, hold: 2s}\n  levels: {test: 0.1}\n")
	f.Add("shed: {priority: {routes: [{max: test}, {max: bogus}]}}")
	f.Add("shed: [1, 2]")
	f.Fuzz(func(t *testing.T, data string) {
		c, err := ParseFile("f.yaml", []byte("upstream: http://u:1\nrules: r\ndomain: d\n"+data))
		if err != nil {
			return
		}
		c.Default()
		if c.Validate() != nil || c.Shed == nil {
			return
		}
		mem := memory.New(memory.Options{})
		defer mem.Close()
		if _, err := shed.New(c.Shed.Config, shed.Options{Store: mem}); err != nil {
			t.Fatalf("valid config %q: shed.New: %v", data, err)
		}
	})
}

func TestExampleShedConfig(t *testing.T) {
	data, err := os.ReadFile("../../examples/gateway/gateway-shed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseFile("gateway-shed.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	c.Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("the example is invalid: %v", err)
	}
	if c.Shed == nil || c.Shed.Fleet == nil || c.Shed.Fleet.Capacity != 5000 || c.Shed.Priority.Routes[2].Max != shed.Critical {
		t.Errorf("example decoded as %+v", c.Shed)
	}
}

// TestFleetCapacitySharedThroughRedis: two gateways (two proxies) whose
// fleet layer shares one real Redis enforce one capacity together: of 4 a
// minute with half reserved, 2 non-critical requests pass fleet-wide and
// critical ones take the reserve.
func TestFleetCapacitySharedThroughRedis(t *testing.T) {
	rd := redistest.Start(t)
	shared, err := redis.New(redis.Options{URL: rd.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	snap, err := rules.Parse("edge.yaml", []byte("domain: edge\ndescriptors:\n  - {key: remote_address, rate_limit: {unit: minute, requests_per_unit: 1000}}\n"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseFile("gw.yaml", []byte(`
upstream: `+upstream.URL+`
rules: ./unused-here
domain: edge
shed:
  priority_from: header:X-Priority
  priority: {max: critical}
  fleet: {capacity: 4, reserve: 0.5, window: 1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Default()
	var gateways []http.Handler
	for range 2 {
		mem := memory.New(memory.Options{})
		defer mem.Close()
		engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := NewHandler(cfg, engine, mem, shed.Options{Store: shared}, nil)
		if err != nil {
			t.Fatal(err)
		}
		gateways = append(gateways, h)
	}
	count := func(priority string, n int) (ok, shed int) {
		for i := range n {
			r := httptest.NewRequest("GET", "http://gw.test/x", nil)
			r.RemoteAddr = "192.0.2.1:1"
			if priority != "" {
				r.Header.Set("X-Priority", priority)
			}
			w := httptest.NewRecorder()
			gateways[i%2].ServeHTTP(w, r)
			switch w.Code {
			case 200:
				ok++
			case 503:
				shed++
			default:
				t.Fatalf("status %d, want 200 or 503", w.Code)
			}
		}
		return ok, shed
	}
	if ok, shed := count("", 6); ok != 2 || shed != 4 {
		t.Errorf("default requests over two gateways: %d passed, %d shed; want 2 and 4 (the fleet's non-critical share)", ok, shed)
	}
	if ok, shed := count("critical", 4); ok != 2 || shed != 2 {
		t.Errorf("critical requests: %d passed, %d shed; want 2 (the rest of the capacity) and 2", ok, shed)
	}
}
