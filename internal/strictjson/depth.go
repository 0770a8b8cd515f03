package strictjson

import (
	"fmt"
	"io"
)

// depthReader hands a body to jsontext's decoder and refuses it at the
// first '[' or '{' (outside strings) that opens a level past MaxDepth, or
// at the first byte of a member name past MaxNameBytes: the bytes before
// it are read, then every Read returns a *tooDeepError. The decoder
// consumes what it has read first, so an earlier problem is still reported
// first. It holds its position, a bit per level and a few flags, however
// the body is shaped.
//
// It tells strings apart as JSON does ('"' opens and closes one, '\\'
// escapes the next byte) and names from values by where a string starts
// (after '{' or after ',' in an object); in a body that is not JSON it
// may miscount, but only past the first byte the decoder refuses anyway.
type depthReader struct {
	b        []byte // what is left to read
	off      int64  // bytes read so far
	depth    int
	objects  uint64 // bit d-1: level d is an object (MaxDepth ≤ 64)
	inStr    bool
	esc      bool
	wantName bool // the next string is a member name
	inName   bool
	nameLen  int
	err      error // sticky
}

// Compile-time check that a level fits a bit of depthReader.objects.
var _ [64 - MaxDepth]struct{}

// tooDeepError is the depth reader's refusal.
type tooDeepError struct {
	offset int64
	name   bool // a name too long, not a level too deep
}

func (e *tooDeepError) Error() string {
	if e.name {
		return fmt.Sprintf("member name longer than %d bytes at byte %d", MaxNameBytes, e.offset)
	}
	return fmt.Sprintf("nesting deeper than %d levels at byte %d", MaxDepth, e.offset)
}

func (r *depthReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b))
	for i, c := range r.b[:n] {
		if r.inStr {
			switch {
			case r.esc:
				r.esc = false
			case c == '\\':
				r.esc = true
			case c == '"':
				r.inStr, r.inName = false, false
				continue
			}
			if r.inName {
				if r.nameLen++; r.nameLen > MaxNameBytes {
					r.err = &tooDeepError{offset: r.off + int64(i), name: true}
					n = i
					break
				}
			}
			continue
		}
		switch c {
		case '"':
			r.inStr, r.inName, r.nameLen, r.wantName = true, r.wantName, 0, false
		case '[', '{':
			r.depth++
			if r.depth > MaxDepth {
				r.err = &tooDeepError{offset: r.off + int64(i)}
				n = i
			} else if c == '{' {
				r.objects |= 1 << (r.depth - 1)
				r.wantName = true
			} else {
				r.objects &^= 1 << (r.depth - 1)
				r.wantName = false
			}
		case ']', '}':
			r.depth = max(r.depth-1, 0) // below 0: not JSON, which the decoder says
			r.wantName = false
		case ',':
			r.wantName = r.depth > 0 && r.objects&(1<<(r.depth-1)) != 0
		}
		if r.err != nil {
			break
		}
	}
	copy(p, r.b[:n])
	r.b = r.b[n:]
	r.off += int64(n)
	if n == 0 {
		return 0, r.err
	}
	return n, nil
}
