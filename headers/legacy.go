package headers

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Legacy is the de-facto X-RateLimit-* family (GitHub's spelling): one policy
// per response, reset as an absolute Unix time.
type Legacy struct {
	// Limit is X-RateLimit-Limit, the quota.
	Limit int64
	// Remaining is X-RateLimit-Remaining.
	Remaining int64
	// Used is X-RateLimit-Used; Limit - Remaining when rendered by SetLegacy.
	Used int64
	// Reset is X-RateLimit-Reset, in Unix epoch seconds.
	Reset int64
}

// NewLegacy returns the legacy fields for a policy of quota limit with
// remaining units left, restored fully after resetAfter from now. Reset is
// rounded up to the next whole second.
func NewLegacy(limit, remaining int64, resetAfter time.Duration, now time.Time) Legacy {
	used := limit - remaining
	if used < 0 {
		used = 0
	}
	return Legacy{Limit: limit, Remaining: remaining, Used: used, Reset: CeilUnix(now.Add(resetAfter))}
}

// CeilUnix returns t in Unix seconds, rounded up.
func CeilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// SetLegacy writes the four X-RateLimit-* fields to h.
func SetLegacy(h http.Header, l Legacy) {
	h[keyXLimit] = []string{strconv.FormatInt(l.Limit, 10)}
	h[keyXRemaining] = []string{strconv.FormatInt(l.Remaining, 10)}
	h[keyXReset] = []string{strconv.FormatInt(l.Reset, 10)}
	h[keyXUsed] = []string{strconv.FormatInt(l.Used, 10)}
}

// ParseLegacy reads the X-RateLimit-* fields of h. It reports false unless
// Limit and Remaining are present and are non-negative integers; Reset and
// Used are 0 when absent or malformed. Values with several comma-separated
// numbers (Envoy's draft-03 style "10, 10;w=1") yield their first number.
func ParseLegacy(h http.Header) (Legacy, bool) {
	var l Legacy
	var ok1, ok2 bool
	l.Limit, ok1 = firstInt(h.Get(XRateLimitLimit))
	l.Remaining, ok2 = firstInt(h.Get(XRateLimitRemaining))
	if !ok1 || !ok2 {
		return Legacy{}, false
	}
	l.Reset, _ = firstInt(h.Get(XRateLimitReset))
	l.Used, _ = firstInt(h.Get(XRateLimitUsed))
	return l, true
}

func firstInt(s string) (int64, bool) {
	if i := strings.IndexAny(s, ",;"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
