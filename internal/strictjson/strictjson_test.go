package strictjson

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type inner struct {
	Entries []entry `json:"entries"`
}

type base struct {
	Domain string `json:"domain"`
}

type request struct {
	base
	Descriptors []inner           `json:"descriptors"`
	Labels      map[string]string `json:"labels"`
	Any         any               `json:"any"`
	Skip        string            `json:"-"`
}

func TestCheck(t *testing.T) {
	typ := reflect.TypeOf(&request{})
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"clean", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}],"labels":{"a":"1"},"any":{"x":1,"y":{"z":2}}}`, nil},
		{"duplicate top", `{"domain":"a","domain":"b"}`, []string{`duplicate member "domain"`}},
		{"duplicate by case, as encoding/json matches", `{"domain":"a","Domain":"b"}`, []string{`duplicate member "Domain"`}},
		{"duplicate nested", `{"descriptors":[{"entries":[{"key":"k"},{"key":"a","value":"1","key":"b"}]}]}`, []string{`duplicate member "descriptors[0].entries[1].key"`}},
		{"duplicate in a map", `{"labels":{"a":"1","a":"2"}}`, []string{`duplicate member "labels.a"`}},
		{"duplicate inside any", `{"any":{"x":1,"x":2}}`, []string{`duplicate member "any.x"`}},
		{"every unknown at once", `{"domian":"d","descriptors":[{"entries":[{"kee":"k"}],"limit":1}],"Skip":"x"}`,
			[]string{`unknown field "domian"`, `unknown field "descriptors[0].entries[0].kee"`, `unknown field "descriptors[0].limit"`, `unknown field "Skip"`}},
		{"unknown and duplicate", `{"x":1,"x":2}`, []string{`unknown field "x"`, `duplicate member "x"`}},
	} {
		probs, err := Check([]byte(tc.in), typ)
		if err != nil {
			t.Errorf("%s: error %v", tc.name, err)
			continue
		}
		var got []string
		for _, p := range probs {
			got = append(got, p.String())
		}
		for i := range max(len(got), len(tc.want)) {
			if i >= len(got) || i >= len(tc.want) || !strings.HasPrefix(got[i], tc.want[i]) {
				t.Errorf("%s: problems %q, want %q", tc.name, got, tc.want)
				break
			}
		}
	}
	for _, bad := range []string{``, `{`, `{"a":`, `[1,`, `{"a" 1}`} {
		if _, err := Check([]byte(bad), typ); err == nil {
			t.Errorf("Check(%q): no error, want one", bad)
		}
	}
}

// FuzzCheck: Check never panics; without a struct type it never reports an
// unknown field; and on every JSON value that go-json-experiment's jsontext
// reads (it refuses duplicate names by default) Check reports a duplicate
// exactly when jsontext does.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"domain":"a","domain":"b"}`, `{"a":[{"b":1,"b":2}]}`, `{"a":{"A":1}}`, `[{"x":{}},{"x":1,"x":[1,{"y":2,"y":3}]}]`, `"s"`, `{"\u0061":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		probs, err := Check(b, nil)
		for _, p := range probs {
			if !p.Duplicate {
				t.Fatalf("Check(%q, nil) reported %s: no type, no unknown fields", b, p)
			}
		}
		_, _ = Check(b, reflect.TypeOf(&request{}))
		if err != nil {
			return
		}
		dec := jsontext.NewDecoder(bytes.NewReader(b))
		_, jerr := dec.ReadValue()
		var serr *jsontext.SyntacticError
		dup := errors.As(jerr, &serr) && errors.Is(serr.Err, jsontext.ErrDuplicateName)
		if jerr != nil && !dup {
			return // invalid UTF-8 and the like, which jsontext refuses first
		}
		if dup != (len(probs) > 0) {
			t.Fatalf("Check(%q) = %v; jsontext says duplicate: %v (%v)", b, probs, dup, jerr)
		}
	})
}
