package headers

import (
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"
)

// parseList parses field lines as one Structured Field List, working around
// what httpsfv gets wrong: it rejects Byte Sequences without "=" padding,
// which RFC 9651 §4.2.7 says parsers should accept. When the library fails,
// the value is re-padded and parsed once more.
func parseList(values []string) (list httpsfv.List, err error) {
	defer func() {
		// The library is not ours; a panic in it must not take a server down.
		if r := recover(); r != nil {
			list, err = nil, fmt.Errorf("%w: parser panic: %v", ErrMalformed, r)
		}
	}()
	list, err = httpsfv.UnmarshalList(values)
	if err == nil {
		return list, nil
	}
	joined := strings.Join(values, ", ")
	if padded, changed := padByteSequences(joined); changed {
		if l2, err2 := httpsfv.UnmarshalList([]string{padded}); err2 == nil {
			return l2, nil
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
}

// padByteSequences adds the "=" padding to every unpadded Byte Sequence in a
// serialized Structured Field. A Byte Sequence starts with ':' where a bare
// item may start (at the beginning, or after ',', '=', '(' or a space, outside
// Strings); a ':' inside a Token follows a token character and is left alone.
func padByteSequences(s string) (string, bool) {
	var b strings.Builder
	changed := false
	prev := byte(',') // the start behaves like after a list separator
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"': // a String (or the quoted part of a Display String)
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				j = len(s) - 1
			}
			b.WriteString(s[i : j+1])
			i = j
			prev = '"'
			continue
		case c == ':' && (prev == ',' || prev == '=' || prev == '(' || prev == ' ' || prev == '\t'):
			end := strings.IndexByte(s[i+1:], ':')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String(), changed
			}
			body := s[i+1 : i+1+end]
			b.WriteByte(':')
			b.WriteString(body)
			if isBase64Body(body) && !strings.Contains(body, "=") && len(body)%4 >= 2 {
				b.WriteString("=="[:4-len(body)%4])
				changed = true
			}
			b.WriteByte(':')
			i += end + 1
			prev = ':'
			continue
		}
		b.WriteByte(c)
		prev = c
	}
	return b.String(), changed
}

func isBase64Body(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	return true
}
