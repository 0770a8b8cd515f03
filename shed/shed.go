// Package shed protects a server that is short of capacity, as a whole: it
// refuses (503) the least important work first so that the critical path
// stays alive. Rate limits (429) keep callers fair to each other; shedding
// keeps the system up.
//
// Four parts, each usable alone, composed by Shedder:
//
//   - Priority classes (Critical, Default, Sheddable, Test) and a Classifier
//     that gives each request its class from a route default and what the
//     caller asked for, capped by what the route allows.
//   - Worker: a per-process utilization shedder. Utilization is measured
//     (requests in flight against a maximum, and queueing delay against a
//     maximum); each class is shed past its level, lowest class first, with
//     hysteresis and a hold time so that shedding does not flap.
//   - Adaptive: a concurrency limit that finds its own value from observed
//     latency (a gradient controller in the manner of Envoy's adaptive
//     concurrency filter and Netflix's concurrency-limits), with the same
//     per-class levels applied to the limit it finds.
//   - Fleet: a fleet-wide capacity shared through a sluice.Store, with a share
//     reserved for critical requests.
//
// Every algorithm takes time as a parameter, so tests drive them on a
// simulated clock. The package imports only sluice and the standard
// library; transports live elsewhere (httplimit, shed/shedgrpc).
package shed

import (
	"fmt"
	"strings"
	"time"
)

// Priority is a request's class. Higher values are more important. The zero
// value, Unspecified, is treated as Default everywhere.
type Priority uint8

// The priority classes, lowest first.
const (
	// Unspecified is the zero value: no class was given. It means Default.
	Unspecified Priority = iota
	// Test is synthetic or test traffic, shed first.
	Test
	// Sheddable is background and batch work that can be retried later.
	Sheddable
	// Default is ordinary traffic.
	Default
	// Critical is the work that must go on (logins, payments, health of the
	// business); it is shed last and keeps the fleet's reserved share.
	Critical
)

// NumPriorities is the length of arrays indexed by Priority.
const NumPriorities = int(Critical) + 1

var priorityNames = [NumPriorities]string{
	Unspecified: "unspecified",
	Test:        "test",
	Sheddable:   "sheddable",
	Default:     "default",
	Critical:    "critical",
}

// Priorities lists the classes, lowest first.
func Priorities() []Priority { return []Priority{Test, Sheddable, Default, Critical} }

// String returns the class name used in headers, metadata and configuration
// ("critical"). Unspecified is "default", the class it stands for.
func (p Priority) String() string {
	p = p.norm()
	if int(p) < NumPriorities {
		return priorityNames[p]
	}
	return fmt.Sprintf("Priority(%d)", uint8(p))
}

// norm maps Unspecified to Default.
func (p Priority) norm() Priority {
	if p == Unspecified {
		return Default
	}
	return p
}

// ParsePriority returns the class named s (case-insensitive, surrounding
// space ignored). ok is false for an empty or unknown name; callers then use
// Default (or the route's default), never an error: a request with a strange
// priority is still served.
func ParsePriority(s string) (p Priority, ok bool) {
	s = strings.TrimSpace(s)
	for _, q := range Priorities() {
		if strings.EqualFold(s, priorityNames[q]) {
			return q, true
		}
	}
	return Default, false
}

// MarshalText implements encoding.TextMarshaler.
func (p Priority) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler; unlike ParsePriority it
// rejects unknown names, since it reads configuration.
func (p *Priority) UnmarshalText(b []byte) error {
	q, ok := ParsePriority(string(b))
	if !ok {
		return fmt.Errorf("unknown priority %q (want critical, default, sheddable or test)", b)
	}
	*p = q
	return nil
}

// Levels are, per class, the utilization (a fraction of the worker's maximum,
// or of the adaptive limit) at which that class starts being shed. A zero
// field takes its default. Lower classes must have lower levels, and Critical
// is always 1: critical work is refused only when there is no room at all.
type Levels struct {
	// Test traffic is shed past this fraction. Default 0.5.
	Test float64 `yaml:"test" json:"test"`
	// Sheddable work is shed past this fraction. Default 0.7.
	Sheddable float64 `yaml:"sheddable" json:"sheddable"`
	// Default traffic is shed past this fraction. Default 0.9, which leaves
	// the last tenth of the capacity to critical work.
	Default float64 `yaml:"default" json:"default"`
}

// DefaultLevels are the levels used for zero fields.
var DefaultLevels = Levels{Test: 0.4, Sheddable: 0.6, Default: 0.8}

func (l Levels) withDefaults() Levels {
	if l.Test == 0 {
		l.Test = DefaultLevels.Test
	}
	if l.Sheddable == 0 {
		l.Sheddable = DefaultLevels.Sheddable
	}
	if l.Default == 0 {
		l.Default = DefaultLevels.Default
	}
	return l
}

// of returns the level of class p (defaulted levels).
func (l Levels) of(p Priority) float64 {
	switch p.norm() {
	case Test:
		return l.Test
	case Sheddable:
		return l.Sheddable
	case Default:
		return l.Default
	}
	return 1
}

// validate reports problems of defaulted levels under path.
func (l Levels) validate(path string, errs *FieldErrors) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"test", l.Test}, {"sheddable", l.Sheddable}, {"default", l.Default}} {
		if !(f.v > 0 && f.v <= 1) {
			errs.add(path+"."+f.name, "%v is outside (0, 1]", f.v)
		}
	}
	if !(l.Test <= l.Sheddable && l.Sheddable <= l.Default) {
		errs.add(path, "levels must rise with priority: test %v ≤ sheddable %v ≤ default %v", l.Test, l.Sheddable, l.Default)
	}
}

// Layer names the part of the shedder that refused a request.
type Layer uint8

// The layers, in the order a request meets them.
const (
	// LayerWorker is the worker utilization shedder.
	LayerWorker Layer = iota + 1
	// LayerAdaptive is the adaptive concurrency limiter.
	LayerAdaptive
	// LayerFleet is the fleet usage shedder.
	LayerFleet
)

// NumLayers is the length of arrays indexed by Layer.
const NumLayers = int(LayerFleet) + 1

var layerNames = [NumLayers]string{"", "worker_utilization", "adaptive_concurrency", "fleet_usage"}

// String names the layer as it appears in problem+json bodies and metrics.
func (l Layer) String() string {
	if l >= LayerWorker && l <= LayerFleet {
		return layerNames[l]
	}
	return fmt.Sprintf("Layer(%d)", uint8(l))
}

// Refusal says why a request was shed.
type Refusal struct {
	// Layer is the part that shed it.
	Layer Layer
	// Priority is the request's class.
	Priority Priority
	// RetryAfter is a hint for the client: how long before trying again is
	// likely to help. At least one second.
	RetryAfter time.Duration
	// Detail is a sentence for the problem+json body.
	Detail string
}

// FieldError is one problem of a configuration: the field's path (as in
// "fleet.reserve") and what is wrong with it. Transports that read the
// configuration from a file turn the path into a line number.
type FieldError struct {
	Field string
	Msg   string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Msg }

// FieldErrors is every problem of a configuration, in the order found.
type FieldErrors []FieldError

func (e FieldErrors) Error() string {
	s := make([]string, len(e))
	for i, fe := range e {
		s[i] = fe.Error()
	}
	return strings.Join(s, "\n")
}

func (e *FieldErrors) add(field, format string, args ...any) {
	*e = append(*e, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// err returns e as an error, or nil when empty.
func (e FieldErrors) err() error {
	if len(e) == 0 {
		return nil
	}
	return e
}
