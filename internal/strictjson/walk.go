package strictjson

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// walkOptions read what the strict pass reads, repeated names aside: the
// walk finds those itself, all of them.
var walkOptions = json.JoinOptions(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(false))

// errFull stops a walk that has found MaxProblems members.
var errFull = errors.New("strictjson: enough problems")

// walk lists the refused members of body (read with dec, reset), to be
// decoded into a value of type t, in document order: at most MaxProblems, and more says whether
// there were others. It reads the body once, to its end or to the first
// byte that is not JSON (or past MaxDepth), descending only where t says
// the value is a struct or a slice of one; a value of any other type, or
// of an unknown member, is skipped whole. Its memory is the decoder's,
// MaxDepth path segments (names cut at 64 bytes), the longest member name,
// and the paths it returns; a path is built only for a problem found.
func walk(dec *jsontext.Decoder, body []byte, t reflect.Type) (probs []Problem, more bool) {
	dec.Reset(&depthReader{b: body}, walkOptions)
	w := walker{dec: dec}
	if err := w.value(t); errors.Is(err, errFull) {
		w.more = true
	}
	return w.out, w.more
}

type walker struct {
	dec  *jsontext.Decoder
	segs []segment // the path to the value being read
	name []byte    // the member name being read, unquoted
	out  []Problem
	more bool
}

// segment is one step of a path: a member name (cut) or an array index.
type segment struct {
	name  []byte
	index int // -1: a member
}

func (w *walker) push(name []byte, index int) {
	if len(w.segs) < cap(w.segs) {
		w.segs = w.segs[:len(w.segs)+1]
	} else {
		w.segs = append(w.segs, segment{})
	}
	s := &w.segs[len(w.segs)-1]
	s.name, s.index = append(s.name[:0], name...), index
	if index < 0 && len(s.name) > maxName {
		s.name = append(s.name[:0], cut(string(name), maxName)...)
	}
}

func (w *walker) pop() { w.segs = w.segs[:len(w.segs)-1] }

// report adds the member w.name, found in the object at w.segs.
func (w *walker) report(dup bool) error {
	if len(w.out) == MaxProblems {
		return errFull
	}
	var b strings.Builder
	for _, s := range w.segs {
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.Write(s.name)
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(cut(string(w.name), maxName))
	w.out = append(w.out, Problem{Path: b.String(), Duplicate: dup})
	return nil
}

// value walks one value, of Go type t (nil: unknown).
func (w *walker) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch w.dec.PeekKind() {
	case '[':
		if t == nil || (t.Kind() != reflect.Slice && t.Kind() != reflect.Array) {
			return w.dec.SkipValue()
		}
		if _, err := w.dec.ReadToken(); err != nil {
			return err
		}
		for i := 0; w.dec.PeekKind() != ']'; i++ {
			w.push(nil, i)
			err := w.value(t.Elem())
			w.pop()
			if err != nil {
				return err
			}
		}
		_, err := w.dec.ReadToken()
		return err
	case '{':
		if t == nil || t.Kind() != reflect.Struct {
			return w.dec.SkipValue()
		}
		return w.object(fieldsOf(t))
	}
	return w.dec.SkipValue()
}

// object walks an object decoded into a struct with fields fs.
func (w *walker) object(fs *fieldSet) error {
	if _, err := w.dec.ReadToken(); err != nil {
		return err
	}
	var seen uint64 // fields 0…63 named so far; fields past 63 in many
	var many map[int]bool
	var unknown [][]byte // the unknown names of this object
	for w.dec.PeekKind() != '}' {
		raw, err := w.dec.ReadValue()
		if err != nil {
			return err
		}
		if w.name, err = jsontext.AppendUnquote(w.name[:0], raw); err != nil {
			return err
		}
		f := fs.lookup(w.name)
		if f < 0 {
			// An unknown name repeated is reported as repeated; the names
			// kept to tell are those reported, at most MaxProblems.
			dup := false
			for _, u := range unknown {
				dup = dup || bytes.Equal(u, w.name)
			}
			if !dup {
				unknown = append(unknown, bytes.Clone(w.name))
			}
			if err := w.report(dup); err != nil {
				return err
			}
			if err := w.dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		var dup bool
		if f < 64 {
			dup, seen = seen&(1<<f) != 0, seen|1<<f
		} else {
			if many == nil {
				many = map[int]bool{}
			}
			dup, many[f] = many[f], true
		}
		if dup {
			if err := w.report(true); err != nil {
				return err
			}
		}
		w.push(w.name, -1)
		err = w.value(fs.list[f].typ)
		w.pop()
		if err != nil {
			return err
		}
	}
	_, err := w.dec.ReadToken()
	return err
}

// fieldSet is what a struct type's objects may hold, as encoding/json
// reads it: json tags, fields promoted from embedded structs.
type fieldSet struct {
	list []field
}

type field struct {
	name []byte
	typ  reflect.Type
}

// lookup finds the field a member name means, as encoding/json does (the
// exact name first, then one equal but for case), or returns -1.
func (fs *fieldSet) lookup(name []byte) int {
	for i := range fs.list {
		if bytes.Equal(fs.list[i].name, name) {
			return i
		}
	}
	for i := range fs.list {
		if bytes.EqualFold(fs.list[i].name, name) {
			return i
		}
	}
	return -1
}

var fieldSets sync.Map // reflect.Type → *fieldSet

// fieldsOf returns the fields of struct type t (cached: types are few).
func fieldsOf(t reflect.Type) *fieldSet {
	if fs, ok := fieldSets.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs := &fieldSet{}
	type candidate struct {
		field
		depth  int
		tagged bool
	}
	byName := map[string][]candidate{}
	var order []string
	var visit func(t reflect.Type, depth int, seen map[reflect.Type]bool)
	visit = func(t reflect.Type, depth int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if sf.Anonymous && name == "" {
				ft := sf.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					visit(ft, depth+1, seen)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			tagged := name != ""
			if !tagged {
				name = sf.Name
			}
			if _, ok := byName[name]; !ok {
				order = append(order, name)
			}
			byName[name] = append(byName[name], candidate{field{[]byte(name), sf.Type}, depth, tagged})
		}
	}
	visit(t, 0, map[reflect.Type]bool{})
	for _, name := range order {
		// The shallowest wins; at one depth, the only tagged one; else
		// none (encoding/json's rule for ambiguous names).
		cs := byName[name]
		best := []candidate{}
		for _, c := range cs {
			switch {
			case len(best) == 0 || c.depth < best[0].depth:
				best = []candidate{c}
			case c.depth == best[0].depth:
				best = append(best, c)
			}
		}
		if len(best) > 1 {
			var tagged []candidate
			for _, c := range best {
				if c.tagged {
					tagged = append(tagged, c)
				}
			}
			best = tagged
		}
		if len(best) == 1 {
			fs.list = append(fs.list, best[0].field)
		}
	}
	got, _ := fieldSets.LoadOrStore(t, fs)
	return got.(*fieldSet)
}
