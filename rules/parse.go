package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice"
)

// Options control how rule files are read.
//
// The zero value reads envoy rule files exactly as envoyproxy/ratelimit does
// (fixed windows aligned to the Unix epoch).
type Options struct {
	// DefaultAlgorithm is the algorithm of every rate_limit that names none.
	// Zero means sluice.FixedWindow, envoy's behaviour.
	DefaultAlgorithm sluice.Algorithm
	// MergeDomains lets several files of a directory (LoadDir) declare one
	// domain, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: their
	// top-level descriptors are merged, and a descriptor two of them
	// declare is an error. False: a domain in two files is an error.
	MergeDomains bool
}

func (o Options) algorithm() sluice.Algorithm {
	if o.DefaultAlgorithm == 0 {
		return sluice.FixedWindow
	}
	return o.DefaultAlgorithm
}

const unitList = "second, minute, hour, day, week, month, year"

// maxNodes bounds the YAML nodes one file may expand to, aliases included,
// so that a file of nested aliases cannot make a load take forever.
const maxNodes = 200_000

// MaxDescriptorDepth bounds how deep descriptors may nest in a rule file
// (a descriptor at the top level is at depth 1). Each descriptor holds
// its path from the top, so without a bound a file's memory would grow
// with the square of its nesting: a 300 KB file of 4,000 nested
// descriptors took 1.4 GiB. A request has at most service.RequestBounds'
// MaxEntries (16) entries by default, so a deeper rule could not match it
// anyway; envoyproxy/ratelimit's own examples nest three.
const MaxDescriptorDepth = 32

// MaxFileBytes bounds the size of one rule file, read from a directory or
// delivered over xDS; MaxDirBytes bounds the rule files of a directory (or
// of one xDS update) together. A file or set over them is refused with a
// problem naming it, before it is parsed. The YAML library holds a node
// of about 200 bytes for every few bytes of a file, so a file costs up to
// about 70 bytes of memory per byte while it is parsed
// (TestWorstRuleFileMemory); files are parsed one at a time. 1 MiB holds
// some 20,000 descriptors; split a larger set over several files.
const (
	MaxFileBytes = 1 << 20
	MaxDirBytes  = 16 << 20
)

// parser reads one file into a domain tree, collecting problems as it goes.
type parser struct {
	file  string
	opts  Options
	probs Errors
	nodes int
}

// dnode is one parsed descriptor.
type dnode struct {
	step     Step
	file     string
	line     int
	field    string
	rule     *Rule
	children []*dnode
}

// domainTree is one parsed file.
type domainTree struct {
	file   string
	domain string
	line   int
	top    []*dnode
	// replLines holds the line of each name in a rule's replaces.
	replLines map[*Rule][]int
	// tenantKey is the file's tenant_key; tierLines the line of each
	// rule's tiers (see tiers.go).
	tenantKey string
	tierLines map[*Rule]int
	// deny is the file's deny list (deny.go), nil without one.
	deny *DenyList
}

// walk calls f for every descriptor with a rule, depth first in file order.
func walk(ds []*dnode, f func(d *dnode)) {
	for _, d := range ds {
		if d.rule != nil {
			f(d)
		}
		walk(d.children, f)
	}
}

func (p *parser) add(line int, field, format string, args ...any) {
	p.probs = append(p.probs, Problem{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// parse reads data as one rule file. It returns nil if the file is unusable
// as a whole; problems are in p.probs either way.
func (p *parser) parse(data []byte) (tree *domainTree) {
	if len(data) > MaxFileBytes {
		p.add(0, "", "file is %d bytes, more than the limit of %d (rules.MaxFileBytes)", len(data), MaxFileBytes)
		return nil
	}
	defer func() {
		// yaml.v3 has panicked on hostile input in the past; a rule file
		// must never take the process down.
		if r := recover(); r != nil {
			p.add(0, "", "YAML parser failed: %v", r)
			tree = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.add(0, "", "file is empty; want a mapping with domain and descriptors")
		} else {
			p.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.add(extra.Line, "", "a second YAML document; a rule file holds one domain")
	} else if !errors.Is(err, io.EOF) {
		p.syntax(err)
	}
	if len(doc.Content) == 0 {
		p.add(0, "", "file is empty; want a mapping with domain and descriptors")
		return nil
	}
	return p.root(doc.Content[0])
}

// syntax records a YAML syntax error. The YAML library reports the line of
// a syntax error only in its message ("yaml: line 3: …"; it has no typed
// error for it), so that prefix is read back here, and nowhere else.
func (p *parser) syntax(err error) {
	msg := strings.TrimPrefix(strings.TrimSpace(err.Error()), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if line, err := strconv.Atoi(num); err == nil && line > 0 {
				p.add(line, "", "YAML syntax: %s", text)
				return
			}
		}
	}
	p.add(0, "", "YAML syntax: %s", msg)
}

// resolve follows aliases and counts nodes against the budget.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	p.nodes++
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "a document"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fields walks mapping n, reporting duplicate and unknown keys, and calls f
// for each known key with its (alias-resolved) value. It reports false when n
// is not a mapping.
func (p *parser) fields(n *yaml.Node, path string, known []string, f func(key string, k, v *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, path, "want a mapping, got %s", kindName(n))
		return false
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		if p.nodes > maxNodes {
			p.add(n.Line, path, "file expands to more than %d YAML nodes (aliases?)", maxNodes)
			return false
		}
		k, v := p.resolve(n.Content[i]), p.resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			p.add(k.Line, path, "want a key name, got %s", kindName(k))
			continue
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			p.add(k.Line, join(path, name), "key given twice (first at line %d)", first)
			continue
		}
		seen[name] = k.Line
		isKnown := false
		for _, kn := range known {
			if kn == name {
				isKnown = true
				break
			}
		}
		if !isKnown {
			p.add(k.Line, join(path, name), "unknown key (want one of %s)", strings.Join(known, ", "))
			continue
		}
		f(name, k, v)
	}
	return true
}

// str reads a scalar as a string; null reads as "".
func (p *parser) str(v *yaml.Node, field string) (string, bool) {
	if v.Kind != yaml.ScalarNode {
		p.add(v.Line, field, "want a string, got %s", kindName(v))
		return "", false
	}
	if v.ShortTag() == "!!null" {
		return "", true
	}
	return v.Value, true
}

// boolean reads true or false. Like envoyproxy/ratelimit's YAML 1.1 parser,
// it also takes yes/no and on/off, so envoy files load unchanged.
func (p *parser) boolean(v *yaml.Node, field string) (bool, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool" {
		var b bool
		if err := v.Decode(&b); err == nil {
			return b, true
		}
	}
	if v.Kind == yaml.ScalarNode && v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
		switch strings.ToLower(v.Value) {
		case "yes", "on", "y":
			return true, true
		case "no", "off", "n":
			return false, true
		}
	}
	p.add(v.Line, field, "want true or false, got %s", kindName(v))
	return false, false
}

// integer reads a whole number in [0, max].
func (p *parser) integer(v *yaml.Node, field string, max uint64) (uint64, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" {
		var i int64
		if err := v.Decode(&i); err == nil && i >= 0 && uint64(i) <= max {
			return uint64(i), true
		}
	}
	p.add(v.Line, field, "want a whole number from 0 to %d, got %s", max, kindName(v))
	return 0, false
}

func (p *parser) root(n *yaml.Node) *domainTree {
	n = p.resolve(n)
	t := &domainTree{file: p.file, line: n.Line}
	var descs *yaml.Node
	haveDomain := false
	ok := p.fields(n, "", []string{"domain", "descriptors", "tenant_key", "deny"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			haveDomain = true
			if s, ok := p.str(v, "domain"); ok {
				if s == "" {
					p.add(v.Line, "domain", "must not be empty")
				}
				t.domain, t.line = s, v.Line
			}
		case "descriptors":
			descs = v
		case "deny":
			t.deny = p.denyList(v)
		case "tenant_key":
			if s, ok := p.str(v, "tenant_key"); ok && s == "" {
				p.add(v.Line, "tenant_key", "must not be empty")
			} else {
				t.tenantKey = s
			}
		}
	})
	if !ok {
		return nil
	}
	if !haveDomain {
		p.add(n.Line, "domain", "required")
	}
	if descs != nil {
		t.top = p.descriptors(descs, "descriptors", make([]Step, 0, MaxDescriptorDepth+1), t)
	}
	return t
}

// descriptors reads a list of descriptors below the given path of steps.
func (p *parser) descriptors(n *yaml.Node, field string, parent []Step, t *domainTree) []*dnode {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.add(n.Line, field, "want a list of descriptors, got %s", kindName(n))
		return nil
	}
	if len(parent) >= MaxDescriptorDepth {
		p.add(n.Line, field, "descriptors nested more than %d deep", MaxDescriptorDepth)
		return nil
	}
	var out []*dnode
	seen := map[string]int{} // "key\x00value" → line
	for i, c := range n.Content {
		c = p.resolve(c)
		if p.nodes > maxNodes {
			p.add(c.Line, field, "file expands to more than %d YAML nodes (aliases?)", maxNodes)
			return out
		}
		d := p.descriptor(c, fmt.Sprintf("%s[%d]", field, i), parent, t)
		if d == nil {
			continue
		}
		id := d.step.Key + "\x00" + d.step.Value
		if first, dup := seen[id]; dup {
			what := d.step.Key
			if d.step.Kind != MatchAny {
				what += "=" + d.step.Value
			}
			p.add(d.line, d.field, "duplicate descriptor %s at this level (first at line %d)", what, first)
			continue
		}
		seen[id] = d.line
		out = append(out, d)
	}
	return out
}

var descriptorKeys = []string{
	"key", "value", "rate_limit", "shadow_mode", "detailed_metric", "descriptors",
	"share_threshold", "value_to_metric", "quota_mode", "metadata",
}

func (p *parser) descriptor(n *yaml.Node, field string, parent []Step, t *domainTree) *dnode {
	d := &dnode{file: p.file, line: n.Line, field: field}
	var rl, children *yaml.Node
	var rlField string
	haveKey, valid := false, true
	var shadow, detailed, quota bool
	var meta map[string]any
	ok := p.fields(n, field, descriptorKeys, func(key string, k, v *yaml.Node) {
		f := join(field, key)
		var good bool
		switch key {
		case "key":
			haveKey = true
			d.step.Key, good = p.str(v, f)
			if good && d.step.Key == "" {
				p.add(v.Line, f, "must not be empty")
				good = false
			}
		case "value":
			d.step.Value, good = p.str(v, f)
		case "rate_limit":
			rl, rlField, good = v, f, true
		case "descriptors":
			children, good = v, true
		case "shadow_mode":
			shadow, good = p.boolean(v, f)
		case "detailed_metric":
			detailed, good = p.boolean(v, f)
		case "share_threshold":
			d.step.Shared, good = p.boolean(v, f)
		case "value_to_metric":
			// Accepted for compatibility; Sluice's metrics label by rule,
			// so it changes nothing.
			_, good = p.boolean(v, f)
		case "quota_mode":
			quota, good = p.boolean(v, f)
		case "metadata":
			meta, good = p.metadata(v, f)
		}
		valid = valid && good
	})
	if !ok {
		return nil
	}
	if !haveKey {
		p.add(n.Line, join(field, "key"), "required")
		valid = false
	}
	switch {
	case d.step.Value == "":
		d.step.Kind = MatchAny
	case strings.Contains(d.step.Value, "*"):
		d.step.Kind = MatchWildcard
	default:
		d.step.Kind = MatchExact
	}
	if d.step.Shared && d.step.Kind != MatchWildcard {
		p.add(n.Line, join(field, "share_threshold"), "only a value with a * wildcard can share its counter")
		valid = false
	}
	// parent shares its array with every path being read (one stack, as
	// deep as the nesting): a rule keeps a copy of its own, so that
	// descriptors without a rule cost nothing per level of depth.
	path := append(parent, d.step)
	if rl != nil {
		if r := p.rateLimit(rl, rlField, t, path); r != nil {
			r.Path = slices.Clone(path)
			if r.PairBy != "" {
				r.Path[r.PairIndex].Paired = true
			}
			r.ShadowMode = shadow
			r.DetailedMetric = detailed
			r.QuotaMode, r.Metadata = quota, meta
			d.rule = r
		} else {
			valid = false
		}
	}
	if children != nil {
		d.children = p.descriptors(children, join(field, "descriptors"), path, t)
	}
	if !valid && d.step.Key == "" {
		return nil
	}
	return d
}

// maxMetadataBytes bounds one descriptor's metadata, as the bytes of its
// YAML scalars and keys, so a rule file cannot make every response huge.
const maxMetadataBytes = 4096

// metadata reads a descriptor's metadata: a mapping with string keys whose
// values are scalars, lists or mappings (as google.protobuf.Struct holds).
func (p *parser) metadata(v *yaml.Node, field string) (map[string]any, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return nil, true
	}
	if v.Kind != yaml.MappingNode {
		p.add(v.Line, field, "want a mapping, got %s", kindName(v))
		return nil, false
	}
	size := 0
	var conv func(n *yaml.Node, f string, depth int) (any, bool)
	conv = func(n *yaml.Node, f string, depth int) (any, bool) {
		n = p.resolve(n)
		if depth > 16 || p.nodes > maxNodes {
			p.add(n.Line, f, "nested more than 16 levels deep")
			return nil, false
		}
		switch n.Kind {
		case yaml.MappingNode:
			m := make(map[string]any, len(n.Content)/2)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := p.resolve(n.Content[i])
				if k.Kind != yaml.ScalarNode {
					p.add(k.Line, f, "want a key name, got %s", kindName(k))
					return nil, false
				}
				if _, dup := m[k.Value]; dup {
					p.add(k.Line, join(f, k.Value), "key given twice")
					return nil, false
				}
				size += len(k.Value)
				x, ok := conv(n.Content[i+1], join(f, k.Value), depth+1)
				if !ok {
					return nil, false
				}
				m[k.Value] = x
			}
			return m, true
		case yaml.SequenceNode:
			l := make([]any, 0, len(n.Content))
			for i, c := range n.Content {
				x, ok := conv(c, fmt.Sprintf("%s[%d]", f, i), depth+1)
				if !ok {
					return nil, false
				}
				l = append(l, x)
			}
			return l, true
		case yaml.ScalarNode:
			size += len(n.Value)
			if size > maxMetadataBytes {
				p.add(n.Line, field, "more than %d bytes", maxMetadataBytes)
				return nil, false
			}
			switch n.ShortTag() {
			case "!!null":
				return nil, true
			case "!!bool":
				var b bool
				if n.Decode(&b) == nil {
					return b, true
				}
			case "!!int", "!!float":
				var x float64
				if n.Decode(&x) == nil {
					return x, true
				}
			}
			return n.Value, true
		}
		p.add(n.Line, f, "want a value, got %s", kindName(n))
		return nil, false
	}
	x, ok := conv(v, field, 0)
	if !ok {
		return nil, false
	}
	return x.(map[string]any), true
}

var rateLimitKeys = []string{
	"unit", "requests_per_unit", "unlimited", "name", "replaces",
	"algorithm", "burst", "window", "failure_mode", "placement", "sub_counters",
	"tiers", "calendar", "time_zone", "penalty", "settle", "pair_by",
}

func (p *parser) rateLimit(n *yaml.Node, field string, t *domainTree, path []Step) *Rule {
	r := &Rule{File: p.file, Line: n.Line}
	valid := true
	var unitNode, rpuNode, algNode, burstNode, windowNode, placeNode, subNode, tiersNode *yaml.Node
	var calNode, tzNode, penNode, settleNode, pairNode *yaml.Node
	var cal Calendar
	var burst uint64
	alg := p.opts.algorithm()
	var window time.Duration
	ok := p.fields(n, field, rateLimitKeys, func(key string, k, v *yaml.Node) {
		f := join(field, key)
		good := true
		switch key {
		case "unit":
			unitNode = v
			var s string
			if s, good = p.str(v, f); good {
				w, known := UnitWindow(s)
				if !known {
					p.add(v.Line, f, "unknown unit %q (want one of %s)", s, unitList)
					good = false
				}
				r.Unit, window = strings.ToLower(s), w
			}
		case "requests_per_unit":
			rpuNode = v
			var u uint64
			if u, good = p.integer(v, f, math.MaxUint32); good {
				r.RequestsPerUnit = uint32(u)
			}
		case "unlimited":
			r.Unlimited, good = p.boolean(v, f)
		case "name":
			r.Name, good = p.str(v, f)
		case "replaces":
			good = p.replaces(v, f, r, t)
		case "algorithm":
			algNode = v
			var s string
			if s, good = p.str(v, f); good {
				a, err := sluice.ParseAlgorithm(s)
				if err != nil {
					p.add(v.Line, f, "%v", err)
					good = false
				}
				alg = a
			}
		case "burst":
			burstNode = v
			burst, good = p.integer(v, f, sluice.MaxExact)
		case "window":
			windowNode = v
			var s string
			if s, good = p.str(v, f); good {
				w, err := time.ParseDuration(s)
				switch {
				case err != nil:
					p.add(v.Line, f, "want a duration such as 90s or 1h30m, got %q", s)
					good = false
				case w <= 0:
					p.add(v.Line, f, "must be positive, got %q", s)
					good = false
				}
				window = w
			}
		case "placement":
			placeNode = v
			var s string
			if s, good = p.str(v, f); good {
				if r.Placement, good = parsePlacement(s); !good {
					p.add(v.Line, f, "unknown placement %q (want global, hybrid or local)", s)
				}
			}
		case "sub_counters":
			subNode = v
			var u uint64
			if u, good = p.integer(v, f, MaxSubCounters); good {
				r.SubCounters = int(u)
			}
		case "tiers":
			tiersNode = v
		case "penalty":
			penNode = v
			r.Penalty, good = p.penalty(v, f)
		case "calendar", "time_zone":
			good = p.calendarField(key, v, f, &cal)
			if key == "calendar" {
				calNode = v
			} else {
				tzNode = v
			}
		case "settle":
			settleNode = v
			var s string
			if s, good = p.str(v, f); good {
				switch strings.ToLower(s) {
				case "before":
				case "after":
					r.SettleAfter = true
				default:
					p.add(v.Line, f, "unknown settle %q (want before or after)", s)
					good = false
				}
			}
		case "pair_by":
			pairNode = v
			if r.PairBy, good = p.str(v, f); good && r.PairBy == "" {
				p.add(v.Line, f, "must name a descriptor key")
				good = false
			}
		case "failure_mode":
			var s string
			if s, good = p.str(v, f); good {
				var err error
				if r.FailureMode, err = ParseFailureMode(s); err != nil {
					p.add(v.Line, f, "%v", err)
					good = false
				}
			}
		}
		valid = valid && good
	})
	for i, name := range r.Replaces {
		if name == r.Name {
			line := n.Line
			if ls := t.replLines[r]; i < len(ls) {
				line = ls[i]
			}
			p.add(line, fmt.Sprintf("%s.replaces[%d].name", field, i), "names this rule itself (%q); a rule cannot replace itself", name)
			valid = false
		}
	}
	if !ok || !valid {
		return nil
	}
	if r.Unlimited {
		for _, x := range []struct {
			n    *yaml.Node
			name string
		}{{unitNode, "unit"}, {windowNode, "window"}, {rpuNode, "requests_per_unit"}, {algNode, "algorithm"}, {burstNode, "burst"}, {placeNode, "placement"}, {subNode, "sub_counters"}, {tiersNode, "tiers"}, {calNode, "calendar"}, {tzNode, "time_zone"}, {penNode, "penalty"}, {settleNode, "settle"}, {pairNode, "pair_by"}} {
			if x.n != nil {
				p.add(x.n.Line, join(field, x.name), "not allowed with unlimited: true")
				valid = false
			}
		}
		if !valid {
			return nil
		}
		return r
	}
	if calNode != nil || tzNode != nil {
		if !p.calendarRule(field, n, &cal, calNode, tzNode, unitNode, windowNode, algNode, &alg) {
			return nil
		}
		r.Calendar, r.Unit, window = &cal, cal.Period.String(), cal.nominal()
	}
	switch {
	case r.Calendar != nil:
	case unitNode != nil && windowNode != nil:
		p.add(windowNode.Line, join(field, "window"), "give unit or window, not both")
		return nil
	case unitNode == nil && windowNode == nil:
		p.add(n.Line, join(field, "unit"), "required (or window, or unlimited: true)")
		valid = false
	}
	if rpuNode == nil {
		p.add(n.Line, join(field, "requests_per_unit"), "required (0 denies every request)")
		valid = false
	}
	if burstNode != nil && !alg.HasBurst() {
		p.add(burstNode.Line, join(field, "burst"), "%v has no burst; remove it or use token_bucket, gcra or leaky_bucket", alg)
		valid = false
	}
	if placeNode != nil && r.Placement == PlacementHybrid && !HybridAlgorithm(alg) {
		p.add(placeNode.Line, join(field, "placement"), "hybrid placement supports fixed_window, gcra and token_bucket, not %v", alg)
		valid = false
	}
	if pairNode != nil && r.PairBy != "" {
		valid = p.pairBy(pairNode, join(field, "pair_by"), r, alg, path) && valid
	}
	if r.SettleAfter && alg == sluice.Concurrency {
		p.add(settleNode.Line, join(field, "settle"), "concurrency limits count requests in flight; they cannot settle after")
		valid = false
	}
	if subNode != nil && r.SubCounters > 1 && alg == sluice.Concurrency {
		p.add(subNode.Line, join(field, "sub_counters"), "concurrency limits cannot be split")
		valid = false
	}
	if subNode != nil && r.SubCounters > 1 && int64(r.RequestsPerUnit) < int64(r.SubCounters) {
		p.add(subNode.Line, join(field, "sub_counters"), "%d sub-counters of requests_per_unit %d would leave some with no quota", r.SubCounters, r.RequestsPerUnit)
		valid = false
	}
	if penNode != nil {
		switch {
		case alg == sluice.Concurrency:
			p.add(penNode.Line, join(field, "penalty"), "not allowed with algorithm concurrency (a slot is given back, not exceeded)")
			valid = false
		case r.SubCounters > 1:
			p.add(penNode.Line, join(field, "penalty"), "not allowed with sub_counters")
			valid = false
		case r.Placement == PlacementHybrid:
			p.add(penNode.Line, join(field, "penalty"), "not allowed with placement hybrid")
			valid = false
		}
	}
	if !valid {
		return nil
	}
	r.Limit = sluice.Limit{Algorithm: alg, Quota: int64(r.RequestsPerUnit), Window: window, Burst: int64(burst)}
	if err := r.Limit.Validate(); err != nil {
		p.limitProblems(err, n, field, map[string]*yaml.Node{
			"window": firstNode(windowNode, unitNode), "quota": rpuNode, "burst": burstNode, "algorithm": algNode,
		})
		return nil
	}
	if tiersNode != nil {
		if !p.tiers(tiersNode, join(field, "tiers"), r) {
			return nil
		}
		if t.tierLines == nil {
			t.tierLines = map[*Rule]int{}
		}
		t.tierLines[r] = tiersNode.Line
	}
	return r
}

// MaxPenalty bounds rate_limit.penalty.
const MaxPenalty = 7 * 24 * time.Hour

// penalty reads rate_limit.penalty: a duration from 1s to MaxPenalty.
func (p *parser) penalty(v *yaml.Node, field string) (time.Duration, bool) {
	s, ok := p.str(v, field)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.add(v.Line, field, "want a duration such as 10m, got %q", s)
	case d < time.Second || d > MaxPenalty:
		p.add(v.Line, field, "%v: want 1s to %v", d, MaxPenalty)
	default:
		return d, true
	}
	return 0, false
}

func firstNode(ns ...*yaml.Node) *yaml.Node {
	for _, n := range ns {
		if n != nil {
			return n
		}
	}
	return nil
}

// limitProblems puts sluice.Limit.Validate's field errors on the rule-file
// field that caused them.
func (p *parser) limitProblems(err error, rl *yaml.Node, field string, nodes map[string]*yaml.Node) {
	fieldOf := map[string]string{"window": "window", "quota": "requests_per_unit", "burst": "burst", "algorithm": "algorithm"}
	fes := sluice.FieldErrors(err)
	if len(fes) == 0 {
		p.add(rl.Line, field, "%v", err)
		return
	}
	for _, fe := range fes {
		n, known := nodes[fe.Field]
		if !known {
			p.add(rl.Line, field, "%v", fe)
			continue
		}
		f := fieldOf[fe.Field]
		if fe.Field == "window" && n != nil && n.Kind == yaml.ScalarNode && n.Value != "" {
			if _, isUnit := UnitWindow(n.Value); isUnit {
				f = "unit"
			}
		}
		line := rl.Line
		if n != nil {
			line = n.Line
		}
		p.add(line, join(field, f), "%s", fe.Msg)
	}
}

func (p *parser) replaces(v *yaml.Node, field string, r *Rule, t *domainTree) bool {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
		return true
	}
	if v.Kind != yaml.SequenceNode {
		p.add(v.Line, field, "want a list of {name: …}, got %s", kindName(v))
		return false
	}
	good := true
	for i, c := range v.Content {
		c = p.resolve(c)
		f := fmt.Sprintf("%s[%d]", field, i)
		haveName := false
		ok := p.fields(c, f, []string{"name"}, func(_ string, _, nv *yaml.Node) {
			haveName = true
			s, ok := p.str(nv, join(f, "name"))
			switch {
			case !ok:
				good = false
			case s == "":
				p.add(nv.Line, join(f, "name"), "must not be empty")
				good = false
			default:
				r.Replaces = append(r.Replaces, s)
				if t.replLines == nil {
					t.replLines = map[*Rule][]int{}
				}
				t.replLines[r] = append(t.replLines[r], nv.Line)
			}
		})
		if !ok {
			good = false
			continue
		}
		if !haveName {
			p.add(c.Line, join(f, "name"), "required")
			good = false
		}
	}
	return good
}

// pairBy checks rate_limit.pair_by (in r.PairBy) against the rule's
// algorithm and path, and sets r.PairIndex.
func (p *parser) pairBy(v *yaml.Node, f string, r *Rule, alg sluice.Algorithm, path []Step) bool {
	if alg != sluice.Concurrency {
		p.add(v.Line, f, "only concurrency limits pair an acquire with its release, not %v", alg)
		return false
	}
	for i := range path {
		if path[i].Key != r.PairBy {
			continue
		}
		if path[i].Kind != MatchAny {
			p.add(v.Line, f, "the descriptor of key %q names a value; the entry carrying a request ID must match any value (give its key only)", r.PairBy)
			return false
		}
		r.PairIndex = i
		return true
	}
	keys := make([]string, len(path))
	for i := range path {
		keys[i] = path[i].Key
	}
	p.add(v.Line, f, "key %q is not on this rule's path (%s)", r.PairBy, strings.Join(keys, " > "))
	return false
}
