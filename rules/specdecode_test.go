package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/strictjson"
)

// The two decoders below are the tests' (TestSpecYAMLAndJSON, FuzzDecodeSpec):
// they put one limit, written on its own, through the code the sources use —
// the rule-file walker (parser.spec) and strictjson — so that both spellings
// can be compared. No source takes a limit on its own: rule files reach
// parser.spec through the file's walker, and JSON bodies decode a struct
// holding a Spec through strictjson (a source that must tell a written zero
// from an absent field sets Given itself, as tenant.Prepare does).

// DecodeSpecYAML decodes a Spec from data, one YAML document holding a
// rate_limit mapping, with the decoder rule files use: each value's type is
// checked (what it means is Spec.Rule's or Spec.TierLimit's to say), and
// unknown and repeated keys are refused. Problems come back as Errors
// naming file, line and the field's key; the Spec records the line of each
// field, so the validator's SpecErrors carry lines too.
func DecodeSpecYAML(file string, data []byte) (s *Spec, err error) {
	p := &parser{file: file}
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, Errors{{File: file, Msg: fmt.Sprintf("YAML parser failed: %v", r)}}
		}
	}()
	if len(data) > MaxFileBytes {
		return nil, Errors{{File: file, Msg: fmt.Sprintf("%d bytes, more than the limit of %d (rules.MaxFileBytes)", len(data), MaxFileBytes)}}
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: file, Msg: "empty; want a rate_limit mapping"}}
		}
		p.syntax(err)
		return nil, p.probs
	}
	if len(doc.Content) == 0 {
		return nil, Errors{{File: file, Msg: "empty; want a rate_limit mapping"}}
	}
	s, ok := p.spec(p.resolve(doc.Content[0]), "", rateLimitKeys)
	if !ok || len(p.probs) > 0 {
		p.probs.sort()
		return nil, p.probs
	}
	return s, nil
}

// DecodeSpecJSON decodes a Spec from the JSON object data, strictly
// (internal/strictjson: unknown and repeated members, wrong types,
// trailing data and nesting past its bound are refused), and marks in
// Given every member present, so that a zero written is told from one
// left out as in YAML (for the comparison; the sources leave Given zero). Problems come back as SpecErrors whose Field is the
// JSON path from path (the place of the object in its body, such as
// "quotas[2].limit"; "" for a body that is the Spec).
func DecodeSpecJSON(data []byte, path string) (*Spec, error) {
	var s Spec
	if err := strictjson.Decode(data, &s); err != nil {
		return nil, jsonErrors(err, path)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return nil, SpecErrors{{Field: path, Msg: err.Error()}}
	}
	s.Given = givenOf(members)
	for name, raw := range members {
		if name != "tiers" {
			continue
		}
		var tiers map[string]map[string]json.RawMessage
		if json.Unmarshal(raw, &tiers) == nil {
			for t, m := range tiers {
				if ts := s.Tiers[t]; ts != nil {
					ts.Given = givenOf(m)
				}
			}
		}
	}
	return &s, nil
}

func givenOf[V any](members map[string]V) Field {
	var f Field
	for name := range members {
		f |= fieldOfKey(name)
	}
	return f
}

// jsonErrors turns strictjson's refusal into SpecErrors at path.
func jsonErrors(err error, path string) SpecErrors {
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return SpecErrors{{Field: path, Msg: err.Error()}}
	}
	var out SpecErrors
	for _, p := range se.Problems {
		msg := "unknown field"
		if p.Duplicate {
			msg = "duplicate member (each name may appear once in an object)"
		}
		out = append(out, SpecError{Field: join(path, p.Path), Msg: msg})
	}
	if se.Msg != "" {
		out = append(out, SpecError{Field: join(path, se.Field), Msg: se.Msg})
	}
	return out
}
