package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

const edgeRules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, unit: minute, requests_per_unit: 2}
  - key: api_key
    descriptors:
      - key: path
        rate_limit: {name: per_key_route, unit: second, requests_per_unit: 100}
`

func TestGatewayEndToEnd(t *testing.T) {
	var gotXFF []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotXFF = append(gotXFF, r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Upstream", "yes")
		_, _ = io.WriteString(w, "upstream says hi to "+r.URL.Path)
	}))
	defer upstream.Close()

	clock := storetest.NewClock()
	snap, err := rules.Parse("edge.yaml", []byte(edgeRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New(memory.Options{Now: clock.Now})
	defer mem.Close()
	engine, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse([]byte(`
upstream: ` + upstream.URL + `
rules: ./unused-here
domain: edge
trusted_proxies: [127.0.0.1]
descriptors:
  - remote_address=ip
  - api_key=header:X-API-Key, path=route
legacy_headers: true
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Default()
	h, err := New(cfg, engine, mem, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(h)
	defer gw.Close()

	send := func(xff, key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", gw.URL+"/v1/items", nil)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET through the gateway: %v", err)
		}
		return resp
	}
	steps := []struct {
		xff, key   string
		wantCode   int
		wantLimit  string
		wantPolicy string
	}{
		{"198.51.100.1", "k1", 200, `"per_ip";r=1;t=60, "per_key_route";r=99;t=1`, `"per_ip";q=2;w=60, "per_key_route";q=100;w=1`},
		{"198.51.100.1", "", 200, `"per_ip";r=0;t=60`, `"per_ip";q=2;w=60`},
		{"198.51.100.1", "", 429, `"per_ip";r=0;t=60`, `"per_ip";q=2;w=60`},
		{"198.51.100.2", "", 200, `"per_ip";r=1;t=60`, `"per_ip";q=2;w=60`},
	}
	for i, s := range steps {
		resp := send(s.xff, s.key)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.wantCode {
			t.Errorf("step %d: status %d, want %d (body %s)", i, resp.StatusCode, s.wantCode, body)
		}
		if got := resp.Header.Get("RateLimit"); got != s.wantLimit {
			t.Errorf("step %d: RateLimit = %q, want %q", i, got, s.wantLimit)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != s.wantPolicy {
			t.Errorf("step %d: RateLimit-Policy = %q, want %q", i, got, s.wantPolicy)
		}
		if resp.Header.Get("X-Ratelimit-Remaining") == "" {
			t.Errorf("step %d: legacy fields missing", i)
		}
		switch s.wantCode {
		case 200:
			if resp.Header.Get("X-Upstream") != "yes" || !strings.Contains(string(body), "/v1/items") {
				t.Errorf("step %d: response did not come from upstream: %s", i, body)
			}
		case 429:
			if resp.Header.Get("Retry-After") != "60" || resp.Header.Get("Content-Type") != headers.ContentTypeProblem {
				t.Errorf("step %d: 429 with Retry-After %q Content-Type %q", i, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
			}
		}
	}
	// The upstream sees the hop the gateway appended after the client's.
	if len(gotXFF) != 3 || gotXFF[0] != "198.51.100.1, 127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For = %q, want 3 requests, first %q", gotXFF, "198.51.100.1, 127.0.0.1")
	}
}

func TestGatewayUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	mem := memory.New(memory.Options{})
	defer mem.Close()
	snap, _ := rules.Parse("edge.yaml", []byte(edgeRules), rules.Options{})
	engine, _ := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	cfg := Config{Upstream: url, Rules: "r", Domain: "edge"}
	cfg.Default()
	var reported error
	h, err := New(cfg, engine, mem, func(_ *http.Request, err error) { reported = err })
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	h.ServeHTTP(w, r)
	if w.Code != 502 || w.Header().Get("Content-Type") != headers.ContentTypeProblem || w.Header().Get("RateLimit") == "" {
		t.Errorf("upstream down: status %d, Content-Type %q, RateLimit %q; want 502 problem with the fields",
			w.Code, w.Header().Get("Content-Type"), w.Header().Get("RateLimit"))
	}
	if reported == nil {
		t.Errorf("upstream error not reported")
	}
}

func TestParseAndValidate(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string // substring; "" for none
	}{
		{"minimal", "upstream: http://u:1\nrules: r\ndomain: d\n", ""},
		{"full", `
upstream: https://api.internal
listen: 127.0.0.1:9000
rules: ./rules
domain: edge
trusted_proxies: [10.0.0.0/8, "::1"]
descriptors: ["remote_address=ip", "api_key=header:X-API-Key, path=route", "generic_key=static:all, method=method"]
concurrency: [{name: inflight, limit: 10, timeout: 30s, key: "api_key=header:X-API-Key", shed: true}]
fail_closed: true
legacy_headers: true
max_delay: 2s
`, ""},
		{"empty file", "", "upstream: required"},
		{"remote service", "upstream: http://u:1\nrls: 127.0.0.1:8081\ndomain: d\n", ""},
		{"rules and rls", "upstream: http://u:1\nrules: r\nrls: 127.0.0.1:8081\ndomain: d\n", "give one"},
		{"bad rls", "upstream: http://u:1\nrls: nowhere\ndomain: d\n", "rls:"},
		{"unknown field", "upstream: http://u:1\nrules: r\ndomain: d\nlisten_addr: x\n", "line 4: field listen_addr not found"},
		{"bad upstream", "upstream: ftp://x\nrules: r\ndomain: d\n", "upstream"},
		{"bad proxy", "upstream: http://u:1\nrules: r\ndomain: d\ntrusted_proxies: [nope]\n", "trusted_proxies"},
		{"bad descriptor", "upstream: http://u:1\nrules: r\ndomain: d\ndescriptors: [\"ip\"]\n", "descriptors[0]"},
		{"bad source", "upstream: http://u:1\nrules: r\ndomain: d\ndescriptors: [\"k=cookie:x\"]\n", "is not ip"},
		{"bad concurrency", "upstream: http://u:1\nrules: r\ndomain: d\nconcurrency: [{limit: 0}]\n", "concurrency[0].name"},
		{"two-entry concurrency key", "upstream: http://u:1\nrules: r\ndomain: d\nconcurrency: [{name: c, limit: 1, key: \"a=ip,b=route\"}]\n", "must be one entry"},
		{"bad duration", "upstream: http://u:1\nrules: r\ndomain: d\nmax_delay: soon\n", "line 4"},
		{"syntax", "upstream: [\n", "gateway config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if err == nil {
				c.Default()
				err = c.Validate()
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseDescriptor(t *testing.T) {
	r := httptest.NewRequest("PUT", "http://x/a/b", nil)
	r.RemoteAddr = "192.0.2.4:5"
	r.Header.Set("X-API-Key", "secret")
	fs, err := ParseDescriptor(" ip = ip ,k=header:X-API-Key, p=route,m=method, g=static:v:w, n=ipnet:24:64", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ip=192.0.2.4", "k=secret", "p=/a/b", "m=PUT", "g=v:w", "n=192.0.2.0/24"}
	if len(fs) != len(want) {
		t.Fatalf("got %d entries, want %d", len(fs), len(want))
	}
	for i, f := range fs {
		e, ok := f(r)
		if got := e.Key + "=" + e.Value; !ok || got != want[i] {
			t.Errorf("entry %d = %q (%v), want %q", i, got, ok, want[i])
		}
	}
	for _, bad := range []string{"", "k", "=ip", "k=", "k=ip:x", "k=header:", "k=header:bad name", "k=static:", "k=ip,", "k=ipnet", "k=ipnet:33:64", "k=ipnet:32:129", "k=ipnet:a:b", "k=ipnet:-1:64"} {
		if _, err := ParseDescriptor(bad, nil); err == nil {
			t.Errorf("ParseDescriptor(%q): no error", bad)
		}
	}
}

// FuzzParseConfig: any file gives a config or an error, never a panic, and a
// config that validates builds a gateway.
func FuzzParseConfig(f *testing.F) {
	f.Add("upstream: http://u:1\nrules: r\ndomain: d\n")
	f.Add("upstream: http://u:1\nrules: r\ndomain: d\ndescriptors: [\"a=ip, b=header:X\"]\nconcurrency: [{name: c, limit: 3}]\n")
	f.Add("max_delay: -5s\nconcurrency: [{timeout: 1h}]")
	f.Add("&a [*a]")
	mem := memory.New(memory.Options{})
	f.Cleanup(func() { mem.Close() })
	f.Fuzz(func(t *testing.T, data string) {
		c, err := Parse([]byte(data))
		if err != nil {
			return
		}
		c.Default()
		if c.Validate() != nil {
			return
		}
		if _, err := New(c, nil, mem, nil); err == nil {
			return // nil checker is refused by httplimit.New; a valid config must reach it
		} else if !strings.Contains(err.Error(), "Checker") {
			t.Fatalf("valid config %q: New: %v", data, err)
		}
	})
}

// FuzzParseDescriptor: never panics; an accepted spec yields entries that run.
func FuzzParseDescriptor(f *testing.F) {
	for _, s := range []string{"remote_address=ip", "a=header:X-Key, b=route", "g=static:x", "k=header:", ",,,=", "k=ip:"} {
		f.Add(s)
	}
	r := httptest.NewRequest("GET", "/", nil)
	f.Fuzz(func(t *testing.T, spec string) {
		fs, err := ParseDescriptor(spec, nil)
		if err != nil {
			return
		}
		if len(fs) == 0 {
			t.Fatalf("ParseDescriptor(%q) accepted no entries", spec)
		}
		for _, f := range fs {
			f(r)
		}
	})
}

func TestGatewayDropsUntrustedForwarding(t *testing.T) {
	var got []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("X-Forwarded-For"))
	}))
	defer upstream.Close()
	mem := memory.New(memory.Options{})
	defer mem.Close()
	snap, _ := rules.Parse("edge.yaml", []byte(edgeRules), rules.Options{})
	engine, _ := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	cfg := Config{Upstream: upstream.URL, Rules: "r", Domain: "edge"} // trusts nobody
	cfg.Default()
	h, err := New(cfg, engine, mem, nil)
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(h)
	defer gw.Close()
	req, _ := http.NewRequest("GET", gw.URL, nil)
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For = %q, want only the gateway's hop %q", got, "127.0.0.1")
	}
	if want := `"per_ip";r=1;t=60`; !strings.HasPrefix(resp.Header.Get("RateLimit"), `"per_ip";r=1;t=`) {
		t.Errorf("RateLimit = %q, want the spoofed address ignored (%s)", resp.Header.Get("RateLimit"), want)
	}
}
