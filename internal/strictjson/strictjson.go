// Package strictjson decodes a JSON body into a Go value strictly, in one
// pass whose memory is linear in the body: an object member named twice,
// a member that names no field of the struct it is decoded into, nesting
// deeper than MaxDepth, invalid UTF-8, trailing data and wrong types are
// all refused by the same pass that decodes.
//
// Names match fields as encoding/json matches them (json tags, embedded
// structs, case-insensitively), and values decode as encoding/json decodes
// them (go-json-experiment's v2 decoder with its v1 options), so a body
// that decodes here decodes the same way with encoding/json.
//
// Only when that pass refuses a body is the body read again, to name every
// refused member at once (at most MaxProblems of them) and, when members
// are all that is wrong, to decode it leniently for the caller's own
// checks: at most three linear passes, each holding at most MaxDepth levels.
package strictjson

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// MaxDepth bounds the nesting of a body: objects and arrays, together, at
// most this many levels deep. The deepest body Sluice decodes is 5 levels
// ({"descriptors":[{"entries":[{…}]}]}); a deeper one is refused as soon
// as its reader reaches the level past the bound.
const MaxDepth = 16

// MaxNameBytes bounds the bytes of a member name as written (escapes
// count as written). The longest name Sluice knows is 17 bytes; a longer
// one can only be refused as unknown, and is refused before the decoder
// holds it.
const MaxNameBytes = 256

// MaxProblems bounds the refused members one error lists; Error.More says
// that there were more.
const MaxProblems = 32

// maxName bounds the bytes of one member name quoted in a path, and
// maxValue those of one value quoted in a message, so that an error about a
// 256 KiB body is not itself 256 KiB.
const (
	maxName  = 64
	maxValue = 40
)

// Problem is one member to refuse.
type Problem struct {
	// Path locates the member: "descriptors[0].entries[1].key"; a member
	// of the top-level object is its bare name. A name longer than 64
	// bytes is cut, ending in "…".
	Path string
	// Duplicate: the member appears twice in its object (by the names
	// encoding/json matches, so "Tier" after "tier" is one); otherwise it
	// is unknown (no field of the struct it is decoded into).
	Duplicate bool
}

// String says what is wrong: `duplicate member "a.b"` or `unknown field
// "a.b"`.
func (p Problem) String() string {
	if p.Duplicate {
		return fmt.Sprintf("duplicate member %q (each name may appear once in an object)", p.Path)
	}
	return fmt.Sprintf("unknown field %q", p.Path)
}

// Error is what Decode returns for a body it refuses: the refused members,
// and what stopped the decoding, if anything did.
type Error struct {
	// Problems are the refused members in document order, at most
	// MaxProblems of them, up to where the body stops being JSON.
	Problems []Problem
	// More: there were more refused members than Problems lists.
	More bool
	// Field and Msg say what stopped the decoding: Field locates it as
	// Problem.Path does ("" for the body as a whole) and Msg says what is
	// wrong ("got JSON number -1, want a non-negative integer in range",
	// "nesting deeper than 16 levels at byte 17"). Msg is "" when the
	// refused members are all that is wrong: the value passed to Decode
	// then holds the body decoded as encoding/json would decode it (the
	// last of a repeated member wins, unknown members are ignored);
	// otherwise it may hold part of the body.
	Field, Msg string
}

// Error lists every problem, separated by "; ".
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	if e.More {
		fmt.Fprintf(&b, "; and more (the first %d are listed)", len(e.Problems))
	}
	if e.Msg != "" {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Where())
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	return b.String()
}

// Where is Field, or "body" when the whole body is meant.
func (e *Error) Where() string {
	if e.Field == "" {
		return "body"
	}
	return e.Field
}

var (
	// strict is the one decoding pass: encoding/json's semantics, with
	// every strictness this package promises.
	strict = json.JoinOptions(
		jsonv1.DefaultOptionsV1(),
		// v2's errors: they stop at the first problem and locate it (a
		// JSON pointer), and the value is not validated in a pass of its own
		// first, as v1's error reporting would.
		jsonv1.ReportErrorsWithLegacySemantics(false),
		jsontext.AllowDuplicateNames(false),
		jsontext.AllowInvalidUTF8(false),
		json.RejectUnknownMembers(true),
	)
	// lenient decodes what encoding/json would from a body whose members
	// are its only problems.
	lenient = json.JoinOptions(strict, jsontext.AllowDuplicateNames(true), json.RejectUnknownMembers(false))
)

// Decoder decodes with a set of Bounds; its zero value has none. It is
// safe for concurrent use. Make one per set of bounds and keep it: making
// one allocates.
type Decoder struct {
	strict, lenient json.Options
}

// Bound caps the elements of one kind of array as it is decoded (see
// MaxItems).
type Bound struct {
	u *json.Unmarshalers
}

// MaxItems bounds every array decoded into a []E to max elements, so that
// a body cannot make the decoder hold more of them than the caller will
// accept: elements past max are skipped (read for their syntax only) and
// counted, and the decoding stops with an Error whose Field is the array
// and whose Msg is msg(count). A negative max is no bound.
//
// An array of E decodes as encoding/json decodes it otherwise ([] is an
// empty slice, null leaves it nil), but each element into a fresh E:
// decoding into a slice that already holds elements does not merge them.
func MaxItems[E any](max int, msg func(count int) string) Bound {
	if max < 0 {
		return Bound{}
	}
	return Bound{json.UnmarshalFromFunc(func(dec *jsontext.Decoder, s *[]E) error {
		if dec.PeekKind() != '[' {
			return json.SkipFunc // null, or a wrong type: as usual
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		out, n := (*s)[:0], 0
		if out == nil {
			out = []E{}
		}
		for dec.PeekKind() != ']' {
			var err error
			if n < max {
				var e E
				if err = json.UnmarshalDecode(dec, &e); err == nil {
					out = append(out, e)
				}
			} else {
				err = dec.SkipValue()
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					return io.ErrUnexpectedEOF // inside the array
				}
				return err
			}
			n++
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		if n > max {
			return &overError{msg: msg(n)}
		}
		*s = out
		return nil
	})}
}

// overError is a MaxItems refusal.
type overError struct{ msg string }

func (e *overError) Error() string { return e.msg }

// New returns a Decoder with bounds.
func New(bounds ...Bound) *Decoder {
	var us []*json.Unmarshalers
	for _, b := range bounds {
		if b.u != nil {
			us = append(us, b.u)
		}
	}
	d := &Decoder{strict: strict, lenient: lenient}
	if len(us) > 0 {
		with := json.WithUnmarshalers(json.JoinUnmarshalers(us...))
		d.strict, d.lenient = json.JoinOptions(strict, with), json.JoinOptions(lenient, with)
	}
	return d
}

var plain = New()

// Decode is Decoder.Decode without bounds.
func Decode(body []byte, v any) error { return plain.Decode(body, v) }

// Decode decodes the one JSON value in body into v, a non-nil pointer. It
// returns nil, or an *Error naming every refused member (at most
// MaxProblems) and what stopped the decoding (see Error.Msg for what v
// holds then). It never panics.
//
// A body that decodes takes one pass. Its memory is what jsontext's
// decoder holds (a read buffer as large as the longest string or number,
// at most MaxDepth levels of state) and the decoded value itself: linear in
// the body, and within the Bounds however the body is shaped; Decode's own
// state is a fixed few hundred bytes. A refused body takes at most two more
// passes of the same bounds, and the error's text is bounded by
// MaxProblems paths of at most MaxDepth names, each cut at 64 bytes.
func (d *Decoder) Decode(body []byte, v any) error {
	if d.strict == nil {
		d = plain
	}
	pd := getDecoder(body, d.strict)
	defer pd.put()
	dec := pd.dec
	err := decodeOne(dec, v, d.strict)
	if err == nil {
		return nil
	}
	// The later passes reuse dec and its read buffer.
	t := reflect.TypeOf(v)
	e := &Error{}
	e.Problems, e.More = walk(dec, body, t)
	if !isMember(err) {
		e.Field, e.Msg = describe(err, t)
		return e
	}
	if len(e.Problems) == 0 {
		// The walk names the members it can reach by type; a repeated
		// name inside a map, an interface or an unknown member's value
		// is named from the strict pass's pointer instead.
		var sem *json.SemanticError
		e.Problems = []Problem{{Path: path(pointerOf(err), t), Duplicate: !errors.As(err, &sem)}}
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv.Elem().SetZero() // the strict pass stopped half-way
	}
	pd.r = depthReader{b: body}
	dec.Reset(&pd.r, d.lenient)
	if err := decodeOne(dec, v, d.lenient); err != nil {
		e.Field, e.Msg = describe(err, t)
	}
	return e
}

// DecodeLenient decodes the one JSON value in body into v as encoding/json
// would (unknown members ignored, the last of a repeated name kept), in one
// pass with d's bounds, MaxDepth and MaxNameBytes: for what another program
// answers (a newer server may add members), where Decode is for requests.
// Its error is an *Error saying what stopped the decoding; its memory is
// Decode's.
func (d *Decoder) DecodeLenient(body []byte, v any) error {
	if d.strict == nil {
		d = plain
	}
	pd := getDecoder(body, d.lenient)
	defer pd.put()
	if err := decodeOne(pd.dec, v, d.lenient); err != nil {
		e := &Error{}
		e.Field, e.Msg = describe(err, reflect.TypeOf(v))
		return e
	}
	return nil
}

// pooled is a jsontext decoder and its reader, kept from one body to the
// next: a fresh decoder allocates its state and, on its first string, a
// 4 KiB cache of the strings it made (go-json-experiment interns them),
// which was most of what decoding a small body allocated.
type pooled struct {
	dec *jsontext.Decoder
	r   depthReader
	big bool // decoded a body over maxPooledBody: not pooled again
}

// maxPooledBody is the largest body whose decoder is pooled: a decoder
// keeps a read buffer as large as its largest token.
const maxPooledBody = 64 << 10

var decoders = sync.Pool{New: func() any { return &pooled{dec: new(jsontext.Decoder)} }}

// getDecoder returns a pooled decoder reading body with opts.
func getDecoder(body []byte, opts json.Options) *pooled {
	pd := decoders.Get().(*pooled)
	pd.r = depthReader{b: body}
	pd.big = len(body) > maxPooledBody
	pd.dec.Reset(&pd.r, opts)
	return pd
}

// put pools pd again, holding nothing of the body it read.
func (pd *pooled) put() {
	if pd.big {
		return
	}
	pd.r = depthReader{}
	pd.dec.Reset(&pd.r, strict)
	decoders.Put(pd)
}

// decodeOne decodes the one value dec reads into v with opts and refuses
// trailing data.
func decodeOne(dec *jsontext.Decoder, v any, opts json.Options) error {
	if err := json.UnmarshalDecode(dec, v, opts); err != nil {
		return err
	}
	off := dec.InputOffset()
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return &trailingError{offset: off, t: reflect.TypeOf(v)}
	}
	return nil
}

// isMember reports whether err refuses a member (a repeated or unknown
// name) rather than the body.
func isMember(err error) bool {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return errors.Is(syn.Err, jsontext.ErrDuplicateName)
	}
	var sem *json.SemanticError
	return errors.As(err, &sem) && errors.Is(sem.Err, json.ErrUnknownName)
}

func pointerOf(err error) jsontext.Pointer {
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return syn.JSONPointer
	}
	var sem *json.SemanticError
	if errors.As(err, &sem) {
		return sem.JSONPointer
	}
	return ""
}

// trailingError: something follows the one value, of type t.
type trailingError struct {
	offset int64
	t      reflect.Type
}

func (e *trailingError) Error() string {
	what := "value"
	if w := want(e.t); w == "an object" || w == "an array" {
		what = strings.TrimPrefix(w, "an ")
	}
	return fmt.Sprintf("want exactly one JSON %s, found more after it at byte %d", what, e.offset)
}

// describe turns a decoding error into a field and a message.
func describe(err error, t reflect.Type) (field, msg string) {
	var deep *tooDeepError
	var trail *trailingError
	var over *overError
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &over):
		var ptr jsontext.Pointer
		if errors.As(err, &sem) {
			ptr = sem.JSONPointer
		}
		return path(ptr, t), over.msg
	case errors.As(err, &deep):
		return "", deep.Error()
	case errors.As(err, &trail):
		return "", trail.Error()
	case errors.Is(err, io.EOF) && !errors.As(err, &syn):
		return "", "empty, want " + want(t)
	case errors.As(err, &syn):
		if errors.Is(syn.Err, io.ErrUnexpectedEOF) {
			return "", "truncated JSON"
		}
		return "", fmt.Sprintf("invalid JSON at byte %d: %v", syn.ByteOffset, syn.Err)
	case errors.As(err, &sem):
		return path(sem.JSONPointer, t), typeMessage(sem)
	}
	return "", err.Error()
}

// typeMessage says what a value of the wrong type got and wanted:
// "got JSON number -1, want a non-negative integer in range".
func typeMessage(sem *json.SemanticError) string {
	got := "JSON value"
	switch sem.JSONKind {
	case 'n':
		got = "JSON null"
	case 't', 'f':
		got = "JSON boolean"
	case '"':
		got = "JSON string"
	case '0':
		got = "JSON number"
		if len(sem.JSONValue) > 0 {
			got += " " + cut(string(sem.JSONValue), maxValue)
		}
	case '[':
		got = "JSON array"
	case '{':
		got = "JSON object"
	}
	msg := "got " + got + ", want " + want(sem.GoType)
	var pe *time.ParseError
	if errors.As(sem.Err, &pe) {
		msg = fmt.Sprintf("got JSON string %q, want %s", cut(pe.Value, maxValue), want(sem.GoType))
	}
	return msg
}

var timeType = reflect.TypeFor[time.Time]()

// want names what a Go type takes, in JSON's words.
func want(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "a JSON value"
	}
	if t == timeType {
		return `an RFC 3339 time such as "2026-01-02T15:04:05Z"`
	}
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer in range"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a JSON value"
}

// path renders a JSON pointer into a value of type t as a Problem.Path,
// telling array indices from member names by the type.
func path(p jsontext.Pointer, t reflect.Type) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		var next reflect.Type
		switch {
		case t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
			b.WriteString("[" + cut(tok, maxName) + "]")
			t = t.Elem()
			continue
		case (t == nil || t.Kind() == reflect.Interface) && isIndex(tok):
			// An interface holds an array or an object; digits name an
			// index far more often than a member.
			b.WriteString("[" + tok + "]")
			continue
		case t != nil && t.Kind() == reflect.Struct:
			if f := fieldsOf(t).lookup([]byte(tok)); f >= 0 {
				next = fieldsOf(t).list[f].typ
			}
		case t != nil && t.Kind() == reflect.Map:
			next = t.Elem()
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(cut(tok, maxName))
		t = next
	}
	return b.String()
}

func isIndex(tok string) bool {
	if tok == "" || len(tok) > 10 {
		return false
	}
	for _, c := range []byte(tok) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
