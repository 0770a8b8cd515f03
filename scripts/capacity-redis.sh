#!/usr/bin/env bash
# capacity-redis.sh: the figures of BENCHMARKS.md's capacity model for
# placement global, end to end: `sluice serve --store redis` with
# testdata/rules/bench-global (60,000 per minute per client address, fixed
# window), driven over gRPC by `sluice-bench grpc` (CONCURRENCY callers, 10^4
# addresses round robin), against a redis-server of its own (free port, no
# persistence). It prints per decision:
#   - the service's CPU (sluice-bench grpc --pid: /proc, 10 ms ticks),
#   - Redis's CPU (INFO used_cpu_user + used_cpu_sys deltas) and every
#     command Redis ran (INFO commandstats deltas: script calls, SCRIPT LOAD,
#     and the commands scripts run; INFO itself left out),
# with decisions counted by the service (sluice_decisions_total deltas on
# /metrics). A decision answered by a failure policy (outcomes failed_open,
# failed_closed, local_allowed, local_denied) was not decided by Redis: if
# there is any, the script prints why and exits 1 without Redis figures.
# Then the service's CPU on the memory store (placement local), the same
# way; then the Redis side of the same load through the store in process
# (sluice-bench redis, CONCURRENCY callers), which refuses the same way,
# and envoyproxy/ratelimit's command pattern on the same Redis
# (sluice-bench redis --pattern incrby-expire: its defaults' pool of 10
# connections, each request's INCRBY + EXPIRE written alone).
#
# Usage: scripts/capacity-redis.sh [DURATION] [CONCURRENCY] [RATE]
#   (default 20s 50 10000; the in-process pairs run unpaced, then at RATE
#   decisions per second, the same for both)
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-20s}
conc=${2:-50}
rate=${3:-10000}

for bin in redis-server redis-cli curl; do
	command -v "$bin" >/dev/null || { echo "capacity-redis.sh: $bin not found" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/sluice-bench" ./cmd/sluice-bench
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
url="redis://127.0.0.1:$rport/0"

gport=$(free_port)
hport=$(free_port)
"$tmp/sluice" serve --rules testdata/rules/bench-global --grpc-addr "127.0.0.1:$gport" \
	--http-addr "127.0.0.1:$hport" --debug-addr "" --log-level warn \
	--store redis --redis-url "$url" --redis-timeout 250ms >"$tmp/serve.log" 2>&1 &
spid=$!
pids+=("$spid")
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$hport/healthz" >/dev/null 2>&1 && break; sleep 0.1; done

# outcomes: "<decided by Redis> <degraded>" from sluice_decisions_total.
outcomes() {
	curl -sf "http://127.0.0.1:$hport/metrics" | awk '
		/^sluice_decisions_total\{/ {
			v = $NF
			if ($0 ~ /outcome="(failed_open|failed_closed|local_allowed|local_denied)"/) bad += v; else good += v
		}
		END { printf "%d %d\n", good, bad }'
}
# counters: "<cpu seconds> <commands>" from INFO, INFO itself left out.
counters() {
	redis-cli -p "$rport" INFO commandstats | tr -d '\r' >"$tmp/cs"
	redis-cli -p "$rport" INFO cpu | tr -d '\r' >"$tmp/cpu"
	awk -F'[:,=]' '/^cmdstat_/ && $1 != "cmdstat_info" { n += $3 } END { printf "%d", n }' "$tmp/cs"
	awk -F: '/^used_cpu_(user|sys):/ { c += $2 } END { printf " %.6f\n", c }' "$tmp/cpu"
}

uptime
date -u
echo "=== sluice serve --store redis (placement global), gRPC, $conc callers, $dur"
# Warm-up: keys created, scripts loaded, connections up.
"$tmp/sluice-bench" grpc --addr "127.0.0.1:$gport" --concurrency "$conc" --duration 5s --warmup 0s >/dev/null
read -r good0 bad0 < <(outcomes)
read -r cmds0 cpu0 < <(counters)
cp "$tmp/cs" "$tmp/cs0"
"$tmp/sluice-bench" grpc --addr "127.0.0.1:$gport" --concurrency "$conc" --duration "$dur" --warmup 0s --pid "$spid" | tee "$tmp/grpc.out"
read -r good1 bad1 < <(outcomes)
read -r cmds1 cpu1 < <(counters)
good=$((good1 - good0))
bad=$((bad1 - bad0))
echo "decisions: $good decided by Redis, $bad by a failure policy"
if [ "$bad" -ne 0 ] || [ "$good" -le 0 ]; then
	echo "REFUSED: $bad of $((good + bad)) decisions were not decided by Redis (failure policy after store errors or timeouts): no Redis figures" >&2
	exit 1
fi
awk -v c0="$cpu0" -v c1="$cpu1" -v n0="$cmds0" -v n1="$cmds1" -v d="$good" 'BEGIN {
	printf "redis cpu %.3f µs/decision  commands %.4f/decision\n", 1e6 * (c1 - c0) / d, (n1 - n0) / d }'
join -t'|' <(awk -F'[:,=]' '/^cmdstat_/ {print $1 "|" $3}' "$tmp/cs0" | sort) \
	<(awk -F'[:,=]' '/^cmdstat_/ {print $1 "|" $3}' "$tmp/cs" | sort) |
	awk -F'|' -v d="$good" '$1 != "cmdstat_info" && $3 - $2 > 0 { printf "  %-22s %8.4f/decision\n", substr($1, 9), ($3 - $2) / d }'

echo "=== sluice serve --store memory (placement local), gRPC, $conc callers, $dur"
mport=$(free_port)
"$tmp/sluice" serve --rules testdata/rules/bench-global --grpc-addr "127.0.0.1:$mport" \
	--http-addr "127.0.0.1:$(free_port)" --debug-addr "" --log-level warn --store memory >"$tmp/serve-mem.log" 2>&1 &
mpid=$!
pids+=("$mpid")
for _ in $(seq 1 100); do "$tmp/sluice-bench" grpc --addr "127.0.0.1:$mport" --method health --duration 100ms --warmup 0s >/dev/null 2>&1 && break; sleep 0.1; done
"$tmp/sluice-bench" grpc --addr "127.0.0.1:$mport" --concurrency "$conc" --duration 5s --warmup 0s >/dev/null
"$tmp/sluice-bench" grpc --addr "127.0.0.1:$mport" --concurrency "$conc" --duration "$dur" --warmup 0s --pid "$mpid"
kill "$mpid"

for rate in 0 "$rate"; do
	echo "=== in process, rate $rate (0: unpaced): the Redis store (sluice-bench redis), $conc callers, $dur"
	"$tmp/sluice-bench" redis --redis-url "$url" --algorithm fixed_window --quota 60000 --window 1m \
		--goroutines "$conc" --duration "$dur" --rate "$rate" --prefix "cap-sluice$rate:"
	echo "=== in process, rate $rate: envoyproxy/ratelimit's pattern (INCRBY + EXPIRE per decision, pool of 10), $conc callers, $dur"
	"$tmp/sluice-bench" redis --redis-url "$url" --pattern incrby-expire --algorithm fixed_window --quota 60000 --window 1m \
		--goroutines "$conc" --duration "$dur" --rate "$rate" --prefix "cap-envoy$rate:"
done
uptime
