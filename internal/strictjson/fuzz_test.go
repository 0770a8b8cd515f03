package strictjson

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// withinBounds reports whether b stays within MaxDepth and MaxNameBytes
// (as the depth reader reads it).
func withinBounds(b []byte) bool {
	r := &depthReader{b: b}
	buf := make([]byte, 512)
	for {
		if _, err := r.Read(buf); err != nil {
			var deep *tooDeepError
			return !errors.As(err, &deep)
		}
	}
}

// FuzzDecode: Decode never panics and returns nil or a bounded *Error; and
// it agrees with the decoder it replaced (Check, then encoding/json): a
// body it decodes, the old one decoded to the same value; a body the old
// one decoded, it decodes too unless the body is past a bound or not valid
// JSON text (invalid UTF-8, which encoding/json replaced); and the members
// it refuses, the old one refused (it does not look inside the value of an
// unknown member).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"domain":"a","domain":"b"}`, `{"descriptors":[{"entries":[{"key":"k","value":"v","kee":1}],"hits":3}]}`,
		`{"Domain":"a","DOMAIN":"b"}`, `{"any":[{"x":{}},{"x":1,"x":[1,{"y":2,"y":3}]}]}`, `"s"`, `{"\u0064omain":1,"domain":2}`,
		`{"at":"2026-01-02T15:04:05Z","labels":{"a":"b"}}`, `{"x":1} {}`, `{"descriptors":[{"hits":-1}]}`, "{\"domain\":\"\xff\"}",
		strings.Repeat("[", 40), strings.Repeat(`{"a":`, 40), `{"any":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}`,
		`{"x":` + strings.Repeat(`{"a":[`, 20), `{"descriptors":[` + strings.Repeat(`{"entries":[{"key":"[{"}]},`, 5) + `{}]}`,
		`{"labels":{"` + strings.Repeat("n", MaxNameBytes+1) + `":""}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want request
		err := Decode(b, &got)
		var e *Error
		if err != nil {
			if !errors.As(err, &e) {
				t.Fatalf("Decode(%q) = %T %v, want an *Error", b, err, err)
			}
			if len(e.Problems) > MaxProblems || (len(e.Problems) == 0 && e.Msg == "") {
				t.Fatalf("Decode(%q) = %+v: no problem, or too many", b, e)
			}
		}
		oldProbs, oldErr := oldDecode(b, &want)
		switch {
		case err == nil && oldErr != nil:
			t.Fatalf("Decode(%q) = nil; the old decoder refused it: %v %v", b, oldProbs, oldErr)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("Decode(%q) = %+v; the old decoder: %+v", b, got, want)
		case err != nil && oldErr == nil && withinBounds(b) && jsontext.Value(b).IsValid():
			t.Fatalf("Decode(%q) = %v; the old decoder decoded it", b, err)
		}
		if e == nil || oldProbs == nil {
			return
		}
		old := map[string]bool{}
		for _, p := range oldProbs {
			old[p.Path] = true
		}
		for _, p := range e.Problems {
			if !old[p.Path] && !strings.HasSuffix(p.Path, "…") {
				t.Fatalf("Decode(%q) refuses %s; the old decoder refused only %v", b, p, oldProbs)
			}
		}
	})
}
