// Package headers renders and parses the HTTP fields a rate limiter speaks:
// RateLimit and RateLimit-Policy as specified by
// draft-ietf-httpapi-ratelimit-headers-10 (Structured Field Lists, RFC 9651),
// the legacy X-RateLimit-* fields, Retry-After, and problem+json bodies
// (RFC 9457) for 429 and 503 responses.
//
// Rendering goes through github.com/dunglas/httpsfv, except for the
// allocation-light AppendServiceLimits used on the hot path, which is tested
// to produce exactly the library's bytes. Parsing is strict about syntax and
// lenient where the draft says so: a field that is not a valid Structured
// Field List is ignored as a whole (an error is returned and no members), a
// member that lacks a required parameter or has one of the wrong type is
// skipped, unknown parameters are ignored. Parsers never panic.
//
// The package depends only on the standard library and the structured-fields
// library, so both servers and clients can use it. Package headers/edge maps
// an engine's answer to these fields, for every Sluice transport.
package headers

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/dunglas/httpsfv"
)

// Field names, in their canonical spelling.
const (
	RateLimit       = "RateLimit"
	RateLimitPolicy = "RateLimit-Policy"
	RetryAfter      = "Retry-After"
	// SluiceReason carries a refusal's reason when it is not plain
	// "limited" (penalty), for transports without a body (Envoy).
	SluiceReason        = "Sluice-Reason"
	XRateLimitLimit     = "X-RateLimit-Limit"
	XRateLimitRemaining = "X-RateLimit-Remaining"
	XRateLimitReset     = "X-RateLimit-Reset"
	XRateLimitUsed      = "X-RateLimit-Used"
	ContentTypeProblem  = "application/problem+json"
)

// Canonical map keys of the fields, for direct http.Header map access (which
// skips canonicalizing on every response).
var (
	keyRateLimit       = http.CanonicalHeaderKey(RateLimit)
	keyRateLimitPolicy = http.CanonicalHeaderKey(RateLimitPolicy)
	keyRetryAfter      = http.CanonicalHeaderKey(RetryAfter)
	keyXLimit          = http.CanonicalHeaderKey(XRateLimitLimit)
	keyXRemaining      = http.CanonicalHeaderKey(XRateLimitRemaining)
	keyXReset          = http.CanonicalHeaderKey(XRateLimitReset)
	keyXUsed           = http.CanonicalHeaderKey(XRateLimitUsed)
)

// MaxInteger is the largest integer a Structured Field can carry (15 digits).
const MaxInteger = 999_999_999_999_999

// QuotaUnit is the unit of a policy's quota (the "qu" parameter).
type QuotaUnit string

// The quota units of draft-10. The empty QuotaUnit means Requests and is not
// rendered.
const (
	Requests           QuotaUnit = "requests"
	ContentBytes       QuotaUnit = "content-bytes"
	ConcurrentRequests QuotaUnit = "concurrent-requests"
)

// Policy is one member of the RateLimit-Policy field: a quota policy the
// server enforces. The zero value renders as `"";q=0`.
type Policy struct {
	// Name identifies the policy; the RateLimit field refers to it. It must
	// be printable ASCII (see PolicyName).
	Name string
	// Quota is "q", the quota in QuotaUnit units; required, 0 ≤ q ≤ MaxInteger.
	Quota int64
	// Window is "w", the time window in whole seconds; 0 omits it.
	Window int64
	// Unit is "qu"; "" (and Requests, the default) are not rendered.
	Unit QuotaUnit
	// PartitionKey is "pk", a Byte Sequence; nil omits it.
	PartitionKey []byte
}

// ServiceLimit is one member of the RateLimit field: the current state of one
// policy. The zero value renders as `"";r=0;t=0`.
type ServiceLimit struct {
	// Name is the policy this state belongs to.
	Name string
	// Remaining is "r", the quota units left; required, 0 ≤ r ≤ MaxInteger.
	Remaining int64
	// Reset is "t", whole seconds until the quota is restored. A negative
	// value omits the parameter; parsers report an absent t as -1.
	Reset int64
	// PartitionKey is "pk", a Byte Sequence; nil omits it.
	PartitionKey []byte
}

// Errors the formatters return.
var (
	// ErrInvalid: a value cannot be rendered (negative or too large an
	// integer, a name that is not printable ASCII).
	ErrInvalid = errors.New("headers: value cannot be rendered")
	// ErrMalformed: a field is not a valid Structured Field List; the caller
	// must ignore the whole field.
	ErrMalformed = errors.New("headers: malformed field")
)

func checkInt(what string, v int64) error {
	if v < 0 || v > MaxInteger {
		return fmt.Errorf("%w: %s=%d is outside 0..%d", ErrInvalid, what, v, int64(MaxInteger))
	}
	return nil
}

func checkName(name string) error {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: policy name %q has byte %#x outside printable ASCII", ErrInvalid, name, c)
		}
	}
	return nil
}

// PolicyName makes s usable as a policy name: bytes outside printable ASCII,
// and '%' itself, become %XX. Printable ASCII strings come back unchanged.
func PolicyName(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return string(b)
}

// Item returns the policy as a Structured Field Item.
func (p Policy) Item() (httpsfv.Item, error) {
	if err := checkName(p.Name); err != nil {
		return httpsfv.Item{}, err
	}
	if err := checkInt("q", p.Quota); err != nil {
		return httpsfv.Item{}, err
	}
	if p.Window < 0 {
		return httpsfv.Item{}, fmt.Errorf("%w: w=%d must be positive", ErrInvalid, p.Window)
	}
	it := httpsfv.NewItem(p.Name)
	it.Params.Add("q", p.Quota)
	if p.Unit != "" && p.Unit != Requests {
		if err := checkName(string(p.Unit)); err != nil {
			return httpsfv.Item{}, err
		}
		it.Params.Add("qu", string(p.Unit))
	}
	if p.Window > 0 {
		if err := checkInt("w", p.Window); err != nil {
			return httpsfv.Item{}, err
		}
		it.Params.Add("w", p.Window)
	}
	if p.PartitionKey != nil {
		it.Params.Add("pk", p.PartitionKey)
	}
	return it, nil
}

// Item returns the service limit as a Structured Field Item.
func (l ServiceLimit) Item() (httpsfv.Item, error) {
	if err := checkName(l.Name); err != nil {
		return httpsfv.Item{}, err
	}
	if err := checkInt("r", l.Remaining); err != nil {
		return httpsfv.Item{}, err
	}
	it := httpsfv.NewItem(l.Name)
	it.Params.Add("r", l.Remaining)
	if l.Reset >= 0 {
		if err := checkInt("t", l.Reset); err != nil {
			return httpsfv.Item{}, err
		}
		it.Params.Add("t", l.Reset)
	}
	if l.PartitionKey != nil {
		it.Params.Add("pk", l.PartitionKey)
	}
	return it, nil
}

// FormatPolicies renders a RateLimit-Policy field value. It returns "" for no
// policies (send no field then).
func FormatPolicies(ps ...Policy) (string, error) { return formatList("RateLimit-Policy", ps) }

// FormatServiceLimits renders a RateLimit field value. It returns "" for no
// limits (send no field then).
func FormatServiceLimits(ls ...ServiceLimit) (string, error) { return formatList("RateLimit", ls) }

// formatList renders the members of one List field through the
// structured-fields library.
func formatList[T interface{ Item() (httpsfv.Item, error) }](field string, members []T) (string, error) {
	l := make(httpsfv.List, 0, len(members))
	for i, m := range members {
		it, err := m.Item()
		if err != nil {
			return "", fmt.Errorf("%s member %d: %w", field, i, err)
		}
		l = append(l, it)
	}
	s, err := httpsfv.Marshal(l)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrInvalid, field, err)
	}
	return s, nil
}

// AppendServiceLimits appends the RateLimit field value for ls to dst, as
// FormatServiceLimits would render it, without the library's per-item maps:
// it is what a middleware calls on every response. Members without
// PartitionKey are written directly; the output is byte-for-byte that of
// FormatServiceLimits (the tests and FuzzAppendServiceLimits check this).
func AppendServiceLimits(dst []byte, ls ...ServiceLimit) ([]byte, error) {
	for i, l := range ls {
		if err := checkName(l.Name); err != nil {
			return dst, fmt.Errorf("RateLimit member %d: %w", i, err)
		}
		if l.Remaining < 0 || l.Remaining > MaxInteger || l.Reset > MaxInteger {
			return dst, fmt.Errorf("RateLimit member %d: %w: r=%d t=%d", i, ErrInvalid, l.Remaining, l.Reset)
		}
		if i > 0 {
			dst = append(dst, ',', ' ')
		}
		dst = appendQuoted(dst, l.Name) // an sf-string: the name is printable ASCII
		dst = append(dst, ";r="...)
		dst = strconv.AppendInt(dst, l.Remaining, 10)
		if l.Reset >= 0 {
			dst = append(dst, ";t="...)
			dst = strconv.AppendInt(dst, l.Reset, 10)
		}
		if l.PartitionKey != nil {
			it := httpsfv.NewItem(true)
			it.Params.Add("pk", l.PartitionKey)
			s, err := httpsfv.Marshal(it.Params)
			if err != nil {
				return dst, fmt.Errorf("RateLimit member %d: %w: %w", i, ErrInvalid, err)
			}
			dst = append(dst, s...)
		}
	}
	return dst, nil
}

// appendQuoted appends s between double quotes with '"' and '\\' escaped
// by a backslash: an sf-string and, for printable ASCII, a JSON string.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	if strings.IndexByte(s, '"') < 0 && strings.IndexByte(s, '\\') < 0 {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

// ParsePolicies parses the RateLimit-Policy field lines of a message (pass
// h.Values(RateLimitPolicy)). A field that is not a valid Structured Field
// List yields ErrMalformed and no policies; members that are not Strings, or
// lack a valid q, or carry a w, qu or pk of the wrong type, are skipped.
func ParsePolicies(values []string) ([]Policy, error) {
	items, err := namedItems("RateLimit-Policy", values)
	if err != nil {
		return nil, err
	}
	var out []Policy
	for _, it := range items {
		p := Policy{Name: it.name}
		var ok bool
		q, ok := nonNegInt(it.params, "q")
		if !ok {
			continue
		}
		p.Quota = q
		if v, present := it.params.Get("w"); present {
			w, ok := v.(int64)
			if !ok || w <= 0 {
				continue
			}
			p.Window = w
		}
		if v, present := it.params.Get("qu"); present {
			u, ok := v.(string)
			if !ok {
				continue
			}
			p.Unit = QuotaUnit(u)
		}
		if p.PartitionKey, ok = partitionKey(it.params); !ok {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseServiceLimits parses the RateLimit field lines of a message (pass
// h.Values(RateLimit)). A field that is not a valid Structured Field List
// yields ErrMalformed and no limits; members that are not Strings, lack a
// valid r, or carry a t or pk of the wrong type are skipped. An absent t is
// reported as Reset -1.
func ParseServiceLimits(values []string) ([]ServiceLimit, error) {
	items, err := namedItems("RateLimit", values)
	if err != nil {
		return nil, err
	}
	var out []ServiceLimit
	for _, it := range items {
		l := ServiceLimit{Name: it.name, Reset: -1}
		var ok bool
		if l.Remaining, ok = nonNegInt(it.params, "r"); !ok {
			continue
		}
		if _, present := it.params.Get("t"); present {
			if l.Reset, ok = nonNegInt(it.params, "t"); !ok {
				continue
			}
		}
		if l.PartitionKey, ok = partitionKey(it.params); !ok {
			continue
		}
		out = append(out, l)
	}
	return out, nil
}

// namedItem is a List member whose value is a String: a policy's name and
// its parameters.
type namedItem struct {
	name   string
	params *httpsfv.Params
}

// namedItems parses the lines of one List field and keeps the members that
// are Items named by a String, the shape both rate-limit fields share.
func namedItems(field string, values []string) ([]namedItem, error) {
	list, err := parseList(values)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	out := make([]namedItem, 0, len(list))
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			continue
		}
		if name, ok := it.Value.(string); ok {
			out = append(out, namedItem{name: name, params: it.Params})
		}
	}
	return out, nil
}

func nonNegInt(p *httpsfv.Params, key string) (int64, bool) {
	if p == nil {
		return 0, false
	}
	v, ok := p.Get(key)
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	return n, ok && n >= 0
}

// partitionKey returns pk (nil when absent) and whether it is well-typed.
func partitionKey(p *httpsfv.Params) ([]byte, bool) {
	if p == nil {
		return nil, true
	}
	v, ok := p.Get("pk")
	if !ok {
		return nil, true
	}
	b, ok := v.([]byte)
	if ok && b == nil {
		b = []byte{}
	}
	return b, ok
}

// Set sets the RateLimit-Policy and RateLimit fields of h (either may be
// empty, which deletes it).
func Set(h http.Header, policy, limit string) {
	setOrDel(h, keyRateLimitPolicy, policy)
	setOrDel(h, keyRateLimit, limit)
}

func setOrDel(h http.Header, k, v string) {
	if v == "" {
		delete(h, k)
		return
	}
	h[k] = []string{v}
}
