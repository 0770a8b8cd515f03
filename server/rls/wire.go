package rls

import (
	"context"
	"fmt"
	"sync"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluice-rl/sluice/internal/rlsproto"
	"github.com/sluice-rl/sluice/service"
)

// The hot path of ShouldRateLimit, without the protobuf library's
// reflection: with ServerOptions' codec, a call's request is kept as its
// wire bytes (wireRequest), decoded by hand into pooled messages when it
// holds only what Envoy sends (domain, descriptors of entries, hits_addend),
// and its response encoded by hand when it holds only overall_code and
// statuses. Anything else takes the protobuf library's path, so what a
// client sees is the same either way (wire_test.go compares the bytes).
// Instructions per request: scripts/instr.sh.

// serviceDesc is rlsv3.RateLimitService_ServiceDesc with the handler that
// decodes into a wireRequest. Reflection and health see the same service.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: rlsv3.RateLimitService_ServiceDesc.ServiceName,
	HandlerType: rlsv3.RateLimitService_ServiceDesc.HandlerType,
	Methods: []grpc.MethodDesc{{
		MethodName: "ShouldRateLimit",
		Handler:    handleShouldRateLimit,
	}},
	Streams:  []grpc.StreamDesc{},
	Metadata: rlsv3.RateLimitService_ServiceDesc.Metadata,
}

// wireRequest is what a ShouldRateLimit call is decoded into. With
// ServerOptions' codec, raw holds the message's bytes (isRaw) and the
// embedded message is untouched; with any other codec the embedded message
// is decoded as usual (the codec sees a proto.Message).
type wireRequest struct {
	rlsv3.RateLimitRequest
	raw   string
	isRaw bool
}

// wirePool holds pooled wireRequests: one is put back when the call that
// decoded into it is answered and nothing else holds it (no interceptor).
var wirePool = sync.Pool{New: func() any { return new(wireRequest) }}

// wireResponse is a response to encode by hand when it allows (codec).
// The handler returns one only for a call whose request came through the
// codec, so only the codec encodes it; it is a proto.Message all the same
// (for a stats handler that looks at it). It is passed by value: a struct
// of one pointer goes into an interface without an allocation.
type wireResponse struct{ *rlsv3.RateLimitResponse }

// wireResult is the engine's answer to a call whose response is that
// alone (Server.plainResponse), for the codec to encode without building
// the RateLimitResponse on the heap. It is a proto.Message all the same:
// ProtoReflect builds the response ShouldRateLimit would return, for a
// stats handler or a binary log that looks at it.
type wireResult struct{ resp *service.Response }

// ProtoReflect returns the RateLimitResponse of the answer.
func (w wireResult) ProtoReflect() protoreflect.Message {
	return response(*w.resp, false).ProtoReflect()
}

// oneStatuses are the messages codec.Marshal renders a one-status
// wireResult in, zeroed after each.
var oneStatuses = sync.Pool{New: func() any { return new(rlsproto.OneStatus) }}

// handleShouldRateLimit is the generated handler's work, with the request
// decoded by hand when it came as wire bytes and no interceptor is set (an
// interceptor may keep the request, so it gets one of its own).
func handleShouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	s := srv.(*Server)
	w := wirePool.Get().(*wireRequest)
	if err := dec(w); err != nil {
		return nil, err // w may be half-filled: not pooled again
	}
	if w.isRaw {
		if interceptor == nil {
			d := decoders.Get().(*decoder)
			d.maxDescs, d.maxEntries = decodeBounds(s.opts.RequestBounds)
			if d.decode(w.raw) {
				w.raw, w.isRaw = "", false
				wirePool.Put(w) // the decoder holds the request now
				if d.over() {
					err := d.limitError(s.opts.RequestBounds)
					d.release()
					return nil, status.Error(codes.InvalidArgument, err.Error())
				}
				if s.plainResponse() {
					resp := new(service.Response)
					var err error
					*resp, err = s.check(ctx, &d.msg)
					d.release()
					if err != nil {
						return nil, err
					}
					return wireResult{resp}, nil
				}
				resp, err := s.ShouldRateLimit(ctx, &d.msg)
				d.release()
				if err != nil {
					return nil, err
				}
				return wireResponse{resp}, nil
			}
			d.release()
		}
		if err := proto.Unmarshal([]byte(w.raw), &w.RateLimitRequest); err != nil {
			// A domain, key or value that is not UTF-8 is the client's
			// mistake, named as the service names it (service.RequestBounds);
			// anything else is refused as grpc-go's proto codec would
			// have refused it.
			if field, ok := notUTF8(w.raw); ok {
				fe := &service.FieldError{Field: field, Reason: service.ReasonNotUTF8}
				return nil, status.Error(codes.InvalidArgument, fmt.Errorf("%w: %w", ErrInvalidRequest, fe).Error())
			}
			return nil, status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
		}
	}
	if interceptor == nil {
		return s.ShouldRateLimit(ctx, &w.RateLimitRequest)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}
	handler := func(ctx context.Context, req any) (any, error) {
		return s.ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	return interceptor(ctx, &w.RateLimitRequest, info, handler)
}

// codec is grpc-go's proto codec, except that it keeps a wireRequest's
// bytes and encodes a wireResponse by hand when it can. It is the server's
// codec for every service (ServerOptions): everything but those two types
// goes to the proto codec unchanged.
type codec struct{ base encoding.CodecV2 }

func newCodec() codec { return codec{base: encoding.GetCodecV2("proto")} }

func (c codec) Name() string { return c.base.Name() }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(wireResult); ok {
		if len(r.resp.Statuses) == 1 {
			one := oneStatuses.Get().(*rlsproto.OneStatus)
			b, ok := appendResponse(nil, rlsproto.ToProtoIn(one, *r.resp))
			*one = rlsproto.OneStatus{}
			oneStatuses.Put(one)
			if ok {
				return mem.BufferSlice{mem.SliceBuffer(b)}, nil
			}
		}
		v = wireResponse{response(*r.resp, false)}
	}
	if r, ok := v.(wireResponse); ok {
		if b, ok := appendResponse(nil, r.RateLimitResponse); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
		return c.base.Marshal(r.RateLimitResponse)
	}
	return c.base.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(*wireRequest); ok {
		if len(data) == 1 {
			w.raw = string(data[0].ReadOnlyData())
		} else {
			w.raw = string(data.Materialize())
		}
		w.isRaw = true
		return nil
	}
	return c.base.Unmarshal(data, v)
}

// decoders are pooled decoders, each with room for the descriptors and
// entries of the requests it decoded before.
var decoders = sync.Pool{New: func() any { return new(decoder) }}

// decoder decodes a RateLimitRequest into msg, its descriptors and entries
// in descs and entries (reused from one request to the next).
type decoder struct {
	msg      rlsv3.RateLimitRequest
	descs    []ratelimitv3.RateLimitDescriptor
	descPtrs []*ratelimitv3.RateLimitDescriptor
	entries  []ratelimitv3.RateLimitDescriptor_Entry
	entPtrs  []*ratelimitv3.RateLimitDescriptor_Entry
	ends     []int // ends[i]: end of descriptor i's entries in entries
	// maxDescs and maxEntries (0: no bound) bound what is kept: past
	// them descriptors and entries are checked as usual but only counted
	// (n, overAt, overEntries), so that a message of 256 KiB of empty
	// descriptors costs no more than one of 64 (it cost 32 MB).
	maxDescs, maxEntries int
	n                    int // descriptors seen
	overAt, overEntries  int // 1 + the first kept descriptor with more than maxEntries, and its count
}

// decodeBounds returns the decoder's maxDescs and maxEntries for lim.
func decodeBounds(lim service.RequestBounds) (descs, entries int) {
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return pick(lim.MaxDescriptors, service.DefaultMaxDescriptors), pick(lim.MaxEntries, service.DefaultMaxEntries)
}

// over reports whether the message decoded had more descriptors, or a
// descriptor more entries, than the decoder kept.
func (d *decoder) over() bool { return d.n > len(d.descs) || d.overAt > 0 }

// limitError is the error FromProtoLimits returns for the message decoded
// when over: the same checks in the same order, on the counts seen.
func (d *decoder) limitError(lim service.RequestBounds) error {
	wrap := func(err error) error { return fmt.Errorf("%w: %w", ErrInvalidRequest, err) }
	if d.msg.Domain == "" {
		return fmt.Errorf("%w: domain: empty", ErrInvalidRequest)
	}
	if err := lim.CheckDomain(d.msg.Domain); err != nil {
		return wrap(err)
	}
	if err := lim.CheckCount(d.n); err != nil {
		return wrap(err)
	}
	for i, desc := range d.msg.Descriptors {
		es, n := desc.Entries, len(desc.Entries)
		if i+1 == d.overAt {
			n = d.overEntries // CheckEntries refuses the count before it reads an entry
		}
		if err := lim.CheckEntries(i, n, func(j int) (string, string) { return es[j].Key, es[j].Value }); err != nil {
			return wrap(err)
		}
	}
	return fmt.Errorf("%w: over the limits", ErrInvalidRequest) // not reached: over() means a check fails
}

// release clears d (so that it holds no request's strings) and pools it.
func (d *decoder) release() {
	d.msg.Domain, d.msg.Descriptors, d.msg.HitsAddend = "", nil, 0
	d.maxDescs, d.maxEntries, d.n, d.overAt, d.overEntries = 0, 0, 0, 0, 0
	for i := range d.descs {
		d.descs[i].Entries = nil
	}
	for i := range d.entries {
		d.entries[i].Key, d.entries[i].Value = "", ""
	}
	d.descs, d.entries, d.ends = d.descs[:0], d.entries[:0], d.ends[:0]
	clear(d.descPtrs)
	clear(d.entPtrs)
	d.descPtrs, d.entPtrs = d.descPtrs[:0], d.entPtrs[:0]
	decoders.Put(d)
}

// Field numbers and wire types of what decode reads.
const (
	fieldDomain      = 1 // RateLimitRequest.domain, string
	fieldDescriptors = 2 // RateLimitRequest.descriptors, message
	fieldHitsAddend  = 3 // RateLimitRequest.hits_addend, uint32
	fieldEntries     = 1 // RateLimitDescriptor.entries, message
	fieldKey         = 1 // Entry.key, string
	fieldValue       = 2 // Entry.value, string
)

// decode fills d.msg from b, a RateLimitRequest's wire bytes, as
// proto.Unmarshal would, and reports true; or reports false, leaving d to
// be released, when b holds anything else than domain, hits_addend and
// descriptors of entries (a limit override, hits_addend of a descriptor,
// is_negative_hits, an unknown field), is malformed, or holds a string that
// is not UTF-8: proto.Unmarshal decides those. Strings are substrings of b.
func (d *decoder) decode(b string) bool {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == fieldDomain && typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 || !utf8.ValidString(v) {
				return false
			}
			d.msg.Domain, b = v, b[n:]
		case num == fieldDescriptors && typ == protowire.BytesType:
			v, n := consumeBytes(b)
			if n < 0 || !d.descriptor(v) {
				return false
			}
			b = b[n:]
		case num == fieldHitsAddend && typ == protowire.VarintType:
			v, n := consumeVarint(b)
			if n < 0 {
				return false
			}
			d.msg.HitsAddend, b = uint32(v), b[n:]
		default:
			return false
		}
	}
	// The slices are complete: point into them.
	for i := range d.entries {
		d.entPtrs = append(d.entPtrs, &d.entries[i])
	}
	start := 0
	for i := range d.descs {
		if d.ends[i] > start { // no entries: nil, as proto.Unmarshal leaves it
			d.descs[i].Entries = d.entPtrs[start:d.ends[i]:d.ends[i]]
		}
		start = d.ends[i]
		d.descPtrs = append(d.descPtrs, &d.descs[i])
	}
	if len(d.descPtrs) > 0 {
		d.msg.Descriptors = d.descPtrs
	}
	return true
}

// descriptor decodes one RateLimitDescriptor holding only entries.
func (d *decoder) descriptor(b string) bool {
	i := d.n
	d.n++
	keep := d.maxDescs <= 0 || i < d.maxDescs
	count := 0
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 || num != fieldEntries || typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		v, n := consumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var key, value string
		for len(v) > 0 {
			num, typ, n := consumeTag(v)
			if n < 0 || typ != protowire.BytesType || (num != fieldKey && num != fieldValue) {
				return false
			}
			v = v[n:]
			s, n := consumeBytes(v)
			if n < 0 || !utf8.ValidString(s) {
				return false
			}
			v = v[n:]
			if num == fieldKey {
				key = s
			} else {
				value = s
			}
		}
		if keep && (d.maxEntries <= 0 || count < d.maxEntries) {
			d.entries = append(d.entries, ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: value})
		}
		count++
	}
	if !keep {
		return true
	}
	if d.maxEntries > 0 && count > d.maxEntries && d.overAt == 0 {
		d.overAt, d.overEntries = i+1, count
	}
	d.descs = append(d.descs, ratelimitv3.RateLimitDescriptor{})
	d.ends = append(d.ends, len(d.entries))
	return true
}

// notUTF8 names the first domain, descriptor entry key or value of b, a
// RateLimitRequest's wire bytes, that is not valid UTF-8, in the spelling
// of service.RequestBounds ("descriptors[1].entries[0].value"), and reports
// whether it found one. It skips every other field, and gives up (false)
// on bytes that are not a message. It allocates only the name it returns.
func notUTF8(b string) (string, bool) {
	desc := 0
	for {
		num, v, rest, ok := nextBytes(b)
		if !ok {
			return "", false
		}
		b = rest
		switch num {
		case fieldDomain:
			if !utf8.ValidString(v) {
				return "domain", true
			}
		case fieldDescriptors:
			if field, ok := notUTF8Descriptor(v, desc); ok {
				return field, true
			}
			desc++
		}
	}
}

// notUTF8Descriptor is notUTF8 for descriptor i's bytes.
func notUTF8Descriptor(b string, i int) (string, bool) {
	for entry := 0; ; {
		num, v, rest, ok := nextBytes(b)
		if !ok {
			return "", false
		}
		b = rest
		if num != fieldEntries {
			continue
		}
		for {
			num, s, rest, ok := nextBytes(v)
			if !ok {
				break
			}
			v = rest
			if (num == fieldKey || num == fieldValue) && !utf8.ValidString(s) {
				name := "key"
				if num == fieldValue {
					name = "value"
				}
				return fmt.Sprintf("descriptors[%d].entries[%d].%s", i, entry, name), true
			}
		}
		entry++
	}
}

// nextBytes returns the next length-delimited field of the message bytes
// b (its number and value, and what follows it), skipping fields of other
// wire types; ok is false at the end of b and on bytes that are not a
// message.
func nextBytes(b string) (num protowire.Number, v, rest string, ok bool) {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return 0, "", "", false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = skipField(b, typ); n < 0 {
				return 0, "", "", false
			}
			b = b[n:]
			continue
		}
		v, n := consumeBytes(b)
		if n < 0 {
			return 0, "", "", false
		}
		return num, v, b[n:], true
	}
	return 0, "", "", false
}

// skipField returns the length of a field's value of wire type typ, not
// length-delimited, at the front of b, or -1 (groups are not skipped).
func skipField(b string, typ protowire.Type) int {
	switch typ {
	case protowire.VarintType:
		_, n := consumeVarint(b)
		return n
	case protowire.Fixed32Type:
		if len(b) >= 4 {
			return 4
		}
	case protowire.Fixed64Type:
		if len(b) >= 8 {
			return 8
		}
	}
	return -1
}

// consumeVarint reads a varint from the front of b: its value and length,
// or n < 0 when b does not start with one (protowire.ConsumeVarint on a
// string).
func consumeVarint(b string) (v uint64, n int) {
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1 // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// consumeTag reads a field's tag: its number, wire type and length.
func consumeTag(b string) (protowire.Number, protowire.Type, int) {
	v, n := consumeVarint(b)
	if n < 0 || v>>3 == 0 || v>>3 > uint64(protowire.MaxValidNumber) {
		return 0, 0, -1
	}
	return protowire.Number(v >> 3), protowire.Type(v & 7), n
}

// consumeBytes reads a length-delimited field's value: the value and the
// length of length and value.
func consumeBytes(b string) (string, int) {
	l, n := consumeVarint(b)
	if n < 0 || l > uint64(len(b)-n) {
		return "", -1
	}
	return b[n : n+int(l)], n + int(l)
}

// appendResponse appends m's wire bytes, as proto.Marshal writes them, and
// reports true; or reports false when m holds more than overall_code and
// statuses of code, current_limit, limit_remaining and
// duration_until_reset (response headers, dynamic metadata, a quota…), or
// a limit name that is not UTF-8: proto.Marshal encodes (or refuses) those.
// m must hold no unknown fields (the server's responses never do).
func appendResponse(b []byte, m *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(m.ResponseHeadersToAdd) > 0 || len(m.RequestHeadersToAdd) > 0 || len(m.RawBody) > 0 ||
		m.DynamicMetadata != nil || m.Quota != nil {
		return nil, false
	}
	size := 0
	if m.OverallCode != 0 {
		size += 1 + protowire.SizeVarint(uint64(m.OverallCode))
	}
	for _, st := range m.Statuses {
		// proto.Marshal refuses a name that is not UTF-8.
		if st == nil || st.Quota != nil || (st.CurrentLimit != nil && !utf8.ValidString(st.CurrentLimit.Name)) {
			return nil, false
		}
		n := statusSize(st)
		size += 1 + protowire.SizeBytes(n)
	}
	if b == nil {
		b = make([]byte, 0, size)
	}
	if m.OverallCode != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.OverallCode))
	}
	for _, st := range m.Statuses {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(statusSize(st)))
		b = appendStatus(b, st)
	}
	return b, true
}

// statusSize is the encoded size of a DescriptorStatus without quota.
func statusSize(st *rlsv3.RateLimitResponse_DescriptorStatus) int {
	n := 0
	if st.Code != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.Code))
	}
	if cl := st.CurrentLimit; cl != nil {
		n += 1 + protowire.SizeBytes(limitSize(cl))
	}
	if st.LimitRemaining != 0 {
		n += 1 + protowire.SizeVarint(uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		n += 1 + protowire.SizeBytes(durationSize(d.Seconds, d.Nanos))
	}
	return n
}

func appendStatus(b []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	if st.Code != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(st.Code))
	}
	if cl := st.CurrentLimit; cl != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limitSize(cl)))
		if cl.RequestsPerUnit != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(cl.RequestsPerUnit))
		}
		if cl.Unit != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(cl.Unit))
		}
		if cl.Name != "" {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendString(b, cl.Name)
		}
		if m := cl.UnitMultiplier; m != nil {
			b = protowire.AppendTag(b, 4, protowire.BytesType)
			if m.Value == 0 {
				b = protowire.AppendVarint(b, 0)
			} else {
				b = protowire.AppendVarint(b, uint64(1+protowire.SizeVarint(uint64(m.Value))))
				b = protowire.AppendTag(b, 1, protowire.VarintType)
				b = protowire.AppendVarint(b, uint64(m.Value))
			}
		}
	}
	if st.LimitRemaining != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(st.LimitRemaining))
	}
	if d := st.DurationUntilReset; d != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(d.Seconds, d.Nanos)))
		if d.Seconds != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(d.Seconds))
		}
		if d.Nanos != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(int64(d.Nanos)))
		}
	}
	return b
}

// limitSize is the encoded size of a RateLimit.
func limitSize(cl *rlsv3.RateLimitResponse_RateLimit) int {
	n := 0
	if cl.RequestsPerUnit != 0 {
		n += 1 + protowire.SizeVarint(uint64(cl.RequestsPerUnit))
	}
	if cl.Unit != 0 {
		n += 1 + protowire.SizeVarint(uint64(cl.Unit))
	}
	if cl.Name != "" {
		n += 1 + protowire.SizeBytes(len(cl.Name))
	}
	if m := cl.UnitMultiplier; m != nil {
		inner := 0
		if m.Value != 0 {
			inner = 1 + protowire.SizeVarint(uint64(m.Value))
		}
		n += 1 + protowire.SizeBytes(inner)
	}
	return n
}

// durationSize is the encoded size of a Duration.
func durationSize(seconds int64, nanos int32) int {
	n := 0
	if seconds != 0 {
		n += 1 + protowire.SizeVarint(uint64(seconds))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	return n
}
