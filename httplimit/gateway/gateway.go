// Package gateway is Sluice as a reverse proxy: httplimit's middleware in
// front of an httputil.ReverseProxy, with key extraction described by a small
// YAML file or by flags, so a team can put rate limits in front of an
// existing API without writing code. `sluice proxy` runs it.
package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/httplimit"
)

// Config is the gateway's configuration file. Every field may also come from
// a flag of `sluice proxy`; a flag wins.
//
//	upstream: http://127.0.0.1:9000
//	listen: :8080
//	rules: ./rules
//	domain: edge
//	trusted_proxies: [10.0.0.0/8]
//	descriptors:
//	  - remote_address=ip
//	  - api_key=header:X-API-Key, path=route
//	concurrency:
//	  - {name: inflight, limit: 100, timeout: 30s, shed: true}
//	legacy_headers: true
type Config struct {
	// Upstream is the URL requests are forwarded to. Required.
	Upstream string `yaml:"upstream"`
	// Listen is the address to serve on. Default ":8080".
	Listen string `yaml:"listen"`
	// Rules is the rule directory, applied in process. Required unless RLS
	// is set.
	Rules string `yaml:"rules"`
	// RLS is the host:port of a remote rate limit service (sluice serve's
	// gRPC address, or envoyproxy/ratelimit) to ask instead of applying
	// Rules in process, so that several gateways share one set of counters.
	RLS string `yaml:"rls"`
	// Domain is the rule domain requests are checked in. Required.
	Domain string `yaml:"domain"`
	// TrustedProxies lists the CIDRs or addresses whose X-Forwarded-For and
	// Forwarded fields are believed. Empty trusts nobody.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// Descriptors are descriptor specs (see ParseDescriptor), one per
	// descriptor. Default: "remote_address=ip".
	Descriptors []string `yaml:"descriptors"`
	// Concurrency limits requests in flight through the gateway.
	Concurrency []Concurrency `yaml:"concurrency"`
	// FailClosed answers 503 when the rate limit service cannot answer.
	FailClosed bool `yaml:"fail_closed"`
	// LegacyHeaders also sends X-RateLimit-*.
	LegacyHeaders bool `yaml:"legacy_headers"`
	// MaxDelay bounds leaky-bucket queueing (httplimit.Config.MaxDelay).
	MaxDelay time.Duration `yaml:"max_delay"`
	// Shed turns on load shedding in front of the rate limits (see Shed).
	Shed *Shed `yaml:"shed"`
	// MetricsAddr, if set, serves Prometheus metrics (the load shedder's)
	// on this address at /metrics.
	MetricsAddr string `yaml:"metrics_addr"`

	src *source // set by ParseFile
}

// Concurrency is one in-flight limit of the gateway.
type Concurrency struct {
	// Name is the policy name in the RateLimit fields. Required.
	Name string `yaml:"name"`
	// Limit is how many requests may be in flight at once. Required, ≥ 1.
	Limit int64 `yaml:"limit"`
	// Timeout frees the slot of a request that never finished. Default 1m.
	Timeout time.Duration `yaml:"timeout"`
	// Key is one entry spec ("api_key=header:X-API-Key") giving each key
	// its own limit; empty means one limit for all requests.
	Key string `yaml:"key"`
	// Shed answers 503 instead of 429 when the limit is reached.
	Shed bool `yaml:"shed"`
}

// Parse reads a configuration file. Unknown fields are errors, reported with
// their line.
func Parse(data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, nil // an empty file configures nothing
		}
		return Config{}, fmt.Errorf("gateway config: %w", err)
	}
	return c, nil
}

// Default fills the fields left empty with their defaults.
func (c *Config) Default() {
	if c.Listen == "" {
		c.Listen = ":8080"
	}
	if len(c.Descriptors) == 0 {
		c.Descriptors = []string{"remote_address=ip"}
	}
	for i := range c.Concurrency {
		if c.Concurrency[i].Timeout == 0 {
			c.Concurrency[i].Timeout = time.Minute
		}
	}
}

// Validate reports every problem of a defaulted configuration, one error
// each.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Upstream == "" {
		bad("upstream: required")
	} else if u, err := url.Parse(c.Upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("upstream: %q is not an http(s) URL with a host", c.Upstream)
	}
	switch {
	case c.Rules == "" && c.RLS == "":
		bad("rules: required (a directory of rule files), or rls (a rate limit service)")
	case c.Rules != "" && c.RLS != "":
		bad("rules and rls: give one; with rls the service applies its own rules")
	case c.RLS != "":
		if _, _, err := net.SplitHostPort(c.RLS); err != nil {
			bad("rls: %q is not host:port: %v", c.RLS, err)
		}
	}
	if c.Domain == "" {
		bad("domain: required (the domain of the rule file to apply)")
	}
	tp, err := httplimit.ParseTrustedProxies(c.TrustedProxies...)
	if err != nil {
		bad("trusted_proxies: %v", err)
	}
	for i, d := range c.Descriptors {
		if _, err := ParseDescriptor(d, tp); err != nil {
			bad("descriptors[%d]: %v", i, err)
		}
	}
	for i, cc := range c.Concurrency {
		if cc.Name == "" {
			bad("concurrency[%d].name: required", i)
		}
		if cc.Limit < 1 || cc.Limit > algorithm.MaxLogQuota {
			bad("concurrency[%d].limit: %d is outside 1..%d", i, cc.Limit, algorithm.MaxLogQuota)
		}
		if cc.Timeout < time.Second {
			bad("concurrency[%d].timeout: %v is shorter than 1s", i, cc.Timeout)
		}
		if cc.Key != "" {
			if fs, err := ParseDescriptor(cc.Key, tp); err != nil {
				bad("concurrency[%d].key: %v", i, err)
			} else if len(fs) != 1 {
				bad("concurrency[%d].key: %q must be one entry", i, cc.Key)
			}
		}
	}
	if c.MaxDelay < 0 {
		bad("max_delay: %v is negative", c.MaxDelay)
	}
	errs = append(errs, c.validateShed(tp)...)
	return errors.Join(errs...)
}

// ParseDescriptor reads a descriptor spec: comma-separated entries
// "key=source", where source is one of
//
//	ip             the client address (forwarding fields from trusted proxies only)
//	ipnet:V4:V6    the client's network: the address masked to V4 / V6 bits ("ipnet:32:64")
//	route          the URL path
//	method         the HTTP method
//	header:NAME    the value of request header NAME (requests without it skip the descriptor)
//	static:VALUE   a fixed value
//
// For example "api_key=header:X-API-Key, path=route".
func ParseDescriptor(spec string, tp *httplimit.TrustedProxies) ([]httplimit.KeyFunc, error) {
	var fs []httplimit.KeyFunc
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		key, source, ok := strings.Cut(part, "=")
		key, source = strings.TrimSpace(key), strings.TrimSpace(source)
		if !ok || key == "" || source == "" {
			return nil, fmt.Errorf("entry %q: want key=source", part)
		}
		kind, arg, _ := strings.Cut(source, ":")
		switch {
		case kind == "ip" && arg == "":
			fs = append(fs, httplimit.ClientIP(key, tp))
		case kind == "ipnet":
			v4s, v6s, ok := strings.Cut(arg, ":")
			v4, err4 := strconv.Atoi(v4s)
			v6, err6 := strconv.Atoi(v6s)
			if !ok || err4 != nil || err6 != nil || v4 < 0 || v4 > 32 || v6 < 0 || v6 > 128 {
				return nil, fmt.Errorf("entry %q: want ipnet:V4BITS:V6BITS with 0 ≤ V4BITS ≤ 32, 0 ≤ V6BITS ≤ 128", part)
			}
			fs = append(fs, httplimit.ClientNet(key, tp, v4, v6))
		case kind == "route" && arg == "":
			fs = append(fs, httplimit.Route(key))
		case kind == "method" && arg == "":
			fs = append(fs, httplimit.Method(key))
		case kind == "header" && validHeaderName(arg):
			fs = append(fs, httplimit.Header(key, arg))
		case kind == "static" && arg != "":
			fs = append(fs, httplimit.Static(key, arg))
		default:
			return nil, fmt.Errorf("entry %q: source %q is not ip, ipnet:V4:V6, route, method, header:NAME or static:VALUE", part, source)
		}
	}
	return fs, nil
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// New returns the gateway handler for a valid, defaulted configuration:
// checker decides the rate limits, store keeps the concurrency leases.
// onError, if not nil, hears about rate-limit service and upstream errors.
func New(c Config, checker httplimit.Checker, store sluice.Store, onError func(*http.Request, error)) (*httplimit.Handler, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	up, _ := url.Parse(c.Upstream) // validated
	tp, _ := httplimit.ParseTrustedProxies(c.TrustedProxies...)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			// Pass the forwarding chain on only when a trusted proxy sent it;
			// a client's own X-Forwarded-For is dropped, not relayed.
			if peer, err := netip.ParseAddr(hostOnly(pr.In.RemoteAddr)); err == nil && tp.Trusted(peer) {
				if v := pr.In.Header["X-Forwarded-For"]; len(v) > 0 {
					pr.Out.Header["X-Forwarded-For"] = v
				}
			}
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if onError != nil {
				onError(r, fmt.Errorf("gateway: upstream: %w", err))
			}
			headers.WriteProblem(w, headers.Problem{Type: "about:blank", Title: http.StatusText(http.StatusBadGateway),
				Status: http.StatusBadGateway, Detail: "the upstream service did not answer"})
		},
	}
	cfg := httplimit.Config{
		Checker:    checker,
		Domain:     c.Domain,
		FailClosed: c.FailClosed,
		Legacy:     c.LegacyHeaders,
		MaxDelay:   c.MaxDelay,
		OnError:    onError,
	}
	for _, d := range c.Descriptors {
		fs, _ := ParseDescriptor(d, tp) // validated
		cfg.Descriptors = append(cfg.Descriptors, fs)
	}
	for _, cc := range c.Concurrency {
		lim, err := sluice.NewLimiter(store, sluice.Limit{Algorithm: sluice.Concurrency, Quota: cc.Limit, Window: cc.Timeout})
		if err != nil {
			return nil, fmt.Errorf("gateway: concurrency %s: %w", cc.Name, err)
		}
		conc := httplimit.Concurrency{Name: cc.Name, Limiter: lim, Shed: cc.Shed}
		if cc.Key != "" {
			fs, _ := ParseDescriptor(cc.Key, tp)
			conc.Key = fs[0]
		}
		cfg.Concurrency = append(cfg.Concurrency, conc)
	}
	return httplimit.New(proxy, cfg)
}
