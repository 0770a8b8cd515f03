package rules

import (
	"fmt"
	"net/netip"

	"go.yaml.in/yaml/v3"
)

// MaxDenyEntries bounds the deny list of one rule file.
const MaxDenyEntries = 100_000

// DenyList is a domain's deny list (a rule file's top-level deny): request
// entries refused outright, with reason deny_list, before any counter is
// looked at. Immutable once in a Snapshot.
type DenyList struct {
	// values: key → exact values denied ("" in the set: any value).
	values map[string]map[string]bool
	// prefixes: key → address ranges denied (the entry's value parsed as
	// an IP address).
	prefixes map[string][]netip.Prefix
}

// Len returns the number of entries.
func (d *DenyList) Len() int {
	if d == nil {
		return 0
	}
	n := 0
	for _, v := range d.values {
		n += len(v)
	}
	for _, p := range d.prefixes {
		n += len(p)
	}
	return n
}

// Denies reports whether an entry is on the list: its key is listed with
// its value, with any value, or with an address range holding the value
// (an IPv4 or IPv6 address; an IPv4-mapped IPv6 address counts as IPv4).
func (d *DenyList) Denies(e Entry) bool {
	if d == nil {
		return false
	}
	if vs := d.values[e.Key]; vs != nil && (vs[e.Value] || vs[""]) {
		return true
	}
	ps := d.prefixes[e.Key]
	if len(ps) == 0 {
		return false
	}
	a, err := netip.ParseAddr(e.Value)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// DenyList returns the deny list of domain, or nil.
func (s *Snapshot) DenyList(domain string) *DenyList {
	if s == nil {
		return nil
	}
	return s.deny[domain]
}

// denyList reads a rule file's top-level deny: a list of {key, value} (an
// exact value), {key, cidr} (an address range, or one address) or {key}
// alone (every value of the key).
func (p *parser) denyList(n *yaml.Node) *DenyList {
	n = p.resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.add(n.Line, "deny", "want a list, got %s", kindName(n))
		return nil
	}
	if len(n.Content) > MaxDenyEntries {
		p.add(n.Line, "deny", "%d entries, above the limit of %d", len(n.Content), MaxDenyEntries)
		return nil
	}
	d := &DenyList{values: map[string]map[string]bool{}, prefixes: map[string][]netip.Prefix{}}
	for i, e := range n.Content {
		field := fmt.Sprintf("deny[%d]", i)
		var key, value, cidr string
		var haveValue, haveCIDR bool
		ok := p.fields(e, field, []string{"key", "value", "cidr"}, func(k string, _, v *yaml.Node) {
			f := join(field, k)
			switch k {
			case "key":
				key, _ = p.str(v, f)
			case "value":
				value, haveValue = p.str(v, f)
			case "cidr":
				cidr, haveCIDR = p.str(v, f)
			}
		})
		if !ok {
			continue
		}
		switch {
		case key == "":
			p.add(e.Line, join(field, "key"), "required")
		case haveValue && haveCIDR:
			p.add(e.Line, join(field, "cidr"), "give value or cidr, not both")
		case haveCIDR:
			pfx, err := netip.ParsePrefix(cidr)
			if err != nil {
				a, aerr := netip.ParseAddr(cidr)
				if aerr != nil {
					p.add(e.Line, join(field, "cidr"), "want an address range such as 10.0.0.0/8 or 2001:db8::/32, got %q", cidr)
					continue
				}
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
			if pfx.Addr().Is4In6() {
				pfx = netip.PrefixFrom(pfx.Addr().Unmap(), max(pfx.Bits()-96, 0))
			}
			d.prefixes[key] = append(d.prefixes[key], pfx.Masked())
		case haveValue && value == "":
			p.add(e.Line, join(field, "value"), "must not be empty (leave value out to deny every value of the key)")
		default:
			if d.values[key] == nil {
				d.values[key] = map[string]bool{}
			}
			d.values[key][value] = true
		}
	}
	return d
}
