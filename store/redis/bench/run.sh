#!/usr/bin/env bash
# Measures the Redis store against its baselines on one redis-server, in one
# run, and prints the figures BENCHMARKS.md reports:
#   1. redis-benchmark -P 16 -c 50: EVALSHA of the single-key token-bucket
#      script (scripts/lib.lua + bucket.lua + token_bucket.lua + single.lua)
#      over 10^4 random keys — run before and after the Go benchmarks, and
#      averaged, because this machine is shared and noisy;
#   2. go test -bench 'Store|RueidisEVALSHA|GoRedisEVALSHA' against the same
#      server: 64 goroutines, token bucket over 10^4 keys;
#   3. the ratios; 4. with KEYS=N (default 1000000), memory per key.
# Usage: store/redis/bench/run.sh [BENCHTIME=3s] [REQUESTS=300000] [KEYS=1000000]
set -euo pipefail
cd "$(dirname "$0")/../../.."
BENCHTIME=${BENCHTIME:-3s}
REQUESTS=${REQUESTS:-300000}
KEYS=${KEYS:-1000000}

command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
  { echo "run.sh: needs redis-server and redis-benchmark (apt-get install redis-server redis-tools)" >&2; exit 1; }

port=$(( 20000 + RANDOM % 20000 ))
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize no --logfile "$dir/log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.05; done

cpu() { redis-cli -p "$port" INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/{s+=$2} END{printf "%.6f", s}'; }
s=store/redis/scripts
sha=$(cat $s/lib.lua $s/bucket.lua $s/token_bucket.lua $s/single.lua | redis-cli -p "$port" -x SCRIPT LOAD)
spec="1:1000:1000000:1000:1000" # token_bucket 1000/s: alg:quota:window:burst:interval

rb() {
  local c0 c1 out rps
  c0=$(cpu)
  out=$(redis-benchmark -p "$port" -P 16 -c 50 -n "$REQUESTS" -r 10000 -q \
    EVALSHA "$sha" 1 rb:__rand_int__ "$spec" 1 "" 2>&1 | tr '\r' '\n' | grep 'requests per second' | tail -1)
  c1=$(cpu)
  rps=$(echo "$out" | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/')
  echo "redis-benchmark -P 16: $out" >&2
  echo "redis-benchmark -P 16: redis-cpu-µs/decision $(echo "($c1-$c0)*1000000/$REQUESTS" | bc -l | cut -c1-5)" >&2
  echo "$rps"
}

echo "--- redis $(redis-server --version | awk '{print $3}'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
rb1=$(rb)
gob=$(SLUICE_REDIS_ADDR=127.0.0.1:$port go test -run '^$' -bench 'Store$|RueidisEVALSHA|GoRedisEVALSHA' \
  -benchtime "$BENCHTIME" -count 1 ./store/redis | grep '^Benchmark')
echo "$gob"
rb2=$(rb)
val() { echo "$gob" | grep "^$1-" | grep -oE '[0-9.]+ decisions/s' | cut -d' ' -f1; }
store=$(val BenchmarkStore); rue=$(val BenchmarkRueidisEVALSHA); naive=$(val BenchmarkGoRedisEVALSHA)
rbm=$(echo "($rb1+$rb2)/2" | bc -l)
printf 'redis-benchmark -P 16 EVALSHA (mean of before/after): %.0f/s\n' "$rbm"
printf 'store: %.0f/s = %.2f× redis-benchmark -P 16, %.2f× naive go-redis EVALSHA loop (%.0f/s), %.2f× rueidis auto-pipelined EVALSHA (%.0f/s)\n' \
  "$store" "$(echo "$store/$rbm" | bc -l)" "$(echo "$store/$naive" | bc -l)" "$naive" "$(echo "$store/$rue" | bc -l)" "$rue"

if [[ $KEYS -gt 0 ]]; then
  SLUICE_BENCH_KEYS=$KEYS go test -run '^$' -bench MemoryPerKey -benchtime 1x -count 1 ./store/redis | grep '^Benchmark'
fi
