package httplimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies is the set of addresses whose forwarding headers are
// believed. A nil or empty set trusts nobody. It is immutable and safe for
// concurrent use.
type TrustedProxies struct {
	prefixes []netip.Prefix
}

// ParseTrustedProxies builds a set from CIDRs ("10.0.0.0/8") and single
// addresses ("192.0.2.7", "::1").
func ParseTrustedProxies(list ...string) (*TrustedProxies, error) {
	tp := &TrustedProxies{}
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", s, err)
			}
			tp.prefixes = append(tp.prefixes, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("httplimit: trusted proxy %q: %w", s, err)
		}
		a = a.Unmap()
		tp.prefixes = append(tp.prefixes, netip.PrefixFrom(a, a.BitLen()))
	}
	return tp, nil
}

// Trusted reports whether addr is a trusted proxy.
func (tp *TrustedProxies) Trusted(addr netip.Addr) bool {
	if tp == nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range tp.prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ClientIP returns the address of the client that sent r. It starts from the
// peer (r.RemoteAddr); while that hop is a trusted proxy, it steps one hop to
// the left in the forwarding chain — the Forwarded field's for= parameters
// (RFC 7239) when present, else X-Forwarded-For — and stops at the first hop
// that is not trusted, which is the address a trusted proxy saw. Anything to
// the left of it was written by the client and is ignored. A hop that is not
// an IP address (an obfuscated or "unknown" node) ends the walk at the last
// address known. ok is false only if not even the peer address parses.
func (tp *TrustedProxies) ClientIP(r *http.Request) (ip string, ok bool) {
	peer := hostOf(r.RemoteAddr)
	addr, err := netip.ParseAddr(peer)
	if err != nil {
		return "", false
	}
	if !tp.Trusted(addr) {
		return canonical(peer, addr), true
	}
	current, currentAddr := peer, addr
	walk := func(hop string) bool { // reports whether to continue leftwards
		a, err := netip.ParseAddr(hop)
		if err != nil {
			return false
		}
		current, currentAddr = hop, a
		return tp.Trusted(a)
	}
	if fw := r.Header["Forwarded"]; len(fw) > 0 {
		forEachRight(fw, ',', func(elem string) bool {
			return walk(forwardedFor(elem))
		})
	} else if xff := r.Header["X-Forwarded-For"]; len(xff) > 0 {
		forEachRight(xff, ',', func(hop string) bool {
			return walk(strings.TrimSpace(hop))
		})
	}
	return canonical(current, currentAddr), true
}

// canonical returns s unless the address is an IPv4-mapped IPv6 address or
// otherwise not in its canonical spelling, so one client has one key.
func canonical(s string, a netip.Addr) string {
	if a.Is4In6() || a.Zone() != "" {
		return a.Unmap().WithZone("").String()
	}
	return s
}

// hostOf strips the port from "host:port" or "[v6]:port".
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

// MaxHops bounds the hops of a forwarding chain ClientIP walks: past it,
// the walk stops at the last hop reached, as at a hop that is not an
// address. No deployment puts this many trusted proxies in a row; a chain
// that long was written by the client.
const MaxHops = 64

// forEachRight calls f on the comma-separated elements of the field lines,
// right to left, until f returns false or MaxHops elements were given. It
// reads each line once, left to right, remembering only the last MaxHops
// separators, so a field of thousands of elements costs time in
// proportion to its length and no memory.
func forEachRight(lines []string, sep byte, f func(string) bool) {
	hops := 0
	var ring [MaxHops]int
	for i := len(lines) - 1; i >= 0; i-- {
		s := lines[i]
		n := unquotedSeps(s, sep, &ring) // separators seen; the last min(n, MaxHops) are in ring
		end := len(s)
		for k := n - 1; ; k-- {
			if hops == MaxHops {
				return
			}
			hops++
			start := 0
			if k >= 0 {
				if k < n-MaxHops {
					return // the separator fell out of the ring: past MaxHops anyway
				}
				start = ring[k%MaxHops] + 1
			}
			if !f(s[start:end]) {
				return
			}
			if k < 0 {
				break
			}
			end = ring[k%MaxHops]
		}
	}
}

// unquotedSeps records the indexes of the seps of s outside double quotes
// in ring (the k-th at ring[k%MaxHops]) and returns how many there are.
func unquotedSeps(s string, sep byte, ring *[MaxHops]int) int {
	inQuote := false
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if inQuote {
				i++
			}
		case '"':
			inQuote = !inQuote
		case sep:
			if !inQuote {
				ring[n%MaxHops] = i
				n++
			}
		}
	}
	return n
}

// forwardedFor returns the node of the for= parameter of one Forwarded
// element ("for=192.0.2.60;proto=http", `for="[2001:db8::1]:4711"`), with
// quotes, brackets and port removed; "" when there is none.
func forwardedFor(elem string) string {
	for len(elem) > 0 {
		var pair string
		if i := strings.IndexByte(elem, ';'); i >= 0 {
			pair, elem = elem[:i], elem[i+1:]
		} else {
			pair, elem = elem, ""
		}
		pair = strings.TrimSpace(pair)
		if len(pair) < 4 || !strings.EqualFold(pair[:4], "for=") {
			continue
		}
		v := pair[4:]
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		if strings.HasPrefix(v, "[") {
			if end := strings.IndexByte(v, ']'); end > 0 {
				return v[1:end]
			}
			return ""
		}
		if i := strings.IndexByte(v, ':'); i >= 0 && strings.Count(v, ":") == 1 {
			v = v[:i] // IPv4 with port
		}
		return v
	}
	return ""
}
