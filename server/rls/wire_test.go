package rls

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// marshal is proto.Marshal that fails the test on error.
func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireRequests are requests as Envoy sends them (the fast path takes
// them: fast) and requests with more in them (the protobuf library's path).
func wireRequests(t testing.TB) []struct {
	name string
	b    []byte
	fast bool
} {
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	one := &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("user", "alice")}}}}
	many := &rlsv3.RateLimitRequest{Domain: "ai", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("tenant", "acme"), entry("user", "bob")}},
		{},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("", ""), entry("daily", "x")}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("weekly", "é ü")}},
	}}
	withLimit := &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("user", "carol")},
		Limit:   &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE},
	}}}
	withHitsAddend := &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		withHits(desc("user", "dave"), 4),
	}}
	negative := &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("tenant", "acme")}, IsNegativeHits: true,
	}}}
	// Hand-made: the domain twice (the last wins), an unknown field, a
	// string that is not UTF-8, a truncated message, hits_addend above
	// 2^32 (truncated, as proto.Unmarshal does).
	twice := protowire.AppendString(protowire.AppendTag(marshal(t, one), 1, protowire.BytesType), "second")
	unknown := protowire.AppendVarint(protowire.AppendTag(marshal(t, one), 9, protowire.VarintType), 1)
	badUTF8 := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "a\xffb")
	badValue := marshal(t, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("user", "x")}}}})
	badValue = bytes.Replace(badValue, []byte("x"), []byte{0xc0}, 1)
	hitsBig := protowire.AppendVarint(protowire.AppendTag(marshal(t, one), 3, protowire.VarintType), 1<<33+5)
	return []struct {
		name string
		b    []byte
		fast bool
	}{
		{"one descriptor", marshal(t, one), true},
		{"many descriptors", marshal(t, many), true},
		{"empty", nil, true},
		{"no descriptors", marshal(t, &rlsv3.RateLimitRequest{Domain: "ai"}), true},
		{"domain twice", twice, true},
		{"hits_addend above 2^32", hitsBig, true},
		{"limit override", marshal(t, withLimit), false},
		{"descriptor hits_addend", marshal(t, withHitsAddend), false},
		{"is_negative_hits", marshal(t, negative), false},
		{"unknown field", unknown, false},
		{"domain not UTF-8", badUTF8, false},
		{"value not UTF-8", badValue, false},
		{"truncated", marshal(t, many)[:20], false},
	}
}

// TestDecodeMatchesProto: what the hand decoder takes, it decodes as
// proto.Unmarshal does; and it takes what Envoy sends.
func TestDecodeMatchesProto(t *testing.T) {
	for _, tc := range wireRequests(t) {
		t.Run(tc.name, func(t *testing.T) {
			d := new(decoder)
			ok := d.decode(string(tc.b))
			if ok != tc.fast {
				t.Fatalf("decode = %v, want %v", ok, tc.fast)
			}
			if ok {
				checkDecoded(t, tc.b, d)
			}
			d.release()
		})
	}
}

// checkDecoded fails t unless d.msg is what proto.Unmarshal makes of b.
func checkDecoded(t testing.TB, b []byte, d *decoder) {
	t.Helper()
	var want rlsv3.RateLimitRequest
	if err := proto.Unmarshal(b, &want); err != nil {
		t.Fatalf("decode took %x, which proto.Unmarshal refuses: %v", b, err)
	}
	if !proto.Equal(&d.msg, &want) {
		t.Fatalf("decode(%x) = %v, proto.Unmarshal = %v", b, &d.msg, &want)
	}
	// Entries and descriptors left nil where proto.Unmarshal leaves them nil.
	if (want.Descriptors == nil) != (d.msg.Descriptors == nil) {
		t.Fatalf("decode(%x): descriptors nil %v, proto.Unmarshal's %v", b, d.msg.Descriptors == nil, want.Descriptors == nil)
	}
	for i, w := range want.Descriptors {
		if (w.Entries == nil) != (d.msg.Descriptors[i].Entries == nil) {
			t.Fatalf("decode(%x): descriptor %d entries nil %v, proto.Unmarshal's %v", b, i, d.msg.Descriptors[i].Entries == nil, w.Entries == nil)
		}
	}
}

// FuzzDecode: on any bytes, the hand decoder either declines or agrees with
// proto.Unmarshal; a pooled decoder reused after any input still agrees.
func FuzzDecode(f *testing.F) {
	for _, tc := range wireRequests(f) {
		f.Add(tc.b)
	}
	// Hostile: the most empty descriptors, one descriptor of the most
	// empty entries, 3 descriptors of 3 entries (over the bounded
	// decoder's 2 and 2 below), unknown groups nested deep.
	many := &rlsv3.RateLimitRequest{Domain: "edge"}
	for range 20_000 {
		many.Descriptors = append(many.Descriptors, &ratelimitv3.RateLimitDescriptor{})
	}
	f.Add(marshal(f, many))
	wide := &ratelimitv3.RateLimitDescriptor{}
	for range 20_000 {
		wide.Entries = append(wide.Entries, &ratelimitv3.RateLimitDescriptor_Entry{})
	}
	f.Add(marshal(f, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{wide}}))
	f.Add(marshal(f, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("a", "1", "b", "2"), desc("a", "1", "b", "2", "c", "3"), desc("a", "1", "b", "2", "c", "3")}}))
	var nested []byte
	for range 2000 {
		nested = protowire.AppendTag(nested, 99, protowire.StartGroupType)
	}
	for range 2000 {
		nested = protowire.AppendTag(nested, 99, protowire.EndGroupType)
	}
	f.Add(nested)
	small := service.RequestBounds{MaxDescriptors: 2, MaxEntries: 2}
	reused := new(decoder)
	f.Fuzz(func(t *testing.T, b []byte) {
		d := new(decoder)
		if d.decode(string(b)) {
			checkDecoded(t, b, d)
		}
		if reused.decode(string(b)) {
			checkDecoded(t, b, reused)
		}
		reused.release()
		reused = decoders.Get().(*decoder)
		// A bounded decoder agrees where it keeps everything, and where
		// it does not, refuses as FromProtoLimits refuses the whole.
		bd := new(decoder)
		bd.maxDescs, bd.maxEntries = decodeBounds(small)
		if bd.decode(string(b)) {
			if !bd.over() {
				checkDecoded(t, b, bd)
			} else {
				var whole rlsv3.RateLimitRequest
				if err := proto.Unmarshal(b, &whole); err != nil {
					t.Fatalf("decode(%x) took what proto.Unmarshal refuses: %v", b, err)
				}
				_, want := FromProtoLimits(&whole, small)
				if got := bd.limitError(small); want == nil || got.Error() != want.Error() {
					t.Fatalf("decode(%x) over the limits: %v, FromProtoLimits: %v", b, got, want)
				}
			}
		}
		// What notUTF8 names, proto.Unmarshal refuses.
		if field, ok := notUTF8(string(b)); ok {
			if err := proto.Unmarshal(b, new(rlsv3.RateLimitRequest)); err == nil {
				t.Fatalf("notUTF8(%x) = %q, but proto.Unmarshal takes it", b, field)
			}
		}
	})
}

// randomResponse is a response of the shapes ToProto makes, with random
// values, and now and then something only proto.Marshal encodes.
func randomResponse(r *rand.Rand) *rlsv3.RateLimitResponse {
	u32 := func() uint32 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return math.MaxUint32
		}
		return r.Uint32() >> r.IntN(32)
	}
	m := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(r.IntN(3))}
	for range r.IntN(5) {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(r.IntN(3)), LimitRemaining: u32()}
		if r.IntN(4) > 0 {
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: u32(), Unit: rlsv3.RateLimitResponse_RateLimit_Unit(r.IntN(8))}
			if r.IntN(2) == 0 {
				st.CurrentLimit.Name = []string{"", "per-user", "ünïcode", "a\xffb"}[r.IntN(4)]
			}
			if r.IntN(3) == 0 {
				st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(u32())
			}
		}
		if r.IntN(4) > 0 {
			st.DurationUntilReset = &durationpb.Duration{Seconds: r.Int64N(1<<40) - 1<<20, Nanos: r.Int32N(2e9) - 1e9}
			if r.IntN(3) == 0 {
				st.DurationUntilReset.Nanos = 0
			}
		}
		if r.IntN(20) == 0 {
			st.Quota = &rlsv3.RateLimitResponse_Quota{Requests: 3}
		}
		m.Statuses = append(m.Statuses, st)
	}
	switch r.IntN(20) {
	case 0:
		m.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "RateLimit", Value: "x"}}
	case 1:
		m.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStringValue("b")}}
	case 2:
		m.RawBody = []byte("body")
	}
	return m
}

// TestAppendResponseMatchesProto: the hand encoder writes what proto.Marshal
// writes, byte for byte, or declines.
func TestAppendResponseMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	took := 0
	for i := range 20000 {
		m := randomResponse(r)
		got, ok := appendResponse(nil, m)
		want, err := proto.Marshal(m)
		if !ok {
			continue
		}
		took++
		if err != nil {
			t.Fatalf("case %d: appendResponse took %v, which proto.Marshal refuses: %v", i, m, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d: appendResponse(%v)\n = %x\nwant %x", i, m, got, want)
		}
	}
	if took < 10000 {
		t.Fatalf("appendResponse took %d of 20000 responses, want most", took)
	}
	// What ToProto makes of one status is encoded by hand.
	if _, ok := appendResponse(nil, response(service.Response{Statuses: []service.Status{{Code: service.CodeOK}}}, false)); !ok {
		t.Fatal("appendResponse declined a response of ToProto")
	}
}

// rawCodec sends and receives bytes as they are, to send what a generated
// client cannot (unknown fields, invalid UTF-8).
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// TestFastPathAnswersAsProtoPath: the same calls to a server with
// ServerOptions and to one with grpc-go's defaults (the protobuf library
// all the way) get the same answers: the same bytes, or the same error.
// Each has its own engine over its own store and a clock that stands
// still, so their counts and reset times agree.
func TestFastPathAnswersAsProtoPath(t *testing.T) {
	for _, opts := range []struct {
		name string
		o    Options
	}{
		{"plain", Options{}},
		{"every response option", Options{ResponseHeaders: true, LimitHeaders: &LimitHeaderNames{Limit: "L", Remaining: "R", Reset: "T"}, DynamicMetadata: true}},
	} {
		t.Run(opts.name, func(t *testing.T) {
			fast := rawClient(t, opts.o, ServerOptions()...)
			slow := rawClient(t, opts.o)
			for round := range 3 { // the user limit is 10 a minute: some over
				for _, tc := range wireRequests(t) {
					if strings.HasSuffix(tc.name, "not UTF-8") {
						continue // InvalidArgument with ServerOptions: TestNotUTF8GRPC
					}
					for range 4 {
						got, gerr := fast(tc.b)
						want, werr := slow(tc.b)
						if status.Code(gerr) != status.Code(werr) || status.Convert(gerr).Message() != status.Convert(werr).Message() {
							t.Fatalf("round %d, %s: error %v, want %v", round, tc.name, gerr, werr)
						}
						// Dynamic metadata is a map: compare messages, not bytes.
						var g, w rlsv3.RateLimitResponse
						if err := proto.Unmarshal(got, &g); err != nil {
							t.Fatal(err)
						}
						if err := proto.Unmarshal(want, &w); err != nil {
							t.Fatal(err)
						}
						if !proto.Equal(&g, &w) {
							t.Fatalf("round %d, %s: %v, want %v", round, tc.name, &g, &w)
						}
						if opts.o == (Options{}) && !bytes.Equal(got, want) {
							t.Fatalf("round %d, %s: %x, want %x", round, tc.name, got, want)
						}
					}
				}
			}
		})
	}
}

// rawClient serves an RLS (envoyRules, memory store, opts) with the server
// options sopts and returns a function that sends a request's bytes.
func rawClient(t *testing.T, opts Options, sopts ...grpc.ServerOption) func([]byte) ([]byte, error) {
	t.Helper()
	snap, err := rules.Parse("ai.yaml", []byte(envoyRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A clock that stands still: both servers see the same instant.
	now := func() time.Time { return time.Unix(1_700_000_030, 0) }
	st := memory.New(memory.Options{Now: now})
	t.Cleanup(func() { st.Close() })
	cfg := service.DefaultConfig()
	cfg.Now = now
	eng, err := service.New(cfg, service.StaticRules{Snapshot: snap}, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(sopts...)
	New(eng, opts).Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func(req []byte) ([]byte, error) {
		var out []byte
		err := conn.Invoke(context.Background(), rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &req, &out)
		return out, err
	}
}

// TestNotUTF8GRPC: a domain, key or value that is not UTF-8 is refused
// with InvalidArgument naming the field as the service's validation names
// it, with or without an interceptor (refused while decoding, before it),
// also beside fields only the protobuf library's path takes. Without ServerOptions, grpc-go's codec refuses the bytes
// itself (Internal), before Sluice sees them.
func TestNotUTF8GRPC(t *testing.T) {
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
		return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	// Marshal with valid placeholders, then swap in the bad bytes (of the
	// same length), since proto.Marshal refuses invalid UTF-8.
	bad := func(m *rlsv3.RateLimitRequest, placeholder, with string) []byte {
		b := marshal(t, m)
		if len(placeholder) != len(with) || bytes.Count(b, []byte(placeholder)) != 1 {
			t.Fatalf("placeholder %q: must occur once and be as long as %q", placeholder, with)
		}
		return bytes.Replace(b, []byte(placeholder), []byte(with), 1)
	}
	two := func(v string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("user", "a")}},
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("user", "b"), entry("daily", v)}},
		}}
	}
	cases := []struct {
		name, field string
		b           []byte
	}{
		{"domain", "domain", bad(&rlsv3.RateLimitRequest{Domain: "aXY", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}}, "aXY", "a\xff\xfe")},
		{"key", "descriptors[0].entries[0].key", bad(&rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("KEY", "a")}}, "KEY", "K\xc0Y")},
		{"value", "descriptors[1].entries[1].value", bad(two("VALUE"), "VALUE", "V\xedL\x80E")},
		{"lone surrogate", "descriptors[1].entries[1].value", bad(two("SUR"), "SUR", "\xed\xb0\x80")},
		{"value beside is_negative_hits", "descriptors[0].entries[0].value", bad(&rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("user", "ZZ")}, IsNegativeHits: true}}}, "ZZ", "\xff\xff")},
	}
	var seen int
	icpt := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen++
		return h(ctx, req)
	}
	for _, srv := range []struct {
		name string
		opts []grpc.ServerOption
	}{
		{"ServerOptions", ServerOptions()},
		{"ServerOptions and an interceptor", append(ServerOptions(), grpc.UnaryInterceptor(icpt))},
	} {
		call := rawClient(t, Options{}, srv.opts...)
		for _, tc := range cases {
			_, err := call(tc.b)
			want := "invalid rate limit request: " + tc.field + ": not valid UTF-8"
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != want {
				t.Errorf("%s, %s: %v; want InvalidArgument %q", srv.name, tc.name, err, want)
			}
		}
	}
	if seen != 0 {
		t.Errorf("the interceptor saw %d calls, want 0 (refused while decoding, as grpc-go refuses what it cannot decode)", seen)
	}
	// Without ServerOptions grpc-go's own codec refuses the message.
	call := rawClient(t, Options{})
	if _, err := call(cases[2].b); status.Code(err) != codes.Internal {
		t.Errorf("without ServerOptions: %v, want grpc-go's Internal", err)
	}
}

// TestFastPathWithInterceptor: with an interceptor, it gets the request as a
// RateLimitRequest, decoded.
func TestFastPathWithInterceptor(t *testing.T) {
	var seen string
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen = req.(*rlsv3.RateLimitRequest).GetDescriptors()[0].GetEntries()[0].GetValue()
		return h(ctx, req)
	}
	call := rawClient(t, Options{}, append(ServerOptions(), grpc.UnaryInterceptor(icpt))...)
	req := marshal(t, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "erin")}})
	out, err := call(req)
	if err != nil {
		t.Fatal(err)
	}
	var resp rlsv3.RateLimitResponse
	if err := proto.Unmarshal(out, &resp); err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit = %v, %v; want OK", &resp, err)
	}
	if seen != "erin" {
		t.Fatalf("interceptor saw value %q, want erin", seen)
	}
}

// TestWireResultMatchesResponse: an engine answer the codec encodes
// straight (wireResult) gives the bytes, or the error, of the response
// ShouldRateLimit renders, and its proto view is that response, for one
// status (rendered in pooled messages) and for several.
func TestWireResultMatchesResponse(t *testing.T) {
	c := newCodec()
	names := []string{"", "bench", "per-user limit", "bad\xffname"}
	units := []string{"", "second", "minute", "hour", "day", "week", "month", "year"}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		resp := service.Response{OverallCode: service.Code(r.IntN(3)), Statuses: make([]service.Status, 1+r.IntN(3)*r.IntN(2))}
		for j := range resp.Statuses {
			st := service.Status{Code: service.Code(r.IntN(3)), Unlimited: r.IntN(8) == 0}
			if r.IntN(4) > 0 {
				st.CurrentLimit = &service.CurrentLimit{Name: names[r.IntN(len(names))], RequestsPerUnit: r.Uint32N(5000),
					Unit: units[r.IntN(len(units))], Window: time.Duration(r.Int64N(int64(48 * time.Hour)))}
			}
			st.Result = sluice.Result{Allowed: st.Code != service.CodeOverLimit, Limit: int64(r.IntN(5000)), Remaining: int64(r.IntN(5000)) - 10,
				ResetAfter: time.Duration(r.Int64N(int64(time.Hour))), RetryAfter: time.Duration(r.Int64N(int64(time.Minute)))}
			resp.Statuses[j] = st
		}
		want := response(resp, false)
		wantBytes, wantErr := c.Marshal(wireResponse{want})
		got, gotErr := c.Marshal(wireResult{&resp})
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("case %d: Marshal(wireResult) error %v, want %v", i, gotErr, wantErr)
		}
		if gotErr == nil && !bytes.Equal(got.Materialize(), wantBytes.Materialize()) {
			t.Fatalf("case %d: Marshal(wireResult) = %x\nwant %x", i, got.Materialize(), wantBytes.Materialize())
		}
		if view := (wireResult{&resp}).ProtoReflect().Interface(); !proto.Equal(view, want) {
			t.Fatalf("case %d: wireResult's proto view = %v, want %v", i, view, want)
		}
	}
}
