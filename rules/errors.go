package rules

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a rule file.
type Problem struct {
	// File is the file's name as given to Parse or found by LoadDir.
	File string
	// Line is the 1-based line of the offending YAML node; 0 when the
	// problem concerns the whole file (it could not be read, for instance).
	Line int
	// Field is the path of the offending field from the top of the file, as
	// in "descriptors[1].rate_limit.unit"; "" when the problem concerns no
	// field in particular (a YAML syntax error).
	Field string
	// Msg says what is wrong, and where helpful, what is expected instead.
	Msg string
}

// Error formats the problem as "file:line: field: msg", leaving out a zero
// line and an empty field.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Errors is every problem found in a set of rule files, sorted by file and
// line. Parse and LoadDir return it (as an error) when any problem is found;
// use errors.As to get at the individual problems.
type Errors []Problem

// Error formats one problem per line.
func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, p := range e {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// sort orders problems by file, then line, keeping the order of discovery for
// problems on the same line.
func (e Errors) sort() {
	slices.SortStableFunc(e, func(a, b Problem) int {
		if c := cmp.Compare(a.File, b.File); c != 0 {
			return c
		}
		return cmp.Compare(a.Line, b.Line)
	})
}
