package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestClientIP(t *testing.T) {
	tp, err := ParseTrustedProxies("10.0.0.0/8", "192.0.2.1", "2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		trusted *TrustedProxies
		remote  string
		xff     []string
		fwd     []string
		want    string
	}{
		{"direct client", tp, "203.0.113.5:4000", nil, nil, "203.0.113.5"},
		{"untrusted peer's XFF ignored", tp, "203.0.113.5:4000", []string{"1.2.3.4"}, nil, "203.0.113.5"},
		{"nil set trusts nobody", nil, "10.0.0.1:80", []string{"1.2.3.4"}, nil, "10.0.0.1"},
		{"one trusted proxy", tp, "10.0.0.1:80", []string{"198.51.100.7"}, nil, "198.51.100.7"},
		{"spoofed left part ignored", tp, "10.0.0.1:80", []string{"6.6.6.6, 198.51.100.7"}, nil, "198.51.100.7"},
		{"chain of trusted proxies", tp, "10.0.0.1:80", []string{"6.6.6.6, 198.51.100.7, 10.1.1.1", "192.0.2.1"}, nil, "198.51.100.7"},
		{"all hops trusted: leftmost", tp, "10.0.0.1:80", []string{"10.2.2.2, 10.3.3.3"}, nil, "10.2.2.2"},
		{"garbage hop stops at last known", tp, "10.0.0.1:80", []string{"198.51.100.7, nonsense"}, nil, "10.0.0.1"},
		{"empty XFF", tp, "10.0.0.1:80", []string{""}, nil, "10.0.0.1"},
		{"Forwarded preferred", tp, "10.0.0.1:80", []string{"6.6.6.6"}, []string{"for=198.51.100.9;proto=https"}, "198.51.100.9"},
		{"Forwarded quoted v6 with port", tp, "10.0.0.1:80", nil, []string{`for="[2001:db9::17]:4711"`}, "2001:db9::17"},
		{"Forwarded chain", tp, "10.0.0.1:80", nil, []string{`for=6.6.6.6, for=198.51.100.9;by=10.0.0.1, For="10.4.4.4"`}, "198.51.100.9"},
		{"Forwarded v4 with port", tp, "10.0.0.1:80", nil, []string{`for="198.51.100.9:1234"`}, "198.51.100.9"},
		{"Forwarded unknown", tp, "10.0.0.1:80", nil, []string{"for=unknown"}, "10.0.0.1"},
		{"Forwarded quoted comma", tp, "10.0.0.1:80", nil, []string{`for=198.51.100.9;x="a,b"`}, "198.51.100.9"},
		{"trusted v6 proxy", tp, "[2001:db8::1]:443", []string{"198.51.100.7"}, nil, "198.51.100.7"},
		{"mapped v4 is one key", tp, "[::ffff:203.0.113.5]:1", nil, nil, "203.0.113.5"},
		{"no port", tp, "203.0.113.5", nil, nil, "203.0.113.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range tt.fwd {
				r.Header.Add("Forwarded", v)
			}
			got, ok := tt.trusted.ClientIP(r)
			if !ok || got != tt.want {
				t.Errorf("ClientIP = %q, %v; want %q, true", got, ok, tt.want)
			}
		})
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "not an address"
	if got, ok := tp.ClientIP(r); ok {
		t.Errorf("ClientIP with a bad RemoteAddr = %q, true; want false", got)
	}
}

func TestParseTrustedProxies(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "example.com", "1.2.3"} {
		if _, err := ParseTrustedProxies(bad); err == nil {
			t.Errorf("ParseTrustedProxies(%q): no error", bad)
		}
	}
	tp, err := ParseTrustedProxies(" 10.1.2.3/8 ", "", "::ffff:192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"10.200.0.1": true, "11.0.0.1": false, "192.0.2.1": true} {
		if got := tp.Trusted(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Trusted(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestKeyFuncs(t *testing.T) {
	r := httptest.NewRequest("POST", "http://api.test/v1/orders/7", nil)
	r.Header.Set("X-API-Key", "k-1")
	r = r.WithContext(WithUser(r.Context(), "alice"))
	tests := []struct {
		name      string
		f         KeyFunc
		r         *http.Request
		wantKey   string
		wantValue string
		wantOK    bool
	}{
		{"header", Header("api_key", "x-api-key"), r, "api_key", "k-1", true},
		{"missing header", Header("api_key", "Authorization"), r, "", "", false},
		{"user", User("user"), r, "user", "alice", true},
		{"anonymous", User("user"), httptest.NewRequest("GET", "/", nil), "", "", false},
		{"route from path", Route("path"), r, "path", "/v1/orders/7", true},
		{"method", Method("method"), r, "method", "POST", true},
		{"static", Static("generic_key", "api"), r, "generic_key", "api", true},
	}
	for _, tt := range tests {
		e, ok := tt.f(tt.r)
		if ok != tt.wantOK || e.Key != tt.wantKey || e.Value != tt.wantValue {
			t.Errorf("%s: got {%q %q} %v, want {%q %q} %v", tt.name, e.Key, e.Value, ok, tt.wantKey, tt.wantValue, tt.wantOK)
		}
	}
	// Inside a ServeMux the pattern is the route.
	mux := http.NewServeMux()
	var got string
	mux.HandleFunc("GET /v1/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		e, _ := Route("path")(r)
		got = e.Value
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/orders/9", nil))
	if want := "GET /v1/orders/{id}"; got != want {
		t.Errorf("Route inside a mux = %q, want %q", got, want)
	}
}

func TestClientNet(t *testing.T) {
	tests := []struct {
		remote string
		v4, v6 int
		want   string
	}{
		{"198.51.100.77:1", 32, 64, "198.51.100.77"},
		{"198.51.100.77:1", 24, 64, "198.51.100.0/24"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1", 32, 64, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1", 32, 56, "2001:db8:1::/56"},
		{"[2001:db8::1]:1", 32, 200, "2001:db8::1"},
		{"198.51.100.77:1", -5, 64, "0.0.0.0/0"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		e, ok := ClientNet("net", nil, tt.v4, tt.v6)(r)
		if !ok || e.Key != "net" || e.Value != tt.want {
			t.Errorf("ClientNet(%d, %d) for %s = %+v %v, want %q", tt.v4, tt.v6, tt.remote, e, ok, tt.want)
		}
	}
}

// FuzzClientIP: any forwarding headers, never a panic, and the answer is
// always an address: the peer's or one taken from the headers.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "6.6.6.6, 198.51.100.7", "")
	f.Add("10.0.0.1:80", "", `for="[2001:db8::1]:4711";proto=https, for=unknown`)
	f.Add("[::1]:1", "\"", `for="\"`)
	f.Add("10.0.0.1:80", ",,,", `for=;for=,`)
	tp, _ := ParseTrustedProxies("10.0.0.0/8", "::1")
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		if xff != "" {
			r.Header["X-Forwarded-For"] = []string{xff}
		}
		if fwd != "" {
			r.Header["Forwarded"] = []string{fwd}
		}
		ip, ok := tp.ClientIP(r)
		if !ok {
			return
		}
		if _, err := netip.ParseAddr(ip); err != nil {
			t.Fatalf("ClientIP(%q, XFF %q, Forwarded %q) = %q, not an address", remote, xff, fwd, ip)
		}
	})
}

// TestClientIPHugeChain: a forwarding field of tens of thousands of
// trusted-looking hops (what a client behind a trusted proxy can write, up
// to net/http's 1 MiB of header) is walked at most MaxHops deep, with no
// allocation, reading the field once (before: each hop rescanned the
// field from its start, time in the square of its length).
func TestClientIPHugeChain(t *testing.T) {
	tp, err := ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	var hops []string
	for i := 0; len(hops)*12 < 1<<20; i++ {
		hops = append(hops, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
	}
	n := len(hops)
	for _, tc := range []struct {
		name, field string
		lines       []string
		want        string
	}{
		// The peer is hop 0; MaxHops elements of the field are walked.
		{"X-Forwarded-For, one line", "X-Forwarded-For", []string{strings.Join(hops, ", ")}, hops[n-MaxHops]},
		{"X-Forwarded-For, a line a hop", "X-Forwarded-For", hops, hops[n-MaxHops]},
		{"Forwarded", "Forwarded", []string{"for=" + strings.Join(hops, ", for=")}, hops[n-MaxHops]},
		{"short chain ends at its leftmost", "X-Forwarded-For", []string{strings.Join(hops[:MaxHops-1], ",")}, hops[0]},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.255.255.255:1"
		r.Header[tc.field] = tc.lines
		var got string
		allocs := testing.AllocsPerRun(5, func() { got, _ = tp.ClientIP(r) })
		if got != tc.want {
			t.Errorf("%s: ClientIP = %q, want %q", tc.name, got, tc.want)
		}
		if allocs != 0 {
			t.Errorf("%s: %v allocations, want 0", tc.name, allocs)
		}
	}
}
