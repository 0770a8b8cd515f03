// Package strictjson finds what encoding/json lets through silently in a
// JSON body: an object member named twice (the last would win) and, for a
// body decoded into a struct, every member that names none of its fields
// (DisallowUnknownFields stops at the first).
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// Problem is one member to refuse.
type Problem struct {
	// Path locates the member: "descriptors[0].entries[1].key"; a member
	// of the top-level object is its bare name.
	Path string
	// Duplicate: the member appears twice in its object; otherwise it is
	// unknown (no field of the struct it is decoded into).
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

// Check walks the JSON value in b, which will be decoded into a value of
// type t, and returns its problems in document order. Names match fields as
// encoding/json matches them (json tags, case-insensitively), so "Tier"
// after "tier" is a duplicate. It returns an error only for input that is
// not JSON (the decoder that follows names that better), never panics, and
// uses memory proportional to the nesting depth of b.
func Check(b []byte, t reflect.Type) ([]Problem, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	w := walker{dec: dec}
	if err := w.value(t, ""); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return w.out, nil
}

type walker struct {
	dec *json.Decoder
	out []Problem
}

// fields maps the JSON names of struct type t, lower-cased, to their types;
// nil when t is not a struct (any member is then accepted).
func fields(t reflect.Type) map[string]reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" { // promoted fields, as encoding/json reads them
			for k, v := range fields(f.Type) {
				if _, ok := m[k]; !ok {
					m[k] = v
				}
			}
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[strings.ToLower(name)] = f.Type
	}
	return m
}

// elem is the type of t's elements (slices, arrays, maps), or nil.
func elem(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return t.Elem()
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// value walks one value, whose Go type is t (nil: unknown).
func (w *walker) value(t reflect.Type, path string) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		for i := 0; w.dec.More(); i++ {
			if err := w.value(elem(t), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case '{':
		known := fields(t)
		isMap := t != nil && elem(t) != nil
		seen := map[string]bool{}
		for w.dec.More() {
			tok, err := w.dec.Token()
			if err != nil {
				return err
			}
			name, _ := tok.(string)
			key := name
			var ft reflect.Type
			unknown := false
			switch {
			case known != nil:
				key = strings.ToLower(name)
				ft, unknown = known[key], known[key] == nil
			case isMap:
				ft = elem(t)
			}
			p := join(path, name)
			if seen[key] {
				w.out = append(w.out, Problem{Path: p, Duplicate: true})
			} else if unknown {
				w.out = append(w.out, Problem{Path: p})
			}
			seen[key] = true
			if err := w.value(ft, p); err != nil {
				return err
			}
		}
	}
	_, err = w.dec.Token() // the closing delimiter
	return err
}
