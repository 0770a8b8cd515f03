package strictjson

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type inner struct {
	Entries []entry `json:"entries"`
	Hits    *uint64 `json:"hits,omitempty"`
}

type base struct {
	Domain string `json:"domain"`
}

type request struct {
	base
	Descriptors []inner           `json:"descriptors"`
	Labels      map[string]string `json:"labels"`
	Any         any               `json:"any"`
	At          *time.Time        `json:"at"`
	Skip        string            `json:"-"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in   string
		problems   []string // prefixes of Problem.String, in order
		field, msg string   // Error.Field, and a part of Error.Msg ("" for none)
	}{
		{name: "clean", in: `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}],"labels":{"a":"1"},"any":{"x":1,"y":{"z":2}}}`},
		{name: "names match as encoding/json matches them", in: `{"DOMAIN":"d","Descriptors":[{"ENTRIES":[{"Key":"k"}]}]}`},
		{name: "duplicate top", in: `{"domain":"a","domain":"b"}`, problems: []string{`duplicate member "domain"`}},
		{name: "duplicate by case", in: `{"domain":"a","Domain":"b"}`, problems: []string{`duplicate member "Domain"`}},
		{name: "duplicate nested", in: `{"descriptors":[{"entries":[{"key":"k"},{"key":"a","value":"1","key":"b"}]}]}`, problems: []string{`duplicate member "descriptors[0].entries[1].key"`}},
		{name: "duplicate in a map", in: `{"labels":{"a":"1","a":"2"}}`, problems: []string{`duplicate member "labels.a"`}},
		{name: "duplicate inside any", in: `{"any":{"x":1,"x":2}}`, problems: []string{`duplicate member "any.x"`}},
		{name: "every unknown at once", in: `{"domian":"d","descriptors":[{"entries":[{"kee":"k"}],"limit":1}],"Skip":"x"}`,
			problems: []string{`unknown field "domian"`, `unknown field "descriptors[0].entries[0].kee"`, `unknown field "descriptors[0].limit"`, `unknown field "Skip"`}},
		{name: "unknown and duplicate", in: `{"x":1,"x":2}`, problems: []string{`unknown field "x"`, `duplicate member "x"`}},
		{name: "members, then a wrong type", in: `{"x":1,"descriptors":[{"hits":-1}]}`, problems: []string{`unknown field "x"`},
			field: "descriptors[0].hits", msg: "got JSON number -1, want a non-negative integer in range"},
		{name: "wrong type, then members", in: `{"domain":5,"x":1}`, problems: []string{`unknown field "x"`}, field: "domain", msg: "got JSON number, want a string"},
		{name: "not an object", in: `[]`, msg: "got JSON array, want an object"},
		{name: "a time", in: `{"at":"yesterday"}`, field: "at", msg: `got JSON string "yesterday", want an RFC 3339 time`},
		{name: "empty", in: ``, msg: "empty, want an object"},
		{name: "truncated", in: `{"domain":`, msg: "truncated JSON"},
		{name: "truncated in an array", in: `{"descriptors":[`, msg: "truncated JSON"},
		{name: "syntax", in: `{"domain" "x"}`, msg: "invalid JSON at byte 10"},
		{name: "trailing data", in: `{"domain":"d"} {}`, msg: "want exactly one JSON object, found more after it at byte 14"},
		{name: "invalid UTF-8", in: "{\"domain\":\"\xff\"}", msg: "invalid UTF-8"},
		{name: "a lone surrogate", in: `{"domain":"\ud800"}`, msg: "invalid surrogate"},
		{name: "deepest allowed", in: `{"any":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`},
		{name: "too deep", in: `{"any":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, msg: "nesting deeper than 16 levels at byte 22"},
		{name: "too deep in an unknown member", in: `{"x":` + strings.Repeat(`{"a":`, 100000), problems: []string{`unknown field "x"`}, msg: "nesting deeper than 16 levels"},
		{name: "brackets in a string are not levels", in: `{"domain":"` + strings.Repeat(`[{\"`, 100) + `"}`},
		{name: "longest name", in: `{"labels":{"` + strings.Repeat("a", MaxNameBytes) + `":"1"}}`},
		{name: "name too long", in: `{"labels":{"` + strings.Repeat("a", MaxNameBytes+1) + `":"1"}}`, msg: "member name longer than 256 bytes at byte 268"},
		{name: "long values are not names", in: `{"labels":{"a":"` + strings.Repeat("a", 10*MaxNameBytes) + `"}}`},
	} {
		var v request
		err := Decode([]byte(tc.in), &v)
		if tc.problems == nil && tc.msg == "" {
			if err != nil {
				t.Errorf("%s: Decode(%.80q) = %v, want nil", tc.name, tc.in, err)
			}
			continue
		}
		e, ok := err.(*Error)
		if !ok {
			t.Errorf("%s: Decode(%.80q) = %T %v, want an *Error", tc.name, tc.in, err, err)
			continue
		}
		var got []string
		for _, p := range e.Problems {
			got = append(got, p.String())
		}
		for i := range max(len(got), len(tc.problems)) {
			if i >= len(got) || i >= len(tc.problems) || !strings.HasPrefix(got[i], tc.problems[i]) {
				t.Errorf("%s: problems %q, want %q", tc.name, got, tc.problems)
				break
			}
		}
		if e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) || (tc.msg == "") != (e.Msg == "") {
			t.Errorf("%s: field %q msg %q, want %q containing %q", tc.name, e.Field, e.Msg, tc.field, tc.msg)
		}
	}
}

// TestDecodeMembersOnly: when members are all that is wrong, the value is
// decoded as encoding/json decodes it (the last repeated member wins).
func TestDecodeMembersOnly(t *testing.T) {
	var v request
	err := Decode([]byte(`{"domain":"a","x":[1],"domain":"b","descriptors":[{"entries":[{"key":"k","kee":1}]}]}`), &v)
	e, ok := err.(*Error)
	if !ok || e.Msg != "" || len(e.Problems) != 3 {
		t.Fatalf("Decode = %v, want three member problems and nothing else", err)
	}
	want := request{base: base{"b"}, Descriptors: []inner{{Entries: []entry{{Key: "k"}}}}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("decoded %+v, want %+v", v, want)
	}
}

// TestErrorIsBounded: a body of many unknown long names is reported in at
// most MaxProblems paths, each name cut.
func TestErrorIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 1000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"` + strings.Repeat("é", 120) + `":0`)
	}
	b.WriteString("}")
	err := Decode([]byte(b.String()), &request{})
	e, ok := err.(*Error)
	if !ok || len(e.Problems) != MaxProblems || !e.More {
		t.Fatalf("Decode of 1000 unknown members = %v, want %d problems and More", err, MaxProblems)
	}
	for _, p := range e.Problems {
		if len(p.Path) > maxName+len("…") || !strings.HasSuffix(p.Path, "…") {
			t.Fatalf("path %q: %d bytes, want at most %d ending in …", p.Path, len(p.Path), maxName+len("…"))
		}
	}
	if n := len(err.Error()); n > MaxProblems*200 {
		t.Errorf("error text of %d bytes, want at most %d", n, MaxProblems*200)
	}
}

func TestMaxItems(t *testing.T) {
	d := New(MaxItems[inner](2, func(n int) string { return "too many descriptors" }),
		MaxItems[entry](3, func(n int) string { return strings.Repeat("e", n) }))
	for _, tc := range []struct {
		in, field, msg string
	}{
		{in: `{"descriptors":[{},{}]}`},
		{in: `{"descriptors":[{},{},{}]}`, field: "descriptors", msg: "too many descriptors"},
		{in: `{"descriptors":[{"entries":[{},{},{}]},{"entries":[{},{},{},{},{"x":1}]}]}`, field: "descriptors[1].entries", msg: "eeeee"},
		{in: `{"descriptors":[{"entries":[1]}]}`, field: "descriptors[0].entries[0]", msg: "got JSON number, want an object"},
		{in: `{"descriptors":[{"entries":[{}`, msg: "truncated JSON"},
	} {
		var v request
		err := d.Decode([]byte(tc.in), &v)
		if tc.msg == "" {
			if err != nil {
				t.Errorf("Decode(%s) = %v, want nil", tc.in, err)
			}
			continue
		}
		if e, ok := err.(*Error); !ok || e.Field != tc.field || e.Msg != tc.msg {
			t.Errorf("Decode(%s) = %v, want %s: %s", tc.in, err, tc.field, tc.msg)
		}
	}
	// The slices decode as encoding/json decodes them.
	for _, tc := range []struct {
		in   string
		want []inner
	}{{`{}`, nil}, {`{"descriptors":null}`, nil}, {`{"descriptors":[]}`, []inner{}}, {`{"descriptors":[{"entries":[]}]}`, []inner{{Entries: []entry{}}}}} {
		var v request
		if err := d.Decode([]byte(tc.in), &v); err != nil || !reflect.DeepEqual(v.Descriptors, tc.want) || (v.Descriptors == nil) != (tc.want == nil) {
			t.Errorf("Decode(%s) = %v, descriptors %#v; want %#v", tc.in, err, v.Descriptors, tc.want)
		}
	}
}

func TestDepthReader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // offset of the refusal, -1 for none
	}{
		{strings.Repeat("[", MaxDepth), -1},
		{strings.Repeat("[", MaxDepth+1), MaxDepth},
		{`["` + strings.Repeat("[", 100) + `"]`, -1},
		{`["\"` + strings.Repeat("[", 100) + `"]`, -1},
		{`["\\",` + strings.Repeat("[", MaxDepth) + `]`, 6 + MaxDepth - 1},
		{strings.Repeat("]", 100) + strings.Repeat("[", MaxDepth), -1},
		{`{"` + strings.Repeat("a", MaxNameBytes) + `":1}`, -1},
		{`{"a":1,"` + strings.Repeat("a", MaxNameBytes+1) + `":1}`, 8 + MaxNameBytes},
		{`[{},"` + strings.Repeat("a", 1000) + `"]`, -1},
		{`{"a":["` + strings.Repeat("a", 1000) + `"]}`, -1},
	} {
		r := &depthReader{b: []byte(tc.in)}
		got := int64(-1)
		buf := make([]byte, 7) // small reads: the state carries across them
		for {
			_, err := r.Read(buf)
			if err != nil {
				if e, ok := err.(*tooDeepError); ok {
					got = e.offset
				}
				break
			}
		}
		if got != tc.want {
			t.Errorf("depthReader(%.40q) refused at %d, want %d", tc.in, got, tc.want)
		}
	}
}
