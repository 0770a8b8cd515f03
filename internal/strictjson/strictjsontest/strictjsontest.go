// Package strictjsontest holds what the tests of every JSON decoder share:
// the worst bodies a size limit allows, and the measure and budget of the
// bytes one decode may allocate.
package strictjsontest

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
)

// The budget of one decode of a body of n bytes is BudgetFactor·n +
// BudgetSlack bytes allocated, everything included: the handler's copy of
// the body (1·n), jsontext's read buffer (it doubles to hold the longest
// string or number: up to 2·n, shared by the passes of one decode), the
// decoded value (its strings, at most 1·n; its arrays are bounded by
// strictjson.MaxItems, not by n) and, for a refused body, the messages
// (bounded by strictjson.MaxProblems). The worst body measured takes about
// 5·n (a 256 KiB string, then an unknown member: three passes over it);
// 8 leaves room for a decoder's version to grow its buffer differently. The
// slack is the fixed part: decoders, options, error values.
const (
	BudgetFactor = 8
	BudgetSlack  = 64 << 10
)

// Budget is the most bytes one decode of a body of n bytes may allocate.
func Budget(n int) uint64 { return BudgetFactor*uint64(n) + BudgetSlack }

// Allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc)
// measured against budget: f runs until one run allocates at most budget,
// at most three times, and the fewest bytes of those runs are returned, so
// that another goroutine's allocation during one run does not fail the
// budget. A decode within its budget runs once (under -race a worst body
// takes a tenth of a second).
func Allocated(budget uint64, f func()) uint64 {
	best := ^uint64(0)
	for range 3 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		best = min(best, after.TotalAlloc-before.TotalAlloc)
		if best <= budget {
			break
		}
	}
	return best
}

// Body is one body to decode.
type Body struct {
	Name string
	B    []byte
}

// Shape describes a body of repeated elements: Prefix, then Elem as many
// times as fit (comma-separated; "#" in Elem becomes the element's index),
// then Suffix.
type Shape struct {
	Name, Prefix, Elem, Suffix string
}

// Fill makes the body of s of at most limit bytes.
func (s Shape) Fill(limit int) []byte {
	var b bytes.Buffer
	b.WriteString(s.Prefix)
	for i := 0; ; i++ {
		e := strings.ReplaceAll(s.Elem, "#", strconv.Itoa(i))
		if b.Len()+len(e)+1+len(s.Suffix) > limit {
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e)
	}
	b.WriteString(s.Suffix)
	return b.Bytes()
}

// Worst returns the worst bodies of at most limit bytes for a decoder of
// JSON objects with a string member named known, and then those of shapes
// (the schema's own: many descriptors, many entries): deep nesting of '['
// and of {"a":, at the top and inside members, known and unknown; many
// members, unknown and repeated; long names; long strings, escapes and
// numbers before and after an unknown member.
func Worst(limit int, known string, shapes ...Shape) []Body {
	k := strconv.Quote(known)
	pad := func(prefix, elem, suffix string) []byte { // prefix, elem repeated, suffix: limit bytes
		n := max((limit-len(prefix)-len(suffix))/len(elem), 0)
		return []byte(prefix + strings.Repeat(elem, n) + suffix)
	}
	out := []Body{
		{"brackets", pad("", "[", "")},
		{"objects", pad("", `{"a":`, "")},
		{"brackets in known", pad(`{`+k+`:`, "[", "")},
		{"brackets in unknown", pad(`{"x":`, "[", "")},
		{"objects in unknown", pad(`{"x":`, `{"a":`, "")},
		{"closed brackets", []byte(`{"x":` + strings.Repeat("[", limit/2-8) + strings.Repeat("]", limit/2-8) + `}`)},
		{"commas", pad(`{"x":[`, ",", "]}")},
		{"long string", pad(`{`+k+`:"`, "x", `"}`)},
		{"long string, then unknown", pad(`{`+k+`:"`, "x", `","x":1}`)},
		{"unknown, then long string", pad(`{"x":1,`+k+`:"`, "x", `"}`)},
		{"long escapes", pad(`{"x":1,`+k+`:"`, `\u0041`, `"}`)},
		{"long number", pad(`{"x":1,"n":1`, "0", `}`)},
		{"long name", pad(`{"`, "x", `":1}`)},
		{"invalid UTF-8 at the end", pad(`{`+k+`:"`, "x", "\xff\"}")},
	}
	for _, s := range append([]Shape{
		{"repeated known member", "{", k + `:""`, "}"},
		{"unknown members", "{", `"a#":0`, "}"},
		{"repeated unknown member", "{", `"a":0`, "}"},
		{"long unknown names", "{", `"` + strings.Repeat("a", 240) + `#":0`, "}"},
		{"empty objects in unknown", `{"x":[`, "{}", "]}"},
		{"strings in unknown", `{"x":[`, `"a"`, "]}"},
		{"repeated members in unknown", `{"x":{`, `"a":0`, "}}"},
	}, shapes...) {
		out = append(out, Body{s.Name, s.Fill(limit)})
	}
	return out
}
