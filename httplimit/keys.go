package httplimit

import (
	"context"
	"net/http"
	"net/netip"

	"github.com/sluice-rl/sluice/rules"
)

// KeyFunc extracts one descriptor entry from a request. It reports false when
// the request has no such key (no API key header, no authenticated user);
// the descriptor that uses it is then left out of the check. A KeyFunc must
// be safe for concurrent use and should not allocate: it runs on every
// request.
type KeyFunc func(r *http.Request) (rules.Entry, bool)

// Header keys requests by the value of a request header, such as an API key:
// the entry is {key, value}. Requests without the header have no such key.
func Header(key, header string) KeyFunc {
	header = http.CanonicalHeaderKey(header)
	return func(r *http.Request) (rules.Entry, bool) {
		v := r.Header[header]
		if len(v) == 0 || v[0] == "" {
			return rules.Entry{}, false
		}
		return rules.Entry{Key: key, Value: v[0]}, true
	}
}

type userKey struct{}

// WithUser returns a context carrying the authenticated user; an
// authentication middleware in front of httplimit calls it, and User reads it.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserFrom returns the user WithUser stored in ctx.
func UserFrom(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok && u != ""
}

// User keys requests by the authenticated user stored in the request context
// with WithUser. Anonymous requests have no such key.
func User(key string) KeyFunc {
	return func(r *http.Request) (rules.Entry, bool) {
		u, ok := UserFrom(r.Context())
		if !ok {
			return rules.Entry{}, false
		}
		return rules.Entry{Key: key, Value: u}, true
	}
}

// Route keys requests by route: the ServeMux pattern that matched when the
// middleware sits inside the mux (r.Pattern), else the URL path. Paths are
// chosen by the client, so limit specific paths with values in the rules
// rather than giving every path a counter of its own.
func Route(key string) KeyFunc {
	return func(r *http.Request) (rules.Entry, bool) {
		if r.Pattern != "" {
			return rules.Entry{Key: key, Value: r.Pattern}, true
		}
		return rules.Entry{Key: key, Value: r.URL.Path}, true
	}
}

// Method keys requests by HTTP method.
func Method(key string) KeyFunc {
	return func(r *http.Request) (rules.Entry, bool) {
		return rules.Entry{Key: key, Value: r.Method}, true
	}
}

// Static gives every request the same entry, such as envoy's generic_key.
func Static(key, value string) KeyFunc {
	return func(*http.Request) (rules.Entry, bool) {
		return rules.Entry{Key: key, Value: value}, true
	}
}

// ClientIP keys requests by client address. X-Forwarded-For and Forwarded are
// believed only as far as trusted lets them (see TrustedProxies.ClientIP); a
// nil trusted believes neither and uses the peer address.
func ClientIP(key string, trusted *TrustedProxies) KeyFunc {
	return func(r *http.Request) (rules.Entry, bool) {
		ip, ok := trusted.ClientIP(r)
		if !ok {
			return rules.Entry{}, false
		}
		return rules.Entry{Key: key, Value: ip}, true
	}
}

// ClientNet keys requests by the client's network rather than its address:
// the address masked to v4Bits (IPv4) or v6Bits (IPv6) leading bits, written
// as a prefix ("2001:db8:1:2::/64"). One IPv6 subscriber usually holds a
// whole /64 (or more) and could otherwise spread its requests over 2^64
// keys; v6Bits 64 and v4Bits 32 is a common choice. Bits are clamped to the
// address length. Forwarding fields are believed as far as trusted lets
// them, as in ClientIP.
func ClientNet(key string, trusted *TrustedProxies, v4Bits, v6Bits int) KeyFunc {
	v4Bits = min(max(v4Bits, 0), 32)
	v6Bits = min(max(v6Bits, 0), 128)
	return func(r *http.Request) (rules.Entry, bool) {
		ip, ok := trusted.ClientIP(r)
		if !ok {
			return rules.Entry{}, false
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return rules.Entry{}, false
		}
		bits := v6Bits
		if a.Is4() {
			bits = v4Bits
		}
		if bits == a.BitLen() {
			return rules.Entry{Key: key, Value: ip}, true // no allocation for whole addresses
		}
		p, err := a.Prefix(bits)
		if err != nil {
			return rules.Entry{}, false
		}
		return rules.Entry{Key: key, Value: p.String()}, true
	}
}
