package headers

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Seconds returns d in whole seconds, rounded up; negative d is 0. It is how
// durations become the integer seconds of t, w and Retry-After, so that a
// client that waits the advertised time is never early.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// RetryAfterSeconds is the Retry-After a 429 should carry: the wait rounded
// up to whole seconds, at least 1 (a 429 is never answered "retry now"), and
// never earlier than reset, the t of the policies that refused the request.
func RetryAfterSeconds(wait time.Duration, reset int64) int64 {
	s := Seconds(wait)
	if s < reset {
		s = reset
	}
	if s < 1 {
		s = 1
	}
	return s
}

// SetRetryAfter sets Retry-After to delay-seconds.
func SetRetryAfter(h http.Header, seconds int64) {
	h[keyRetryAfter] = []string{strconv.FormatInt(seconds, 10)}
}

// ParseRetryAfter reads a Retry-After value, either delay-seconds or an HTTP
// date (IMF-fixdate, and the obsolete RFC 850 and asctime forms net/http
// accepts), and returns how long to wait from now. A date in the past gives
// 0. ok is false for a missing or malformed value, which must be ignored.
func ParseRetryAfter(v string, now time.Time) (wait time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		for i := 0; i < len(v); i++ {
			if v[i] < '0' || v[i] > '9' {
				return 0, false
			}
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(math.MaxInt64/time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return d, true
	}
	return 0, true
}
