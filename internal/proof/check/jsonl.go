package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// line is one line of a history in JSON lines: exactly one field set.
type line struct {
	Rule   *Rule   `json:"rule,omitempty"`
	Event  *Event  `json:"event,omitempty"`
	Reset  *Reset  `json:"reset,omitempty"`
	Fault  *Fault  `json:"fault,omitempty"`
	Change *Change `json:"change,omitempty"`
}

// maxLine bounds one line of a history file.
const maxLine = 64 << 10

// WriteJSONL writes h as JSON lines, one object per line naming what it
// holds: {"rule": …}, {"fault": …}, {"change": …}, {"reset": …} and then
// {"event": …} in the order recorded. ReadJSONL reads it back.
func WriteJSONL(w io.Writer, h History) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	var err error
	put := func(l line) {
		if err == nil {
			err = enc.Encode(l)
		}
	}
	for i := range h.Rules {
		put(line{Rule: &h.Rules[i]})
	}
	for i := range h.Faults {
		put(line{Fault: &h.Faults[i]})
	}
	for i := range h.Changes {
		put(line{Change: &h.Changes[i]})
	}
	for i := range h.Resets {
		put(line{Reset: &h.Resets[i]})
	}
	for i := range h.Events {
		put(line{Event: &h.Events[i]})
	}
	if err != nil {
		return fmt.Errorf("check: write history: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("check: write history: %w", err)
	}
	return nil
}

// ReadJSONL reads a history written by WriteJSONL. Lines are at most 64 KiB;
// an unknown field, or a line holding nothing or more than one thing, is an
// error naming the line.
func ReadJSONL(r io.Reader) (History, error) {
	var h History
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l line
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return History{}, fmt.Errorf("check: history line %d: %w", n, err)
		}
		set := 0
		if l.Rule != nil {
			h.Rules, set = append(h.Rules, *l.Rule), set+1
		}
		if l.Event != nil {
			h.Events, set = append(h.Events, *l.Event), set+1
		}
		if l.Reset != nil {
			h.Resets, set = append(h.Resets, *l.Reset), set+1
		}
		if l.Fault != nil {
			h.Faults, set = append(h.Faults, *l.Fault), set+1
		}
		if l.Change != nil {
			h.Changes, set = append(h.Changes, *l.Change), set+1
		}
		if set != 1 {
			return History{}, fmt.Errorf("check: history line %d: want one of rule, event, reset, fault, change; got %d", n, set)
		}
	}
	if err := sc.Err(); err != nil {
		return History{}, fmt.Errorf("check: read history: %w", err)
	}
	return h, nil
}
