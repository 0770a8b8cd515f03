package redis

import (
	"strconv"

	"github.com/sluice-rl/sluice"
)

// Keys and hash slots. Redis Cluster maps a key to one of 16384 slots by
// CRC16 of its hash tag: the part between the first '{' and the next '}' if
// that part is non-empty, else the whole key.

const numSlots = 16384

// hashTag returns the part of key Redis hashes, and whether key has a tag.
func hashTag(key string) (string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for j := i + 1; j < len(key); j++ {
				if key[j] == '}' {
					if j == i+1 {
						return key, false
					}
					return key[i+1 : j], true
				}
			}
			return key, false
		}
	}
	return key, false
}

// slotOf returns the cluster slot of a Redis key.
func slotOf(key string) int {
	tag, _ := hashTag(key)
	return int(crc16(tag) % numSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster uses for slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// algLetter is one letter per algorithm, put before the key: like
// store/memory, the store keeps one state per (algorithm, key), and the
// letter says what a key holds when one reads Redis.
var algLetter = [...]string{
	sluice.TokenBucket:   "t",
	sluice.GCRA:          "g",
	sluice.LeakyBucket:   "l",
	sluice.FixedWindow:   "f",
	sluice.SlidingWindow: "s",
	sluice.SlidingLog:    "o",
	sluice.Concurrency:   "c",
}

// redisKey returns the Redis key for an op key and algorithm: prefix +
// letter + key when key has a hash tag of its own, else prefix + letter +
// "{" + key + "}", so that by default each key is its own slot and a caller
// who wants several keys in one slot (one atomic script call) gives them the
// same {tag}. a must be valid.
// pairLetter starts the Redis key of a reservation's record (pairKey),
// after the prefix: no algorithm's letter, so that Keys never lists a
// record as a counter.
const pairLetter = "p"

// pairKey is the Redis key of the record of reservation lease on the
// counter of algorithm a and key (sluice.Op.Lease, scripts/driver.lua's
// pair_step): the counter's hash tag, so its slot, and the lease.
func pairKey(prefix string, a sluice.Algorithm, key string, lease uint64) string {
	return prefix + pairLetter + redisKey("", a, key) + "|" + strconv.FormatUint(lease, 10)
}

func redisKey(prefix string, a sluice.Algorithm, key string) string {
	if _, ok := hashTag(key); ok {
		return prefix + algLetter[a] + key
	}
	return prefix + algLetter[a] + "{" + key + "}"
}
