package tenant

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// The snapshot file: what an instance keeps on local disk so that, started
// while its Source is unreachable, it enforces the tenants it last knew
// instead of the rule files' defaults.
//
// Format (version 1): JSON lines. The first is a header
// {"format":"sluice-tenant-snapshot","version":1,"at":…,"records":N,"switches":[…]},
// then one line per tenant record, then one line per deny entry
// {"deny":{"domain":…,"key":…,"value"|"cidr":…}} (the header's "deny"
// counts them; absent: none), then a trailer {"end":true,"records":N}
// that proves the file whole. It holds tenant names, tiers, overrides,
// switches and deny entries: nothing about where they came from (no
// database URL).

// FileFormat and FileVersion identify a snapshot file.
const (
	FileFormat  = "sluice-tenant-snapshot"
	FileVersion = 1
)

// minRecordBytes is less than the shortest line a record takes in a
// snapshot file ({"t":"","tier":""} and its newline are 19 bytes).
const minRecordBytes = 16

// DefaultMaxFileBytes bounds a snapshot file when the caller gives no
// bound: 256 MiB, about four million tenants with no overrides.
const DefaultMaxFileBytes = 256 << 20

// maxPresize is the most records a header's count reserves room for.
const maxPresize = 1 << 16

// ErrFileTooLarge is returned by WriteFile and ReadFile for a snapshot
// larger than the bound.
var ErrFileTooLarge = errors.New("tenant: snapshot file larger than its bound")

type fileHeader struct {
	Format   string       `json:"format"`
	Version  int          `json:"version"`
	At       time.Time    `json:"at"`
	Records  int          `json:"records"`
	Switches []fileSwitch `json:"switches"`
	Deny     int          `json:"deny,omitempty"`
}

type fileDeny struct {
	Deny struct {
		Domain string `json:"domain"`
		Key    string `json:"key"`
		Value  string `json:"value,omitempty"`
		CIDR   string `json:"cidr,omitempty"`
	} `json:"deny"`
}

type fileSwitch struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	State  string `json:"state"`
}

type fileRecord struct {
	Tenant    string         `json:"t"`
	Tier      string         `json:"tier"`
	From      int64          `json:"from,omitempty"` // Unix µs
	Until     int64          `json:"until,omitempty"`
	Overrides []fileOverride `json:"ovs,omitempty"`
}

type fileOverride struct {
	Domain    string `json:"domain"`
	Path      string `json:"path"`
	Algorithm string `json:"alg"`
	Quota     int64  `json:"quota"`
	WindowUS  int64  `json:"window_us"`
	Burst     int64  `json:"burst,omitempty"`
	RPU       uint32 `json:"rpu"`
	Unit      string `json:"unit,omitempty"`
	Calendar  bool   `json:"calendar,omitempty"`
	From      int64  `json:"from,omitempty"`
	Until     int64  `json:"until,omitempty"`
}

type fileTrailer struct {
	End     bool `json:"end"`
	Records int  `json:"records"`
}

// At returns when the snapshot's data was read from its source.
func (s *Snapshot) At() time.Time {
	if s == nil || s.at == 0 {
		return time.Time{}
	}
	return time.UnixMicro(s.at)
}

// each calls f for every tenant with a record, delta first.
func (s *Snapshot) each(f func(name string, e *entry) error) error {
	for name, e := range s.delta {
		if e != nil {
			if err := f(name, e); err != nil {
				return err
			}
		}
	}
	t := s.base
	if t == nil {
		return nil
	}
	for _, j := range t.index {
		if j == 0 {
			continue
		}
		r := &t.recs[j-1]
		name := t.name(r)
		if _, changed := s.delta[name]; changed {
			continue
		}
		e := entry{tier: r.tier, from: r.from, until: r.until, ovs: t.ovs[r.ovOff : r.ovOff+uint32(r.ovLen)]}
		if err := f(name, &e); err != nil {
			return err
		}
	}
	return nil
}

// countWriter counts bytes and fails past max.
type countWriter struct {
	w   io.Writer
	n   int64
	max int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.max {
		return 0, ErrFileTooLarge
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteSnapshot writes s to w in the snapshot file's encoding (see the
// top of this file), at most maxBytes (<= 0: DefaultMaxFileBytes): past
// that it stops and returns an error wrapping ErrFileTooLarge, w holding
// a part. The same encoding is the fleet's shared copy (Options.Copy).
func WriteSnapshot(w io.Writer, s *Snapshot, maxBytes int64) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFileBytes
	}
	cw := &countWriter{w: w, max: maxBytes}
	bw := bufio.NewWriterSize(cw, 64<<10)
	enc := json.NewEncoder(bw)
	h := fileHeader{Format: FileFormat, Version: FileVersion, At: s.At().UTC(), Records: s.Len(), Switches: []fileSwitch{}, Deny: len(s.denyEntries)}
	for k, st := range s.switches {
		h.Switches = append(h.Switches, fileSwitch{Domain: k.domain, Rule: k.rule, State: st.String()})
	}
	if err := enc.Encode(h); err != nil {
		return err
	}
	n := 0
	err := s.each(func(name string, e *entry) error {
		r := fileRecord{Tenant: name, Tier: e.tier.String(), From: e.from, Until: e.until}
		for _, o := range e.ovs {
			r.Overrides = append(r.Overrides, fileOverride{Domain: o.domain, Path: o.path, Algorithm: o.lim.Limit.Algorithm.String(),
				Quota: o.lim.Limit.Quota, WindowUS: o.lim.Limit.Window.Microseconds(), Burst: o.lim.Limit.Burst,
				RPU: o.lim.RequestsPerUnit, Unit: o.lim.Unit, Calendar: o.lim.Calendar, From: o.from, Until: o.until})
		}
		n++
		return enc.Encode(r)
	})
	for _, d := range s.denyEntries {
		if err != nil {
			break
		}
		var fd fileDeny
		fd.Deny.Domain, fd.Deny.Key, fd.Deny.Value, fd.Deny.CIDR = d.Domain, d.Key, d.Value, d.CIDR
		err = enc.Encode(fd)
	}
	if err == nil {
		err = enc.Encode(fileTrailer{End: true, Records: n})
	}
	if err == nil {
		err = bw.Flush()
	}
	return err
}

// WriteFile writes s to path atomically: to a temporary file in the same
// directory, synced, then renamed over path (and the directory synced), so
// a reader sees the old file or the new one, never a part. The directory
// is created (mode 0700) if missing; the file is mode 0600. A snapshot
// that would exceed maxBytes (<= 0: DefaultMaxFileBytes) is not written
// and ErrFileTooLarge returned; path keeps its previous content.
func WriteFile(path string, s *Snapshot, maxBytes int64) (err error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFileBytes
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tenant: snapshot file: %w", err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("tenant: snapshot file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	err = WriteSnapshot(f, s, maxBytes)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		if errors.Is(err, ErrFileTooLarge) {
			return fmt.Errorf("%w (%d bytes): %s keeps its previous content", ErrFileTooLarge, maxBytes, path)
		}
		return fmt.Errorf("tenant: snapshot file: %w", err)
	}
	if d, derr := os.Open(dir); derr == nil { // make the rename durable
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// ReadFile reads a snapshot written by WriteFile. It refuses a file larger
// than maxBytes (<= 0: DefaultMaxFileBytes), of another format or version,
// or cut short, naming the line at fault. Records are checked as a Source's
// are: an override that is not a valid limit is dropped.
func ReadFile(path string, maxBytes int64) (*Snapshot, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFileBytes
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tenant: snapshot file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, the bound is %d", ErrFileTooLarge, path, st.Size(), maxBytes)
	}
	return ReadSnapshot(f, path, maxBytes)
}

// ReadSnapshot decodes what WriteSnapshot wrote, reading at most maxBytes
// (<= 0: DefaultMaxFileBytes) of r: input past that bound is cut off and
// refused as cut short. name (a path, "redis copy") starts the "name:line"
// of every error. Its checks are ReadFile's: format and version, counts
// against the header and trailer, each record as a Source's.
func ReadSnapshot(r io.Reader, name string, maxBytes int64) (*Snapshot, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxFileBytes
	}
	path := name
	sc := bufio.NewScanner(io.LimitReader(r, maxBytes))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20+MaxOverrides*(MaxDescriptorLen+MaxDomainLen+256))
	line := 0
	next := func(v any) error {
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return fmt.Errorf("%s:%d: %w", path, line+1, err)
			}
			return fmt.Errorf("%s:%d: cut short (no trailer)", path, line+1)
		}
		line++
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		return nil
	}
	var h fileHeader
	if err := next(&h); err != nil {
		return nil, fmt.Errorf("tenant: snapshot file: %w", err)
	}
	if h.Format != FileFormat || h.Version != FileVersion {
		return nil, fmt.Errorf("tenant: snapshot file %s: format %q version %d; this build reads %q version %d", path, h.Format, h.Version, FileFormat, FileVersion)
	}
	if h.Deny < 0 || h.Deny > MaxDenyEntries {
		return nil, fmt.Errorf("tenant: snapshot file %s:1: deny: %d entries, want 0 to %d", path, h.Deny, MaxDenyEntries)
	}
	if h.Records < 0 {
		return nil, fmt.Errorf("tenant: snapshot file %s:1: records: %d, want 0 or more", path, h.Records)
	}
	// The header's count sizes the table up to a point, and no further
	// than the input can hold (a record's line is longer than
	// minRecordBytes): a hostile count must not allocate; past it, the
	// table grows as records come.
	b := newBuilder(min(h.Records, maxPresize, int(min(maxBytes/minRecordBytes, int64(maxPresize)))), h.At)
	var deny []DenyEntry
	for n := 0; ; n++ {
		if n > h.Records {
			return nil, fmt.Errorf("tenant: snapshot file %s:%d: more records than the header's %d", path, line, h.Records)
		}
		raw := fileRecord{}
		if err := next(&raw); err != nil {
			// The trailer does not decode as a record (unknown field "end").
			var tr fileTrailer
			if sc.Err() == nil && json.Unmarshal(sc.Bytes(), &tr) == nil && tr.End {
				if tr.Records != n || n != h.Records {
					return nil, fmt.Errorf("tenant: snapshot file %s:%d: %d records, trailer says %d, header %d", path, line, n, tr.Records, h.Records)
				}
				if len(deny) != h.Deny {
					return nil, fmt.Errorf("tenant: snapshot file %s:%d: %d deny entries, header says %d", path, line, len(deny), h.Deny)
				}
				break
			}
			var fd fileDeny
			if sc.Err() == nil && json.Unmarshal(sc.Bytes(), &fd) == nil && fd.Deny.Key != "" {
				if len(deny) >= h.Deny {
					return nil, fmt.Errorf("tenant: snapshot file %s:%d: more deny entries than the header's %d", path, line, h.Deny)
				}
				deny = append(deny, DenyEntry{Domain: fd.Deny.Domain, Key: fd.Deny.Key, Value: fd.Deny.Value, CIDR: fd.Deny.CIDR})
				n-- // not a record
				continue
			}
			return nil, fmt.Errorf("tenant: snapshot file: %w", err)
		}
		rec, err := raw.record()
		if err != nil {
			return nil, fmt.Errorf("tenant: snapshot file %s:%d: %w", path, line, err)
		}
		b.add(&rec)
	}
	var sws []RuleSwitch
	for i, sw := range h.Switches {
		st, err := rules.ParseSwitch(sw.State)
		if err != nil {
			return nil, fmt.Errorf("tenant: snapshot file %s:1: switches[%d].state: %w", path, i, err)
		}
		sws = append(sws, RuleSwitch{Domain: sw.Domain, Rule: sw.Rule, State: st})
	}
	return b.done(sws).withDeny(deny), nil
}

func fromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

func (r *fileRecord) record() (Record, error) {
	tier, err := rules.ParseTier(r.Tier)
	if err != nil {
		return Record{}, fmt.Errorf("tier: %w", err)
	}
	if err := ValidTenant(r.Tenant); err != nil {
		return Record{}, fmt.Errorf("tenant: %w", err)
	}
	if len(r.Overrides) > MaxOverrides {
		return Record{}, fmt.Errorf("ovs: %d overrides, at most %d", len(r.Overrides), MaxOverrides)
	}
	rec := Record{Tenant: r.Tenant, Tier: tier, EffectiveAt: fromMicros(r.From), ExpiresAt: fromMicros(r.Until)}
	for i, o := range r.Overrides {
		alg, err := sluice.ParseAlgorithm(o.Algorithm)
		if err != nil {
			return Record{}, fmt.Errorf("ovs[%d].alg: %w", i, err)
		}
		rec.Overrides = append(rec.Overrides, Override{Domain: o.Domain, Descriptor: o.Path,
			Limit:           sluice.Limit{Algorithm: alg, Quota: o.Quota, Window: time.Duration(o.WindowUS) * time.Microsecond, Burst: o.Burst},
			RequestsPerUnit: o.RPU, Unit: o.Unit, Calendar: o.Calendar, EffectiveAt: fromMicros(o.From), ExpiresAt: fromMicros(o.Until)})
	}
	return rec, nil
}
