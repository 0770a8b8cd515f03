package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/httplimit"
	"github.com/sluice-rl/sluice/shed"
)

// Shed is the load-shedding section of the configuration file: shed.Config
// plus where the caller's priority class comes from.
//
//	shed:
//	  priority_from: header:Sluice-Priority
//	  priority:
//	    routes:
//	      - {prefix: /admin/, default: critical}
//	      - {prefix: /batch/, default: sheddable}
//	      - {prefix: /checkout, max: critical}   # callers may raise themselves to critical here
//	  adaptive: {min_limit: 4, max_limit: 500}
//	  worker: {max_inflight: 1000, max_queue_delay: 20ms}
//	  fleet: {mode: rate, capacity: 5000, reserve: 0.1}
type Shed struct {
	// PriorityFrom is the source of the class a caller asks for, in the
	// syntax of a descriptor entry's source (header:NAME, static:VALUE, …).
	// Default header:Sluice-Priority.
	PriorityFrom string `yaml:"priority_from"`
	shed.Config  `yaml:",inline"`
}

// source is where a Config was read from, for the line numbers of errors.
type source struct {
	file string
	doc  *yaml.Node
}

// ParseFile is Parse, remembering the file name and the position of every
// field, so that Validate names file:line for the problems it finds in the
// shed section.
func ParseFile(name string, data []byte) (Config, error) {
	var doc yaml.Node
	var src *source
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err == nil {
		src = &source{file: name, doc: &doc}
		// Class names are decoded by encoding.TextUnmarshaler, whose errors
		// yaml reports without a line: check them here, with theirs.
		if errs := src.checkPriorities(); len(errs) > 0 {
			return Config{}, errors.Join(errs...)
		}
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	c.src = src
	return c, nil
}

// checkPriorities reports every unknown class name in the shed section.
func (s *source) checkPriorities() []error {
	var errs []error
	check := func(path string) {
		n := s.node(path)
		if n == nil || n.Kind != yaml.ScalarNode {
			return
		}
		if _, ok := shed.ParsePriority(n.Value); !ok {
			errs = append(errs, fmt.Errorf("%s:%d: %s: unknown priority %q (want critical, default, sheddable or test)", s.file, n.Line, path, n.Value))
		}
	}
	check("shed.priority.default")
	check("shed.priority.max")
	if routes := s.node("shed.priority.routes"); routes != nil && routes.Kind == yaml.SequenceNode {
		for i := range routes.Content {
			p := "shed.priority.routes[" + strconv.Itoa(i) + "]"
			check(p + ".default")
			check(p + ".max")
		}
	}
	return errs
}

// node returns the YAML node at path, or nil.
func (s *source) node(path string) *yaml.Node {
	n, _, ok := s.walk(path)
	if !ok {
		return nil
	}
	return n
}

// line returns the line of the YAML node at path ("shed.fleet.reserve",
// "shed.priority.routes[1].max"), or of its deepest ancestor present; 0 when
// unknown.
func (s *source) line(path string) int {
	_, line, _ := s.walk(path)
	return line
}

// walk follows path from the top of the document. It returns the node at
// path and the line of its key (ok true), or the line of the deepest
// ancestor present (ok false).
func (s *source) walk(path string) (n *yaml.Node, line int, ok bool) {
	if s == nil || s.doc == nil || len(s.doc.Content) == 0 {
		return nil, 0, false
	}
	n = s.doc.Content[0]
	line = n.Line
	for _, seg := range strings.Split(path, ".") {
		key, idx := seg, -1
		if i := strings.IndexByte(seg, '['); i >= 0 && strings.HasSuffix(seg, "]") {
			key = seg[:i]
			idx, _ = strconv.Atoi(seg[i+1 : len(seg)-1])
		}
		if n.Kind != yaml.MappingNode {
			return nil, line, false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				line, next = n.Content[i].Line, n.Content[i+1]
				break
			}
		}
		if next == nil {
			return nil, line, false
		}
		n = next
		if idx >= 0 {
			if n.Kind != yaml.SequenceNode || idx >= len(n.Content) {
				return nil, line, false
			}
			n = n.Content[idx]
			line = n.Line
		}
	}
	return n, line, true
}

// where prefixes a problem at path with file:line when the file is known.
func (s *source) where(path string) string {
	if s == nil {
		return ""
	}
	if l := s.line(path); l > 0 {
		return s.file + ":" + strconv.Itoa(l) + ": "
	}
	return s.file + ": "
}

// validateShed reports the problems of the shed section.
func (c Config) validateShed(tp *httplimit.TrustedProxies) []error {
	if c.Shed == nil {
		return nil
	}
	var errs []error
	if c.Shed.PriorityFrom != "" {
		if _, err := priorityFrom(c.Shed.PriorityFrom, tp); err != nil {
			errs = append(errs, fmt.Errorf("%sshed.priority_from: %w", c.src.where("shed.priority_from"), err))
		}
	}
	// The fleet layer counts in the gateway's store (in process) or, with
	// a shared store, across the fleet; either way there is one.
	err := c.Shed.Config.Validate(true)
	var fe shed.FieldErrors
	if errors.As(err, &fe) {
		for _, e := range fe {
			path := "shed." + e.Field
			errs = append(errs, fmt.Errorf("%s%s: %s", c.src.where(path), path, e.Msg))
		}
	} else if err != nil {
		errs = append(errs, fmt.Errorf("%sshed: %w", c.src.where("shed"), err))
	}
	return errs
}

func priorityFrom(spec string, tp *httplimit.TrustedProxies) (httplimit.KeyFunc, error) {
	fs, err := ParseDescriptor("priority="+spec, tp)
	if err != nil {
		return nil, err
	}
	if len(fs) != 1 {
		return nil, fmt.Errorf("%q must be one source", spec)
	}
	return fs[0], nil
}

// NewHandler is New with the shed section applied: when the configuration
// has one, the returned handler sheds load in front of the rate limits (a
// shed request charges no rate limit) and the Shedder is returned for
// metrics; otherwise the Shedder is nil. store keeps the concurrency leases,
// and the fleet layer's counters unless opts.Store names a store of their
// own (a Redis store that every instance shares, for a fleet-wide capacity).
func NewHandler(c Config, checker httplimit.Checker, store sluice.Store, opts shed.Options, onError func(*http.Request, error)) (http.Handler, *shed.Shedder, error) {
	limited, err := New(c, checker, store, onError)
	if err != nil {
		return nil, nil, err
	}
	if c.Shed == nil {
		return limited, nil, nil
	}
	if opts.Store == nil {
		opts.Store = store
	}
	s, err := shed.New(c.Shed.Config, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: shed: %w", err)
	}
	tp, _ := httplimit.ParseTrustedProxies(c.TrustedProxies...)
	var from httplimit.KeyFunc
	if c.Shed.PriorityFrom != "" {
		from, _ = priorityFrom(c.Shed.PriorityFrom, tp) // validated
	}
	h, err := httplimit.Shed(limited, httplimit.ShedConfig{Shedder: s, Priority: from})
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: %w", err)
	}
	return h, s, nil
}
