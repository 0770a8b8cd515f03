package rules

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Snapshot is a compiled, immutable set of rules: every domain of one
// directory (or one file), ready to match request descriptors.
//
// A Snapshot never changes once built, so it is safe for concurrent use
// without locks; reloading builds a new one. The zero value and nil are empty
// snapshots that match nothing.
type Snapshot struct {
	domains map[string]*level
	rules   []*Rule // sorted by domain, then ID
	names   []string
	byName  map[string]map[string]*Rule
	// tenantKeys holds each domain's tenant_key, if it names one.
	tenantKeys map[string]string
	// deny holds each domain's deny list, if its file has one.
	deny map[string]*DenyList
	// prices is the price table of money rules (Options.Prices), or nil.
	prices *Prices
}

// Prices returns the price table the snapshot was loaded with
// (Options.Prices or Options.PricesFile), or nil without one. A rule
// with Usage is only in a snapshot that has one.
func (s *Snapshot) Prices() *Prices {
	if s == nil {
		return nil
	}
	return s.prices
}

// level is one level of a domain's descriptor tree, indexed for matching.
type level struct {
	keys map[string]*group
}

// group holds the descriptors of one key at one level.
type group struct {
	exact map[string]*mnode
	wild  *wildSet // nil without wildcard values; the first in file order that matches wins
	any   *mnode
}

type mnode struct {
	pattern string
	rule    *Rule
	next    *level
}

// Match returns the rule for a request descriptor's entries in domain, or nil
// if none applies. It follows envoyproxy/ratelimit: level by level along the
// entries, it prefers an exact key and value, then a wildcard value (the
// first in file order that matches), then the bare key; it does not back
// track; and a rule applies only when it sits at the level of the last entry.
//
// The wildcard values of a key are compiled together (wildSet), so a match
// costs time in proportion to the entries' lengths, not to the number of
// rules. Match does not allocate.
func (s *Snapshot) Match(domain string, entries []Entry) *Rule {
	if s == nil || len(entries) == 0 {
		return nil
	}
	lv := s.domains[domain]
	for i := range entries {
		if lv == nil {
			return nil
		}
		g := lv.keys[entries[i].Key]
		if g == nil {
			return nil
		}
		n := g.exact[entries[i].Value]
		if n == nil && g.wild != nil {
			n = g.wild.match(entries[i].Value)
		}
		if n == nil {
			n = g.any
		}
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.rule
		}
		lv = n.next
	}
	return nil
}

// Rules returns every rule, sorted by domain and then ID. The slice is the
// caller's; the rules are shared and must not be modified.
func (s *Snapshot) Rules() []*Rule {
	if s == nil {
		return nil
	}
	return slices.Clone(s.rules)
}

// Domains returns the domains, sorted.
func (s *Snapshot) Domains() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.names)
}

// HasDomain reports whether a rule file declared domain. It does not
// allocate.
func (s *Snapshot) HasDomain(domain string) bool {
	if s == nil {
		return false
	}
	_, ok := s.domains[domain]
	return ok
}

// RuleByName returns the rule of domain whose rate_limit.name is name (the
// first by ID when several share it), or nil.
func (s *Snapshot) RuleByName(domain, name string) *Rule {
	if s == nil || name == "" {
		return nil
	}
	return s.byName[domain][name]
}

// Parse reads one rule file's contents. file names it in problems. The
// returned error, if any, is an Errors listing every problem found.
func Parse(file string, data []byte, opts Options) (*Snapshot, error) {
	p := &parser{file: file, opts: opts}
	t := p.parse(data)
	var trees []*domainTree
	if t != nil {
		trees = append(trees, t)
	}
	return compile(trees, p.probs, opts)
}

// File is one rule file's name (used in problems) and contents, for
// ParseFiles.
type File struct {
	Name string
	Data []byte
}

// ParseFiles compiles rule files held in memory (rules delivered over
// xDS, for instance) into one Snapshot, with LoadDir's checks: each file
// holds one domain, a domain may not appear in two files (unless
// opts.MergeDomains), an empty set is an error, and so is a file over
// MaxFileBytes or a set over MaxDirBytes. The returned error, if
// any, is an Errors listing every problem in every file.
func ParseFiles(files []File, opts Options) (*Snapshot, error) {
	var trees []*domainTree
	var probs Errors
	total := 0
	for _, f := range files {
		if total += len(f.Data); total > MaxDirBytes {
			probs = append(probs, Problem{File: f.Name, Msg: fmt.Sprintf("the rule files come to more than %d bytes with this one (rules.MaxDirBytes)", MaxDirBytes)})
			break
		}
		p := &parser{file: f.Name, opts: opts}
		if t := p.parse(f.Data); t != nil {
			trees = append(trees, t)
		}
		probs = append(probs, p.probs...)
	}
	if len(files) == 0 {
		probs = append(probs, Problem{Msg: "no rule files"})
	}
	if opts.MergeDomains {
		trees = mergeTrees(trees, &probs)
	}
	return compile(trees, probs, opts)
}

// LoadDir reads every *.yaml and *.yml file in dir (not in subdirectories;
// names starting with "." are skipped, which also skips the "..data" and
// timestamped directories of a Kubernetes ConfigMap mount while following its
// file symlinks) and compiles them into one Snapshot. Each file holds one
// domain; a domain may not appear in two files. A file over MaxFileBytes,
// or one that brings the directory's rule files over MaxDirBytes, is a
// problem naming it, and is not read. The returned error, if any,
// is an Errors listing every problem in every file (a directory without any
// rule file is one), or an error saying dir could not be read.
func LoadDir(dir string, opts Options) (*Snapshot, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var trees []*domainTree
	var probs Errors
	files := 0
	var total int64
	var pricesSt os.FileInfo
	if opts.PricesFile != "" {
		pricesSt, _ = os.Stat(opts.PricesFile)
	}
	for _, e := range ents {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, name)
		st, err := os.Stat(path) // follows symlinks
		if err != nil {
			probs = append(probs, Problem{File: path, Msg: err.Error()})
			continue
		}
		if pricesSt != nil && os.SameFile(st, pricesSt) {
			continue // the price table, not a rule file
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if st.Size() > MaxFileBytes {
			files++
			probs = append(probs, Problem{File: path, Msg: fmt.Sprintf("file is %d bytes, more than the limit of %d (rules.MaxFileBytes)", st.Size(), MaxFileBytes)})
			continue
		}
		if total += st.Size(); total > MaxDirBytes {
			probs = append(probs, Problem{File: path, Msg: fmt.Sprintf("the rule files of %s come to more than %d bytes with this one (rules.MaxDirBytes)", dir, MaxDirBytes)})
			break
		}
		data, err := readFile(path)
		if err != nil {
			probs = append(probs, Problem{File: path, Msg: err.Error()})
			continue
		}
		files++
		p := &parser{file: path, opts: opts}
		if t := p.parse(data); t != nil {
			trees = append(trees, t)
		}
		probs = append(probs, p.probs...)
	}
	if files == 0 && len(probs) == 0 {
		// Most likely a mount that is not there yet or a wrong path; running
		// without any limit must not happen by accident.
		probs = append(probs, Problem{File: dir, Msg: "no rule files (*.yaml, *.yml)"})
	}
	if opts.MergeDomains {
		trees = mergeTrees(trees, &probs)
	}
	return compile(trees, probs, opts)
}

// readFile reads the file at path, or refuses it when it is longer than
// MaxFileBytes (it may have grown since it was looked at).
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("file is more than %d bytes, the limit (rules.MaxFileBytes)", MaxFileBytes)
	}
	return data, nil
}

// mergeTrees merges the files that share a domain into the first of them
// (in file name order), as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG
// does: their top-level descriptors join one list, and one that another
// file of the domain already has (same key and value) is an error, as are
// two different tenant_keys.
func mergeTrees(trees []*domainTree, probs *Errors) []*domainTree {
	first := map[string]*domainTree{}
	out := trees[:0:0]
	for _, t := range trees {
		f, dup := first[t.domain]
		if !dup || t.domain == "" {
			first[t.domain] = t
			out = append(out, t)
			continue
		}
		if t.tenantKey != "" && f.tenantKey != "" && t.tenantKey != f.tenantKey {
			*probs = append(*probs, Problem{File: t.file, Line: t.line, Field: "tenant_key",
				Msg: fmt.Sprintf("tenant_key %q differs from %q in %s, which has the same domain", t.tenantKey, f.tenantKey, f.file)})
			continue
		}
		if f.tenantKey == "" {
			f.tenantKey = t.tenantKey
		}
		have := map[string]*dnode{}
		for _, d := range f.top {
			have[d.step.Key+"\x00"+d.step.Value] = d
		}
		for _, d := range t.top {
			if o := have[d.step.Key+"\x00"+d.step.Value]; o != nil {
				*probs = append(*probs, Problem{File: t.file, Line: d.line, Field: d.field,
					Msg: fmt.Sprintf("descriptor %s is also at the top of domain %q in %s:%d (merged domains)", joinSteps([]Step{d.step}, '.', '='), t.domain, o.file, o.line)})
				continue
			}
			f.top = append(f.top, d)
		}
		for r, ls := range t.replLines {
			if f.replLines == nil {
				f.replLines = map[*Rule][]int{}
			}
			f.replLines[r] = ls
		}
		for r, l := range t.tierLines {
			if f.tierLines == nil {
				f.tierLines = map[*Rule]int{}
			}
			f.tierLines[r] = l
		}
	}
	return out
}

// compile builds a Snapshot from parsed files, adding the problems only the
// whole set reveals: duplicate domains, colliding rule IDs, replaces that name
// no rule.
func compile(trees []*domainTree, probs Errors, opts Options) (*Snapshot, error) {
	s := &Snapshot{domains: map[string]*level{}, byName: map[string]map[string]*Rule{}, tenantKeys: map[string]string{}}
	s.prices = opts.Prices
	if s.prices == nil && opts.PricesFile != "" {
		t, err := LoadPrices(opts.PricesFile)
		var errs Errors
		if errors.As(err, &errs) {
			probs = append(probs, errs...)
		} else if err != nil {
			probs = append(probs, Problem{File: opts.PricesFile, Msg: err.Error()})
		}
		s.prices = t
	}
	first := map[string]*domainTree{}
	for _, t := range trees {
		if t.domain == "" {
			continue // reported already
		}
		if f, dup := first[t.domain]; dup {
			probs = append(probs, Problem{File: t.file, Line: t.line, Field: "domain",
				Msg: fmt.Sprintf("domain %q is already defined in %s:%d", t.domain, f.file, f.line)})
			continue
		}
		first[t.domain] = t
		tenantRules(t, &probs)
		if t.tenantKey != "" {
			s.tenantKeys[t.domain] = t.tenantKey
		}
		if t.deny.Len() > 0 {
			if s.deny == nil {
				s.deny = map[string]*DenyList{}
			}
			s.deny[t.domain] = t.deny
		}
		var domainRules []*Rule
		ids := map[string]*Rule{}
		names := map[string]*Rule{}
		walk(t.top, func(d *dnode) {
			r := d.rule
			r.Domain = t.domain
			r.ID = ruleID(r.Path)
			if o, dup := ids[r.ID]; dup {
				probs = append(probs, Problem{File: r.File, Line: r.Line, Field: d.field + ".rate_limit",
					Msg: fmt.Sprintf("rule ID %q is also the ID of the rule at line %d; rename a key or value", r.ID, o.Line)})
				return
			}
			ids[r.ID] = r
			domainRules = append(domainRules, r)
			if r.Usage != nil && s.prices == nil && opts.PricesFile == "" {
				probs = append(probs, Problem{File: r.File, Line: r.Usage.Line, Field: d.field + ".rate_limit.usage",
					Msg: "a money budget needs a price table: start sluice serve with --prices FILE (rules.Options.Prices)"})
			}
			if o, ok := names[r.Name]; r.Name != "" && (!ok || r.ID < o.ID) {
				names[r.Name] = r
			}
		})
		walk(t.top, func(d *dnode) {
			for i, n := range d.rule.Replaces {
				if _, ok := names[n]; !ok {
					line := d.rule.Line
					if ls := t.replLines[d.rule]; i < len(ls) {
						line = ls[i]
					}
					probs = append(probs, Problem{File: d.rule.File, Line: line, Field: fmt.Sprintf("%s.rate_limit.replaces[%d].name", d.field, i),
						Msg: fmt.Sprintf("no rule in domain %q is named %q", t.domain, n)})
				}
			}
		})
		s.byName[t.domain] = names
		s.domains[t.domain] = buildLevel(t.top)
		s.names = append(s.names, t.domain)
		s.rules = append(s.rules, domainRules...)
	}
	if len(probs) > 0 {
		probs.sort()
		return nil, probs
	}
	slices.Sort(s.names)
	slices.SortFunc(s.rules, func(a, b *Rule) int {
		if c := cmp.Compare(a.Domain, b.Domain); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return s, nil
}

// ruleID joins a path's steps as key or key=value with ".".
func ruleID(path []Step) string { return joinSteps(path, '.', '=') }

// joinSteps spells steps as key, or key, kv and value for a step with a
// value (or wildcard pattern), joined by sep.
func joinSteps(steps []Step, sep, kv byte) string {
	var b strings.Builder
	for i, st := range steps {
		if i > 0 {
			b.WriteByte(sep)
		}
		b.WriteString(st.Key)
		if st.Kind != MatchAny {
			b.WriteByte(kv)
			b.WriteString(st.Value)
		}
	}
	return b.String()
}

func buildLevel(ds []*dnode) *level {
	if len(ds) == 0 {
		return nil
	}
	lv := &level{keys: map[string]*group{}}
	wild := map[*group][]*mnode{}
	for _, d := range ds {
		g := lv.keys[d.step.Key]
		if g == nil {
			g = &group{exact: map[string]*mnode{}}
			lv.keys[d.step.Key] = g
		}
		n := &mnode{pattern: d.step.Value, rule: d.rule, next: buildLevel(d.children)}
		switch d.step.Kind {
		case MatchExact:
			g.exact[d.step.Value] = n
		case MatchWildcard:
			wild[g] = append(wild[g], n)
		case MatchAny:
			g.any = n
		}
	}
	for g, ns := range wild {
		g.wild = newWildSet(ns)
	}
	return lv
}
