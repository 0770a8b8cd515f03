#!/usr/bin/env bash
# instr.sh: instructions per gRPC request, counted by valgrind's callgrind,
# for a bare grpc-go health server (the baseline), `sluice serve --store
# memory`, `sluice serve --store redis` (placement global) and, when
# ENVOY_RATELIMIT_BIN names a built binary, envoyproxy/ratelimit on the same
# Redis. Each server runs alone under callgrind with GOMAXPROCS=1 and
# GODEBUG=asyncpreemptoff=1; the load driver (sluice-bench grpc --requests,
# 50 callers on one connection, 10,000 descriptor values) runs outside it.
# After a warm-up the counters are zeroed (callgrind_control -z), exactly
# REQUESTS requests are sent, and the counters dumped (callgrind_control -d):
# no request is in flight at either point. Only the server's own process is
# counted (Redis is not: scripts/instr-redis.sh, when present, counts it and
# runs last).
#
# usage: scripts/instr.sh            (from anywhere in the repository)
# env:   REQUESTS (default 20000), WARMUP (default 5000),
#        ENVOY_RATELIMIT_BIN (optional), KEEP=1 keeps the callgrind files,
#        SERVERS (default "bare memory redis envoy"): which to measure; the
#        ratios need bare.
# A few GC cycles fall in the measured requests, so a count moves by a
# few per cent from one run to the next: compare runs, not single figures.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
requests=${REQUESTS:-20000}
warmup=${WARMUP:-5000}
servers=" ${SERVERS:-bare memory redis envoy} "
want() { [[ $servers == *" $1 "* ]]; }
for tool in valgrind callgrind_control redis-server go; do
	command -v "$tool" >/dev/null || { echo "instr.sh: $tool not found on PATH" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/sluice-instr.XXXXXX)
started=()
cleanup() {
	for p in "${started[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${started[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	if [ "${KEEP:-}" = 1 ]; then echo "callgrind files kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

echo "building (CGO_ENABLED=0) ..." >&2
(cd "$root" && CGO_ENABLED=0 go build -o "$tmp/sluice" ./cmd/sluice && CGO_ENABLED=0 go build -o "$tmp/sluice-bench" ./cmd/sluice-bench)

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "instr.sh: no free port found" >&2
	return 1
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
	--dir "$tmp" >"$tmp/redis.log" 2>&1 &
started+=($!)
for _ in $(seq 1 50); do
	redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
	sleep 0.1
done

names=()
counts=()
menv=() # NAME=value settings of the next server measured
# measure NAME METHOD PORT COMMAND...: runs COMMAND under callgrind, drives
# it on 127.0.0.1:PORT and records NAME's instructions per request.
measure() {
	local name=$1 method=$2 port=$3
	shift 3
	local out="$tmp/$(echo "$name" | tr -c 'a-zA-Z0-9\n' '_').out"
	echo "--- $name" >&2
	# valgrind does not follow an exec: the environment is set outside it.
	env "${menv[@]}" GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 \
		valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >"$out.log" 2>&1 &
	local pid=$!
	started+=("$pid")
	# The hooks (callgrind_control) run with the server's environment too:
	# valgrind names its control pipe after $USER and $HOST.
	if ! env "${menv[@]}" "$tmp/sluice-bench" grpc --addr "127.0.0.1:$port" --method "$method" --domain bench \
		--key remote_address --keys 10000 --concurrency 50 --conns 1 --wait 180s \
		--requests "$requests" --warmup-requests "$warmup" \
		--before "callgrind_control -z $pid >/dev/null" --after "callgrind_control -d $pid >/dev/null" >&2; then
		echo "instr.sh: driving $name failed; its log:" >&2
		tail -20 "$out.log" >&2
		exit 1
	fi
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	local total
	total=$(awk '/^totals:/ {print $2}' "$out".*[0-9] | head -1)
	if [ -z "$total" ]; then
		echo "instr.sh: no callgrind dump for $name" >&2
		exit 1
	fi
	names+=("$name")
	counts+=($((total / requests)))
}

# serve_args sets serve to `sluice serve` on 127.0.0.1:$1 with the bench rules.
serve_args() {
	serve=("$tmp/sluice" serve --rules "$root/testdata/rules/bench" --grpc-addr "127.0.0.1:$1"
		--http-addr 127.0.0.1:0 --debug-addr off --log-level warn)
}

if want bare; then
	p=$(free_port)
	measure "bare grpc-go health" health "$p" "$tmp/sluice-bench" baseline --addr "127.0.0.1:$p"
fi
if want memory; then
	p=$(free_port)
	serve_args "$p"
	measure "sluice --store memory" rls "$p" "${serve[@]}" --store memory
fi
if want redis; then
	p=$(free_port)
	serve_args "$p"
	# Under callgrind everything is ~50x slower: a generous Redis timeout
	# keeps the breaker shut.
	measure "sluice --store redis (global)" rls "$p" "${serve[@]}" --store redis \
		--redis-url "redis://127.0.0.1:$redis_port/0" --redis-timeout 10s
fi
if want envoy && [ -n "${ENVOY_RATELIMIT_BIN:-}" ]; then
	if [ -x "$ENVOY_RATELIMIT_BIN" ]; then
		mkdir -p "$tmp/runtime/ratelimit/config"
		cp "$root/testdata/rules/bench/bench.yaml" "$tmp/runtime/ratelimit/config/bench.yaml"
		p=$(free_port)
		menv=(USE_STATSD=false LOG_LEVEL=warn
			REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port"
			RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false
			RUNTIME_IGNOREDOTFILES=true GRPC_HOST=127.0.0.1 GRPC_PORT="$p" HOST=127.0.0.1
			PORT="$(free_port)" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(free_port)")
		measure "envoyproxy/ratelimit (redis)" rls "$p" "$ENVOY_RATELIMIT_BIN"
		menv=()
	else
		echo "instr.sh: ENVOY_RATELIMIT_BIN=$ENVOY_RATELIMIT_BIN is not an executable; skipped" >&2
	fi
fi

echo
echo "instructions per request (callgrind), $requests requests after $warmup warm-up, 50 callers, 1 connection, 10,000 keys"
echo "commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$root" && git diff --quiet 2>/dev/null || echo ' (modified)'), $(go version | awk '{print $3}'), $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-32s %12s %10s\n' "server" "instr/req" "vs bare"
for i in "${!names[@]}"; do
	ratio=-
	if [ "${names[0]}" = "bare grpc-go health" ]; then
		ratio=$(echo "${counts[$i]} ${counts[0]}" | awk '{printf "%.2fx", $1/$2}')
	fi
	printf '%-32s %12d %10s\n' "${names[$i]}" "${counts[$i]}" "$ratio"
done

if [ -x "$root/scripts/instr-redis.sh" ]; then
	echo
	# Its WARMUP is a duration, not this script's count.
	env -u WARMUP -u REQUESTS SLUICE_BENCH="$tmp/sluice-bench" "$root/scripts/instr-redis.sh"
fi
