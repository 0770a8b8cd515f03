#!/usr/bin/env bash
# instr-redis.sh: Redis user-space instructions per decision, counted by
# callgrind, for
#   (a) Sluice, placement global, fixed_window, through the real store/redis
#       client path (sluice-bench redis --pattern sluice: coalescing on), and
#   (b) envoyproxy/ratelimit's command pattern for the same limit: per
#       decision a pipelined INCRBY + EXPIRE of the window's counter, written
#       alone on one of a pool of 10 connections, as its defaults send it
#       (sluice-bench redis --pattern incrby-expire),
# each against one redis-server (free port, no persistence) run under
# `valgrind --tool=callgrind`. The counters are zeroed just before each
# load and dumped just after it, so server start-up, SCRIPT LOAD of an
# earlier run and idle time between runs are not counted; the server's cron
# during a load is. Unless NATIVE=0, also
#   (c) Sluice's native fixed windows (store/redis Options.NativeFixedWindow:
#       per call TIME, per decision INCRBY of a per-window key, PEXPIREAT
#       once per key and window, pipelined, no script; sluice-bench redis
#       --pattern sluice --native).
# Prints the ratios (a) / (b), and (c) / (b) and (c) / (a).
#
# Usage: scripts/instr-redis.sh [DURATION] [GOROUTINES] [ALGORITHM...]
#   DURATION    per load, default 20s (callgrind runs Redis ~50x slower)
#   GOROUTINES  concurrent callers, default 32: with 2 script calls in flight
#               the store's calls carry about 16 decisions each, as in
#               production-like runs (sluice-bench redis prints takes/call)
#   ALGORITHM   extra Sluice algorithms to measure after fixed_window
#               (sliding_window: also natively, unless NATIVE=0)
# Env: SLUICE_BENCH=path to a built cmd/sluice-bench (default: built here);
#      SLUICE_FLAGS=more sluice-bench redis flags for the Sluice loads, e.g.
#      "--max-batch 1" (one decision per script call, as with a Redis Cluster
#      whose keys are in different slots);
#      NATIVE=0 skips (c);
#      WARMUP=uncounted load on the same keys before each measured one
#      (default 10s), so that most decisions find their key in its window,
#      as in a long-running service at production rates (10^4 keys, limit
#      1000/s per key as 3,600,000 per hour: an hour's window, so that a
#      window boundary, where every key starts again, rarely falls in a
#      run; under callgrind a run makes only thousands of decisions per
#      second, where a service makes 10^5).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."

dur=${1:-20s}
workers=${2:-32}
warmup=${WARMUP:-10s}
shift $(( $# > 2 ? 2 : $# ))
extra=("$@")

for bin in valgrind callgrind_control redis-server redis-cli; do
	command -v "$bin" >/dev/null || { echo "instr-redis.sh: $bin not found" >&2; exit 1; }
done

tmp=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

bench=${SLUICE_BENCH:-}
if [ -z "$bench" ]; then
	bench=$tmp/sluice-bench
	go build -o "$bench" ./cmd/sluice-bench
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
	>"$tmp/redis.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.2
done
redis-cli -p "$port" ping >/dev/null || { echo "instr-redis.sh: redis-server under callgrind did not start" >&2; cat "$tmp/redis.log" >&2; exit 1; }
url="redis://127.0.0.1:$port/0"

# measure NAME ARGS...: runs sluice-bench redis ARGS against the server with
# callgrind's counters zeroed before and dumped after, and prints
# "NAME <instructions per decision>".
n=0
measure() {
	local name=$1
	shift
	n=$((n + 1))
	# Warm-up, not counted: the same keys, so that the measured load sees
	# keys that exist, as a long-running one does.
	# A long store timeout: callgrind slows Redis down, and a decision that
	# times out would be answered by a failure policy (sluice-bench redis
	# then refuses to report, and so does this script).
	"$bench" redis --redis-url "$url" --duration "$warmup" --goroutines "$workers" --timeout 30s \
		--keys 10000 --quota 3600000 --window 1h --prefix "instr$n:" "$@" >/dev/null
	callgrind_control -z "$pid" >/dev/null 2>&1
	if ! "$bench" redis --redis-url "$url" --duration "$dur" --goroutines "$workers" --timeout 30s \
		--keys 10000 --quota 3600000 --window 1h --prefix "instr$n:" "$@" >"$tmp/out.$n"; then
		cat "$tmp/out.$n" >&2
		echo "instr-redis.sh: $name: sluice-bench redis failed: no figure" >&2
		exit 1
	fi
	callgrind_control -d "$pid" >/dev/null 2>&1
	local dump=
	for _ in $(seq 1 150); do
		dump=$(ls -t "$tmp"/cg.out.* 2>/dev/null | head -1)
		[ -n "$dump" ] && grep -q '^totals:' "$dump" && break
		sleep 0.2
	done
	[ -n "$dump" ] || { echo "instr-redis.sh: callgrind wrote no dump" >&2; ls -la "$tmp" >&2; exit 1; }
	local ir decisions
	ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$dump")
	decisions=$(awk '/^decisions / {print $2; exit}' "$tmp/out.$n")
	sed 's/^/    /' "$tmp/out.$n" >&2
	rm -f "$dump"
	awk -v name="$name" -v ir="$ir" -v d="$decisions" \
		'BEGIN { printf "%-40s %12.0f instructions/decision (%d decisions, %d instructions)\n", name, ir / d, d, ir }'
}

uptime >&2
echo "redis-server $(redis-server --version | awk '{print $3}') under callgrind on 127.0.0.1:$port; $workers goroutines, $dur per load" >&2
# shellcheck disable=SC2086 # SLUICE_FLAGS is a list of flags
a=$(measure "sluice global fixed_window" --pattern sluice --algorithm fixed_window ${SLUICE_FLAGS:-})
echo "$a"
b=$(measure "envoy INCRBY+EXPIRE (pool of 10)" --pattern incrby-expire --algorithm fixed_window)
echo "$b"
c=
if [ "${NATIVE:-1}" != 0 ]; then
	# shellcheck disable=SC2086
	c=$(measure "sluice native fixed_window" --pattern sluice --native --algorithm fixed_window ${SLUICE_FLAGS:-})
	echo "$c"
fi
ipd() { echo "$1" | awk '{print $(NF-5)}'; } # instructions per decision of a measure line
for alg in "${extra[@]}"; do
	case $alg in
	sliding_log | concurrency) q=(--quota 100000) ;; # the most a log keeps
	*) q=() ;;
	esac
	# shellcheck disable=SC2086
	x=$(measure "sluice global $alg" --pattern sluice --algorithm "$alg" "${q[@]}" ${SLUICE_FLAGS:-})
	echo "$x"
	if [ "$alg" = sliding_window ] && [ "${NATIVE:-1}" != 0 ]; then
		# shellcheck disable=SC2086
		y=$(measure "sluice native sliding_window" --pattern sluice --native --algorithm sliding_window ${SLUICE_FLAGS:-})
		echo "$y"
		awk -v x="$(ipd "$x")" -v y="$(ipd "$y")" -v b="$(ipd "$b")" \
			'BEGIN { printf "ratio native / script, sliding_window: %.2fx; native sliding_window / envoy: %.2fx\n", y / x, y / b }'
	fi
done
awk -v a="$(ipd "$a")" -v b="$(ipd "$b")" \
	'BEGIN { printf "ratio sluice / envoy: %.2fx (goal <= 1.5x)\n", a / b }'
if [ -n "$c" ]; then
	awk -v a="$(ipd "$a")" -v b="$(ipd "$b")" -v c="$(ipd "$c")" \
		'BEGIN { printf "ratio native / envoy: %.2fx (goal <= 0.5x)\nratio native / script: %.2fx\n", c / b, c / a }'
fi
