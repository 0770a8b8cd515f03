package rls

import (
	"math"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/service"
)

// addLimitHeaders adds envoyproxy/ratelimit's three headers for the status
// closest to its limit: the first over-limit status of a limit not in
// quota mode if any, else the limited status with the least remaining.
func addLimitHeaders(out *rlsv3.RateLimitResponse, names LimitHeaderNames) {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for _, st := range out.GetStatuses() {
		if st.GetCurrentLimit() == nil {
			continue
		}
		if st.GetLimitRemaining() < least {
			pick, least = st, st.GetLimitRemaining()
		}
	}
	if out.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		for _, st := range out.GetStatuses() {
			if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && st.GetCurrentLimit() != nil {
				pick = st
				break
			}
		}
	}
	if pick == nil {
		return
	}
	reset := pick.GetDurationUntilReset().GetSeconds()
	if pick.GetDurationUntilReset().GetNanos() > 0 {
		reset++
	}
	out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd,
		&corev3.HeaderValue{Key: names.Limit, Value: strconv.FormatUint(uint64(pick.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		&corev3.HeaderValue{Key: names.Remaining, Value: strconv.FormatUint(uint64(pick.GetLimitRemaining()), 10)},
		&corev3.HeaderValue{Key: names.Reset, Value: strconv.FormatInt(reset, 10)},
	)
}

// dynamicMetadata is the response's dynamic_metadata as envoyproxy/ratelimit
// writes it: domain; descriptors (each its entries as "key=value", its
// limit override as text, its hitsAddend); the request's hitsAddend when
// not zero; and metadata, the rules' metadata of the descriptors that were
// not over their limit (not unlimited), merged: the first value of a key
// wins, and mappings under one key merge the same way.
func dynamicMetadata(req *rlsv3.RateLimitRequest, resp *service.Response) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, len(d.GetEntries()))
		for i, e := range d.GetEntries() {
			entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Unlimited || st.Code == service.CodeOverLimit || st.Rule == nil || st.Rule.Metadata == nil {
			continue
		}
		m, err := structpb.NewStruct(st.Rule.Metadata)
		if err != nil {
			continue // rules.Parse builds only what a Struct holds
		}
		mergeStruct(merged, m)
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a key dst lacks is added, two
// mappings under one key are merged, and otherwise dst's value stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if hs, vs := have.GetStructValue(), v.GetStructValue(); hs != nil && vs != nil {
			mergeStruct(hs, vs)
		}
	}
}
