package strictjson

// The decoder this package had before issue 28, kept as the tests' oracle
// and the benchmarks' "before": Check walked the body first (building a
// path string per level, all alive at once: memory quadratic in the
// depth), then encoding/json decoded it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// oldDecode is server/api's decodeOne before issue 28: the problems Check
// found, or encoding/json's error, or trailing data.
func oldDecode(b []byte, v any) ([]Problem, error) {
	if probs, _ := oldCheck(b, reflect.TypeOf(v)); len(probs) > 0 {
		return probs, errors.New("problems")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return nil, nil
}

func oldCheck(b []byte, t reflect.Type) ([]Problem, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	w := oldWalker{dec: dec}
	if err := w.value(t, ""); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return w.out, nil
}

type oldWalker struct {
	dec *json.Decoder
	out []Problem
}

// fields maps the JSON names of struct type t, lower-cased, to their types;
// nil when t is not a struct (any member is then accepted).
func oldFields(t reflect.Type) map[string]reflect.Type {
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
			for k, v := range oldFields(f.Type) {
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
func oldElem(t reflect.Type) reflect.Type {
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

func oldJoin(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// value walks one value, whose Go type is t (nil: unknown).
func (w *oldWalker) value(t reflect.Type, path string) error {
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
			if err := w.value(oldElem(t), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case '{':
		known := oldFields(t)
		isMap := t != nil && oldElem(t) != nil
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
				ft = oldElem(t)
			}
			p := oldJoin(path, name)
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
