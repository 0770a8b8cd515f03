package rlqs

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxBucketBytes is Options.MaxBucketBytes's default: 1 MiB, four
// times the default --max-request-bytes.
const DefaultMaxBucketBytes = 1 << 20

// idSize is the bytes of a bucket id's keys and values.
func idSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// room makes room for a new bucket of id m (usage i of the message) in
// the stream's Options.MaxBucketBytes, or returns the ResourceExhausted
// status that ends the stream. ss.idBytes only grows here: it counts
// buckets since forgotten until the bound is near, when the buckets held
// are counted again (at most MaxBuckets of them), so whatever removes a
// bucket need not know of it.
func (ss *session) room(i int, m map[string]string) error {
	n, limit := idSize(m), ss.srv.opts.MaxBucketBytes
	if ss.idBytes+n > limit {
		ss.idBytes = 0
		for _, b := range ss.buckets {
			ss.idBytes += idSize(b.id.GetBucket())
		}
		if ss.idBytes+n > limit {
			return status.Errorf(codes.ResourceExhausted, "rlqs: bucket_quota_usages[%d].bucket_id: the stream's bucket ids would hold %d bytes, at most %d (max bucket bytes)", i, ss.idBytes+n, limit)
		}
	}
	ss.idBytes += n
	return nil
}
