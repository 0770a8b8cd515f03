package service

import (
	"fmt"
	"unicode/utf8"
)

// RequestBounds bound what one request may ask of the engine, and what requests
// together may make it hold in metric labels. Every request is checked
// against them before any rule is matched; a request over a bound is refused
// with an error wrapping ErrInvalidRequest (and a *LimitError naming the
// limit), so it costs no store key, no store call and no metric series.
// The same checks refuse a domain, key or value that is not valid UTF-8
// (a *FieldError naming the field), whatever the limits: such bytes cannot
// be a metric label, and transports that must hold text (JSON, protobuf
// strings) would otherwise replace them, merging distinct values into one
// counter.
//
// A zero field means its default (DefaultRequestBounds); a negative field means no
// limit. The zero value is therefore the defaults.
type RequestBounds struct {
	// MaxKeyBytes bounds the length, in bytes, of each entry's key and of the
	// domain. Default 256.
	MaxKeyBytes int
	// MaxValueBytes bounds the length, in bytes, of each entry's value.
	// Default 4096.
	MaxValueBytes int
	// MaxDescriptors bounds the descriptors of one request. Default 64.
	MaxDescriptors int
	// MaxEntries bounds the entries of one descriptor. Default 16.
	MaxEntries int
	// MaxDetailedMetricValues bounds the distinct label values that rules
	// with detailed_metric: true may create in sluice_decisions_total and
	// sluice_near_limit_total, over the engine's life. Past it, a new
	// descriptor value is counted under its rule's own label (as if the rule
	// had no detailed_metric) and in the engine's DetailedMetricOverflow.
	// Default 1000.
	MaxDetailedMetricValues int
}

// Defaults of RequestBounds. No Envoy configuration seen in practice comes near
// them: Envoy's actions produce descriptor keys such as "remote_address" or
// "header_match", one descriptor per rate_limits entry of a route (a
// handful) and one entry per action in it (rarely more than five). Values
// are addresses, header values and paths; 4 KiB holds any URL the common
// proxies accept in one header buffer.
const (
	DefaultMaxKeyBytes             = 256
	DefaultMaxValueBytes           = 4096
	DefaultMaxDescriptors          = 64
	DefaultMaxEntries              = 16
	DefaultMaxDetailedMetricValues = 1000
)

// DefaultRequestBounds returns the bounds `sluice serve` enforces unless told
// otherwise.
func DefaultRequestBounds() RequestBounds {
	return RequestBounds{
		MaxKeyBytes:             DefaultMaxKeyBytes,
		MaxValueBytes:           DefaultMaxValueBytes,
		MaxDescriptors:          DefaultMaxDescriptors,
		MaxEntries:              DefaultMaxEntries,
		MaxDetailedMetricValues: DefaultMaxDetailedMetricValues,
	}
}

// withDefaults returns l with every zero field set to its default. It is
// on every check's path (several times per request): plain compares, no
// table of fields.
func (l RequestBounds) withDefaults() RequestBounds {
	if l.MaxKeyBytes == 0 {
		l.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if l.MaxValueBytes == 0 {
		l.MaxValueBytes = DefaultMaxValueBytes
	}
	if l.MaxDescriptors == 0 {
		l.MaxDescriptors = DefaultMaxDescriptors
	}
	if l.MaxEntries == 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxDetailedMetricValues == 0 {
		l.MaxDetailedMetricValues = DefaultMaxDetailedMetricValues
	}
	return l
}

// LimitError is a request over one of the RequestBounds. It unwraps to
// ErrInvalidRequest.
type LimitError struct {
	// Field is where in the request, e.g. "descriptors[2].entries[0].value".
	Field string
	// Limit names the limit in the spelling of `sluice serve`'s flags, e.g.
	// "max-value-bytes".
	Limit string
	// Got is the size found and Max the limit.
	Got, Max int
}

func (e *LimitError) Error() string {
	unit := ""
	if e.Limit == "max-key-bytes" || e.Limit == "max-value-bytes" {
		unit = " bytes"
	}
	return fmt.Sprintf("%s: %d%s exceeds the limit %s=%d", e.Field, e.Got, unit, e.Limit, e.Max)
}

// Unwrap returns ErrInvalidRequest.
func (e *LimitError) Unwrap() error { return ErrInvalidRequest }

// FieldError is a request field the engine refuses whatever the RequestBounds,
// such as a descriptor value that is not valid UTF-8. It unwraps to
// ErrInvalidRequest.
type FieldError struct {
	// Field is where in the request, e.g. "descriptors[0].entries[1].value".
	Field string
	// Reason says what is wrong with it, e.g. "not valid UTF-8".
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidRequest.
func (e *FieldError) Unwrap() error { return ErrInvalidRequest }

// ReasonNotUTF8 is FieldError.Reason for a string that is not valid UTF-8.
const ReasonNotUTF8 = "not valid UTF-8"

// CheckCount checks the counts of a request before it is decoded further:
// descriptors is how many it has. Transports call it first, so an oversized
// request is refused before anything is allocated for it.
func (l RequestBounds) CheckCount(descriptors int) error {
	l = l.withDefaults()
	if exceeds(descriptors, l.MaxDescriptors) {
		return &LimitError{Field: "descriptors", Limit: "max-descriptors", Got: descriptors, Max: l.MaxDescriptors}
	}
	return nil
}

// CheckDomain checks the length of a request's domain, and that it is
// valid UTF-8 (a *FieldError otherwise).
func (l RequestBounds) CheckDomain(domain string) error {
	return l.withDefaults().checkDomain(domain)
}

// checkDomain is CheckDomain on limits already defaulted.
func (l RequestBounds) checkDomain(domain string) error {
	if exceeds(len(domain), l.MaxKeyBytes) {
		return &LimitError{Field: "domain", Limit: "max-key-bytes", Got: len(domain), Max: l.MaxKeyBytes}
	}
	if !utf8.ValidString(domain) {
		return &FieldError{Field: "domain", Reason: ReasonNotUTF8}
	}
	return nil
}

// CheckEntries checks descriptor i, given its entry count and a function
// returning entry j's key and value, against the limits, and that every key
// and value is valid UTF-8 (a *FieldError otherwise, e.g.
// "descriptors[0].entries[1].value: not valid UTF-8"). Transports call it
// on their own types before converting them.
func (l RequestBounds) CheckEntries(i, entries int, entry func(j int) (key, value string)) error {
	return l.withDefaults().checkEntries(i, entries, entry)
}

// checkEntries is CheckEntries on limits already defaulted.
func (l RequestBounds) checkEntries(i, entries int, entry func(j int) (key, value string)) error {
	if exceeds(entries, l.MaxEntries) {
		return &LimitError{Field: fmt.Sprintf("descriptors[%d].entries", i), Limit: "max-entries", Got: entries, Max: l.MaxEntries}
	}
	for j := range entries {
		k, v := entry(j)
		if exceeds(len(k), l.MaxKeyBytes) {
			return &LimitError{Field: fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), Limit: "max-key-bytes", Got: len(k), Max: l.MaxKeyBytes}
		}
		if exceeds(len(v), l.MaxValueBytes) {
			return &LimitError{Field: fmt.Sprintf("descriptors[%d].entries[%d].value", i, j), Limit: "max-value-bytes", Got: len(v), Max: l.MaxValueBytes}
		}
		if !utf8.ValidString(k) {
			return &FieldError{Field: fmt.Sprintf("descriptors[%d].entries[%d].key", i, j), Reason: ReasonNotUTF8}
		}
		if !utf8.ValidString(v) {
			return &FieldError{Field: fmt.Sprintf("descriptors[%d].entries[%d].value", i, j), Reason: ReasonNotUTF8}
		}
	}
	return nil
}

// Check checks req against the limits and returns the first one exceeded,
// as a *LimitError, or the first field that is not valid UTF-8, as a
// *FieldError, or nil.
func (l RequestBounds) Check(req *Request) error {
	l = l.withDefaults()
	if err := l.checkDomain(req.Domain); err != nil {
		return err
	}
	if n := len(req.Descriptors); exceeds(n, l.MaxDescriptors) {
		return &LimitError{Field: "descriptors", Limit: "max-descriptors", Got: n, Max: l.MaxDescriptors}
	}
	for i := range req.Descriptors {
		es := req.Descriptors[i].Entries
		if err := l.checkEntries(i, len(es), func(j int) (string, string) { return es[j].Key, es[j].Value }); err != nil {
			return err
		}
	}
	return nil
}

// exceeds reports whether got is over max; a negative max is no limit.
func exceeds(got, max int) bool { return max >= 0 && got > max }
