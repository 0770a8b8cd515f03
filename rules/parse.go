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
	sluicealgorithm "github.com/sluice-rl/sluice/algorithm"
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
	// Prices is the price table of money rules (rate_limit.usage and
	// budget), carried by the snapshot (Snapshot.Prices). When it is nil,
	// PricesFile names a price table file (LoadPrices) read again by each
	// Parse, ParseFiles and LoadDir, with its problems among the rules';
	// LoadDir skips it when it is in the directory. A rule with usage and
	// neither is an error.
	Prices     *Prices
	PricesFile string
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
	n := p.document(data, "a mapping with domain and descriptors", "a rule file holds one domain")
	if n == nil {
		return nil
	}
	return p.root(n)
}

// document decodes data as one YAML document and returns its top node,
// or nil when there is none; a second document is a problem (second says
// what a file holds). want says what an empty file should have held.
func (p *parser) document(data []byte, want, second string) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.add(0, "", "file is empty; want %s", want)
		} else {
			p.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.add(extra.Line, "", "a second YAML document; %s", second)
	} else if !errors.Is(err, io.EOF) {
		p.syntax(err)
	}
	if len(doc.Content) == 0 {
		p.add(0, "", "file is empty; want %s", want)
		return nil
	}
	return doc.Content[0]
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
			if u := r.Usage; u != nil {
				r.Path[u.Model].Usage = true
				for _, i := range u.Tokens {
					if i >= 0 {
						r.Path[i].Usage = true
					}
				}
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

// rateLimitKeys are the keys of a rule's rate_limit, in the order an
// unknown key's message lists them.
var rateLimitKeys = fieldKeys[:]

// rateLimit reads a descriptor's rate_limit: the Spec decoder, then the one
// validator (Spec.Rule).
func (p *parser) rateLimit(n *yaml.Node, field string, t *domainTree, path []Step) *Rule {
	s, ok := p.spec(n, field, rateLimitKeys)
	if !ok {
		return nil
	}
	r, err := s.Rule(Use{Algorithm: p.opts.algorithm(), Path: path})
	if err != nil {
		p.specErrors(err, field)
		return nil
	}
	r.File = p.file
	if len(s.replLines) > 0 {
		if t.replLines == nil {
			t.replLines = map[*Rule][]int{}
		}
		t.replLines[r] = s.replLines
	}
	if s.has(FieldTiers) {
		if t.tierLines == nil {
			t.tierLines = map[*Rule]int{}
		}
		t.tierLines[r] = s.line(FieldTiers)
	}
	return r
}

// specErrors records a Spec's problems at field.
func (p *parser) specErrors(err error, field string) {
	errs, ok := err.(SpecErrors)
	if !ok {
		p.add(0, field, "%v", err)
		return
	}
	for _, e := range errs {
		p.add(e.Line, join(field, e.Field), "%s", e.Msg)
	}
}

// MaxPenalty bounds rate_limit.penalty.
const MaxPenalty = 7 * 24 * time.Hour

// maxOf bounds each whole-number field, for the message of a value that is
// no whole number at all (the range itself is Spec's to check).
var maxOf = map[Field]uint64{FieldRequestsPerUnit: math.MaxUint32, FieldBurst: sluicealgorithm.MaxExact, FieldSubCounters: MaxSubCounters,
	FieldReserve: sluicealgorithm.MaxExact}

// spec is the YAML decoder of a Spec: it reads mapping n, whose keys must
// be among known, checking only each value's YAML type (string, boolean,
// whole number, list, mapping); what the values mean is the validator's
// (Spec.Rule, Spec.TierLimit). It reports false, with problems recorded,
// when a value has the wrong type or n is not a mapping.
func (p *parser) spec(n *yaml.Node, field string, known []string) (*Spec, bool) {
	s := &Spec{Line: n.Line}
	good := true
	ok := p.fields(n, field, known, func(key string, _, v *yaml.Node) {
		f := join(field, key)
		bit := fieldOfKey(key)
		s.Given |= bit
		s.lines[bit.index()] = v.Line
		var fine bool
		switch bit {
		case FieldUnlimited:
			s.Unlimited, fine = p.boolean(v, f)
		case FieldRequestsPerUnit, FieldBurst, FieldSubCounters, FieldReserve:
			var x int64
			x, fine = p.int64(v, f, maxOf[bit])
			switch bit {
			case FieldRequestsPerUnit:
				s.RequestsPerUnit = x
			case FieldBurst:
				s.Burst = x
			case FieldReserve:
				s.Reserve = x
			default:
				s.SubCounters = x
			}
		case FieldReplaces:
			fine = p.replaces(v, f, s)
		case FieldTiers:
			fine = p.tiers(v, f, s)
		case FieldUsage:
			fine = p.usage(v, f, s)
		case FieldNotifyAt:
			fine = p.levels(v, f, s)
		default:
			var str string
			str, fine = p.str(v, f)
			*s.text(bit) = str
		}
		good = good && fine
	})
	return s, ok && good
}

// text returns the string field of s that bit names.
func (s *Spec) text(bit Field) *string {
	switch bit {
	case FieldUnit:
		return &s.Unit
	case FieldName:
		return &s.Name
	case FieldAlgorithm:
		return &s.Algorithm
	case FieldWindow:
		return &s.Window
	case FieldFailureMode:
		return &s.FailureMode
	case FieldPlacement:
		return &s.Placement
	case FieldCalendar:
		return &s.Calendar
	case FieldTimeZone:
		return &s.TimeZone
	case FieldPenalty:
		return &s.Penalty
	case FieldSettle:
		return &s.Settle
	case FieldPairBy:
		return &s.PairBy
	case FieldChoice:
		return &s.Choice
	case FieldBudget:
		return &s.Budget
	case FieldSettleWithin:
		return &s.SettleWithin
	case FieldRedisPath:
		return &s.RedisPath
	}
	return new(string)
}

// int64 reads a whole number (any sign; the validator checks its range).
func (p *parser) int64(v *yaml.Node, field string, max uint64) (int64, bool) {
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" {
		var i int64
		if err := v.Decode(&i); err == nil {
			return i, true
		}
	}
	p.add(v.Line, field, "want a whole number from 0 to %d, got %s", max, kindName(v))
	return 0, false
}

// usageKeys are the keys of rate_limit.usage.
var usageKeys = append([]string{"model"}, tokenTypeNames[:]...)

// usage reads rate_limit.usage: a mapping of usageKeys to descriptor keys.
func (p *parser) usage(v *yaml.Node, field string, s *Spec) bool {
	good := true
	s.Usage, s.usageLines = map[string]string{}, map[string]int{}
	ok := p.fields(v, field, usageKeys, func(key string, _, kv *yaml.Node) {
		str, ok := p.str(kv, join(field, key))
		good = good && ok
		s.Usage[key], s.usageLines[key] = str, kv.Line
	})
	return ok && good
}

// levels reads rate_limit.notify_at: a list of whole numbers (their range
// and order are the validator's).
func (p *parser) levels(v *yaml.Node, field string, s *Spec) bool {
	if v.Kind != yaml.SequenceNode {
		p.add(v.Line, field, "want a list of percentages such as [50, 80, 100], got %s", kindName(v))
		return false
	}
	good := true
	for i, c := range v.Content {
		x, ok := p.int64(p.resolve(c), fmt.Sprintf("%s[%d]", field, i), 100)
		good = good && ok
		s.NotifyAt = append(s.NotifyAt, x)
	}
	return good
}

// replaces reads rate_limit.replaces: a list of {name: …}.
func (p *parser) replaces(v *yaml.Node, field string, s *Spec) bool {
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
			name, ok := p.str(nv, join(f, "name"))
			if !ok {
				good = false
				return
			}
			s.Replaces = append(s.Replaces, Replace{Name: name})
			s.replLines = append(s.replLines, nv.Line)
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
