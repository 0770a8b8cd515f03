package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json/jsontext"
	"google.golang.org/protobuf/encoding/protojson"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/rlsproto"
	"github.com/sluice-rl/sluice/internal/strictjson"
	"github.com/sluice-rl/sluice/service"
)

// DecodeEnvoyJSON decodes the body of POST /json, a protojson
// RateLimitRequest, and converts it as the gRPC server does, with the
// default service.RequestBounds. Errors name the problem; unknown fields are
// errors. It never panics.
func DecodeEnvoyJSON(b []byte) (service.Request, error) {
	return decodeEnvoyJSON(b, service.RequestBounds{})
}

// decodeEnvoyJSON is DecodeEnvoyJSON with lim. The body is first read by
// boundEnvoyJSON, which refuses, without decoding anything, what would make
// protojson hold more than lim allows (more descriptors or entries than
// lim's, nesting deeper than strictjson.MaxDepth, a member name longer
// than strictjson.MaxNameBytes) and what is not JSON (invalid UTF-8, lone
// surrogate escapes included); then protojson decodes it, with its own
// semantics unchanged: lowerCamel and proto names, numbers as strings,
// enums by name or number, duplicate and unknown fields refused.
func decodeEnvoyJSON(b []byte, lim service.RequestBounds) (service.Request, error) {
	if err := boundEnvoyJSON(b, lim); err != nil {
		return service.Request{}, err
	}
	var pr rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(b, &pr); err != nil {
		return service.Request{}, &bodyError{msg: "body: " + cutTo(err.Error(), maxEnvoyError), err: err}
	}
	return rlsproto.FromProtoLimits(&pr, lim)
}

// maxEnvoyError bounds the bytes of protojson's message quoted in an error
// (it quotes the offending token, which may be the whole body).
const maxEnvoyError = 256

// bodyError is a refused /json body: msg says why, err is protojson's error.
type bodyError struct {
	msg string
	err error
}

func (e *bodyError) Error() string { return e.msg }
func (e *bodyError) Unwrap() error { return e.err }

// envoyRole is what a JSON value is in a RateLimitRequest, as far as
// boundEnvoyJSON needs to know.
type envoyRole uint8

const (
	roleOther       envoyRole = iota
	roleRequest               // the top-level object
	roleDescriptors           // its "descriptors" array
	roleDescriptor            // one element of it
	roleEntries               // a descriptor's "entries" array
)

// envoyLevel is one open object or array of boundEnvoyJSON's walk.
type envoyLevel struct {
	role envoyRole
	obj  bool
	name bool      // an object expects a member name next
	next envoyRole // an object's role for its member being read
	n    int       // an array's elements so far
	desc int       // roleEntries: the index of its descriptor
}

// boundEnvoyJSON reads b as one JSON value, token by token, without
// decoding it: it refuses a body that is not JSON (syntax, invalid UTF-8,
// lone surrogates), that nests deeper than strictjson.MaxDepth (as soon as
// it opens the level past it), that names a member with more than
// strictjson.MaxNameBytes bytes, or whose descriptors or whose
// descriptor's entries (at the names protojson gives them, "descriptors"
// and "entries", escapes decoded) are more than lim allows: the error
// wraps rlsproto.ErrInvalidRequest and the *service.LimitError that
// rlsproto.FromProtoLimits would give, counting the whole array. It
// allocates a fixed few hundred bytes, whatever the body: jsontext reads
// b in place and its state holds at most MaxDepth levels. What it does not
// refuse, protojson decodes (unknown and duplicate members included: it
// refuses them at the first).
func boundEnvoyJSON(b []byte, lim service.RequestBounds) error {
	dec := jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true))
	var stack [strictjson.MaxDepth]envoyLevel
	depth := 0
	for {
		var top *envoyLevel
		if depth > 0 {
			top = &stack[depth-1]
		}
		if top != nil && top.obj && top.name {
			if dec.PeekKind() == '}' {
				top.name = false // the close below
			} else {
				v, err := dec.ReadValue()
				if err != nil {
					return envoySyntax(err)
				}
				if len(v) > strictjson.MaxNameBytes+2 {
					return fmt.Errorf("body: member name longer than %d bytes at byte %d", strictjson.MaxNameBytes, dec.InputOffset()-int64(len(v)))
				}
				top.name, top.next = false, roleOther
				switch {
				case top.role == roleRequest && nameIs(v, "descriptors"):
					top.next = roleDescriptors
				case top.role == roleDescriptor && nameIs(v, "entries"):
					top.next = roleEntries
				}
				continue
			}
		}
		kind := dec.PeekKind()
		if kind == 0 {
			_, err := dec.ReadToken()
			return envoySyntax(err)
		}
		if kind == '}' || kind == ']' {
			if _, err := dec.ReadToken(); err != nil {
				return envoySyntax(err)
			}
			if err := envoyCount(top, lim); err != nil {
				return err
			}
			depth--
			if depth == 0 {
				// One value read; protojson refuses what follows it.
				return nil
			}
			stack[depth-1].name = stack[depth-1].obj
			continue
		}
		// A value starts: its role is given by where it is.
		role := roleOther
		switch {
		case top == nil:
			role = roleRequest
		case top.obj:
			role = top.next
		case top.role == roleDescriptors:
			role = roleDescriptor
		}
		if top != nil && !top.obj {
			top.n++
		}
		if kind != '{' && kind != '[' {
			if _, err := dec.ReadValue(); err != nil {
				return envoySyntax(err)
			}
			if top == nil {
				return nil // a scalar body: protojson refuses it
			}
			top.name = top.obj
			continue
		}
		if depth == strictjson.MaxDepth {
			rest := dec.UnreadBuffer() // the opening byte, after separators
			off := dec.InputOffset() + int64(len(rest)-len(bytes.TrimLeft(rest, " \t\r\n,:")))
			return fmt.Errorf("body: nesting deeper than %d levels at byte %d", strictjson.MaxDepth, off)
		}
		if _, err := dec.ReadToken(); err != nil {
			return envoySyntax(err)
		}
		obj := kind == '{'
		if (role == roleRequest || role == roleDescriptor) != obj {
			role = roleOther // the wrong type: protojson refuses it
		}
		if (role == roleDescriptors || role == roleEntries) == obj {
			role = roleOther
		}
		lvl := envoyLevel{role: role, obj: obj, name: obj}
		if role == roleEntries {
			lvl.desc = stack[depth-2].n - 1 // the descriptor's index in its array
		}
		stack[depth] = lvl
		depth++
	}
}

// envoyCount checks the count of a closed array against lim.
func envoyCount(l *envoyLevel, lim service.RequestBounds) error {
	var err error
	switch l.role {
	case roleDescriptors:
		err = lim.CheckCount(l.n)
	case roleEntries:
		err = lim.CheckEntries(l.desc, l.n, func(int) (string, string) { return "", "" })
	}
	if err != nil {
		return fmt.Errorf("%w: %w", rlsproto.ErrInvalidRequest, err)
	}
	return nil
}

// nameIs reports whether the quoted member name v is name, escapes
// decoded.
func nameIs(v jsontext.Value, name string) bool {
	if len(v) < len(name)+2 {
		return false
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1:len(v)-1]) == name
	}
	if len(v) > 6*len(name)+2 {
		return false // more than every byte escaped
	}
	var buf [64]byte
	got, err := jsontext.AppendUnquote(buf[:0], v)
	return err == nil && string(got) == name
}

// envoySyntax says what jsontext refused, as strictjson says it.
func envoySyntax(err error) error {
	var syn *jsontext.SyntacticError
	switch {
	case errors.Is(err, io.EOF) && !errors.As(err, &syn):
		return errors.New("body: empty, want an object")
	case errors.As(err, &syn) && errors.Is(syn.Err, io.ErrUnexpectedEOF):
		return errors.New("body: truncated JSON")
	case errors.As(err, &syn):
		return fmt.Errorf("body: invalid JSON at byte %d: %w", syn.ByteOffset, syn.Err)
	}
	return fmt.Errorf("body: %w", err)
}
