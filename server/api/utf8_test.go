package api

import (
	"net/http"
	"strings"
	"testing"
)

// TestInvalidUTF8Refused: a body whose strings are not valid UTF-8 (raw
// bytes, or escapes that name a lone surrogate) is answered 400, on /json as
// on /v1/check, /v1/release and /v1/charge, wherever the string is: the
// domain, a key, a value, a member name. Accepted, two such values would
// share one counter once mangled to U+FFFD (issue 28).
func TestInvalidUTF8Refused(t *testing.T) {
	e := newEngine(t, nil)
	h, err := New(Options{Checker: e, Charger: e, ChargeAuth: func(next http.Handler) http.Handler { return next }})
	if err != nil {
		t.Fatal(err)
	}
	const raw, surrogate = "invalid UTF-8", "invalid surrogate pair"
	bodies := []struct{ name, domain, key, value, member, want string }{
		{name: "raw 0xff in the value", value: "1.2.3.\xff", want: raw},
		{name: "raw 0xff in the key", key: "remote\xff", want: raw},
		{name: "raw 0xff in the domain", domain: "ed\xffge", want: raw},
		{name: "truncated rune in the value", value: "\xe2\x82", want: raw},
		{name: "overlong encoding in the value", value: "\xc0\xaf", want: raw},
		{name: "encoded surrogate in the value", value: "\xed\xa0\x80", want: raw},
		{name: "raw 0xff in a member name", member: "x\xff", want: raw},
		{name: "lone high surrogate escape", value: `\ud800`, want: surrogate},
		{name: "lone low surrogate escape", value: `\udc00`, want: surrogate},
		{name: "high surrogate then a letter", value: `\ud800x`, want: surrogate},
		{name: "high surrogate then a non-surrogate escape", value: `\ud800\u0041`, want: surrogate},
		{name: "two high surrogates", value: `\ud800\ud800`, want: surrogate},
		{name: "lone surrogate in the key", key: `a\udfff`, want: surrogate},
		{name: "lone surrogate in a member name", member: `\ud800`, want: surrogate},
	}
	for _, b := range bodies {
		domain, key, value := "edge", "remote_address", "1.2.3.4"
		if b.domain != "" {
			domain = b.domain
		}
		if b.key != "" {
			key = b.key
		}
		if b.value != "" {
			value = b.value
		}
		extra := ""
		if b.member != "" {
			extra = `,"` + b.member + `":1`
		}
		descs := `"descriptors":[{"entries":[{"key":"` + key + `","value":"` + value + `"}]` + extra + `}]`
		for _, c := range []struct{ path, body string }{
			{"/v1/check", `{"domain":"` + domain + `",` + descs + `}`},
			{"/v1/release", `{"domain":"` + domain + `",` + descs + `,"leases":[0]}`},
			{"/v1/charge", `{"domain":"` + domain + `",` + descs + `,"hits":1}`},
			{"/json", `{"domain":"` + domain + `",` + descs + `}`},
		} {
			code, _, out := do(t, h, "POST", c.path, c.body)
			if code != http.StatusBadRequest || !strings.Contains(out, b.want) {
				t.Errorf("%s: POST %s = %d %s, want 400 saying %q", b.name, c.path, code, out, b.want)
			}
		}
	}
	// The same bodies with valid strings are decided: the refusals above
	// are the strings'.
	for _, p := range []string{"/v1/check", "/json"} {
		if code, _, out := do(t, h, "POST", p, `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.\u00e9 \ud83d\ude00"}]}]}`); code != http.StatusOK {
			t.Errorf("POST %s with valid escapes (a surrogate pair) = %d %s, want 200", p, code, out)
		}
	}
}
