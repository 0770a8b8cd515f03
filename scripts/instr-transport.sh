#!/usr/bin/env bash
# instr-transport.sh: the transport goals of issue 29, in instructions per
# request counted by valgrind's callgrind, each beside its baseline in one
# run, every server on the memory store (the transport and the engine, not
# Redis):
#   - Envoy's ShouldRateLimit on `sluice serve --store memory` against a bare
#     grpc-go server with the same grpc.NumStreamWorkers (rls.StreamWorkers)
#     serving a real RateLimitService handler: grpc-go's proto codec decodes
#     the RateLimitRequest, the handler answers the RateLimitResponse Sluice
#     gives (sluice-bench baseline --service rls);
#   - POST /v1/check on the same server against a bare net/http handler that
#     reads the body, decodes it into a struct of CheckRequest's fields
#     (unknown members refused) and writes the CheckResponse Sluice writes,
#     once with encoding/json and once with go-json-experiment/json, the
#     library under server/api's decoder (sluice-bench baseline-http).
# Each server runs alone under callgrind with GOMAXPROCS=1 and
# GODEBUG=asyncpreemptoff=1; the driver (sluice-bench grpc / http, 50
# callers: one gRPC connection, or 50 keep-alive HTTP connections; one
# descriptor, 10,000 values round robin) runs outside it. After the warm-up
# the counters are zeroed (callgrind_control -z), exactly REQUESTS requests
# are sent, and the counters dumped (callgrind_control -d), with no request
# in flight at either point.
#
# usage: scripts/instr-transport.sh
# env:   REQUESTS (default 20000), WARMUP (default 5000), KEEP=1 keeps the
#        callgrind files (for callgrind_annotate --inclusive=yes),
#        SERVERS (default "grpc-bare grpc-sluice http-std http-v2 http-sluice").
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
requests=${REQUESTS:-20000}
warmup=${WARMUP:-5000}
servers=" ${SERVERS:-grpc-bare grpc-sluice http-std http-v2 http-sluice} "
want() { [[ $servers == *" $1 "* ]]; }
for tool in valgrind callgrind_control go; do
	command -v "$tool" >/dev/null || { echo "instr-transport.sh: $tool not found on PATH" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/sluice-instr-transport.XXXXXX)
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

# What is measured: the tree as built now (edits during the run do not count).
built="commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo ' (modified)')"
echo "building (CGO_ENABLED=0) ..." >&2
(cd "$root" && CGO_ENABLED=0 go build -o "$tmp/sluice" ./cmd/sluice && CGO_ENABLED=0 go build -o "$tmp/sluice-bench" ./cmd/sluice-bench)

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 12000)) # below the ephemeral ports (32768-)
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "instr-transport.sh: no free port found" >&2
	return 1
}

declare -A count
# measure NAME DRIVER PORT COMMAND...: runs COMMAND under callgrind, drives it
# on 127.0.0.1:PORT with `sluice-bench DRIVER` (grpc or http) and records
# NAME's instructions per request.
measure() {
	local name=$1 driver=$2 port=$3
	shift 3
	local out="$tmp/$name.out"
	echo "--- $name" >&2
	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 \
		valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >"$out.log" 2>&1 &
	local pid=$!
	started+=("$pid")
	local drive=("$tmp/sluice-bench" "$driver" --addr "127.0.0.1:$port" --domain bench --key remote_address
		--keys 10000 --concurrency 50 --wait 180s --requests "$requests" --warmup-requests "$warmup"
		--before "callgrind_control -z $pid >/dev/null" --after "callgrind_control -d $pid >/dev/null")
	if [ "$driver" = grpc ]; then
		drive+=(--method rls --conns 1)
	fi
	if ! "${drive[@]}" >&2; then
		echo "instr-transport.sh: driving $name failed; its log:" >&2
		tail -20 "$out.log" >&2
		exit 1
	fi
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	local total
	total=$(awk '/^totals:/ {print $2}' "$out".*[0-9] | head -1)
	if [ -z "$total" ]; then
		echo "instr-transport.sh: no callgrind dump for $name" >&2
		exit 1
	fi
	count[$name]=$((total / requests))
}

# serve sets cmd to `sluice serve --store memory` with the bench rules, gRPC
# on 127.0.0.1:$1 and HTTP on 127.0.0.1:$2.
serve() {
	cmd=("$tmp/sluice" serve --rules "$root/testdata/rules/bench" --store memory --grpc-addr "127.0.0.1:$1"
		--http-addr "127.0.0.1:$2" --debug-addr off --log-level warn)
}

workers=$(sed -n 's/^const StreamWorkers = \([0-9]*\)$/\1/p' "$root/server/rls/server.go")
if want grpc-bare; then
	p=$(free_port)
	measure grpc-bare grpc "$p" "$tmp/sluice-bench" baseline --service rls --stream-workers "$workers" --addr "127.0.0.1:$p"
fi
if want grpc-sluice; then
	p=$(free_port)
	serve "$p" "$(free_port)"
	measure grpc-sluice grpc "$p" "${cmd[@]}"
fi
for lib in std v2; do
	if want "http-$lib"; then
		p=$(free_port)
		measure "http-$lib" http "$p" "$tmp/sluice-bench" baseline-http --json "$lib" --addr "127.0.0.1:$p"
	fi
done
if want http-sluice; then
	p=$(free_port)
	serve "$(free_port)" "$p"
	measure http-sluice http "$p" "${cmd[@]}"
fi

ratio() { # ratio A B: A's count over B's, or - when either is missing
	if [ -n "${count[$1]:-}" ] && [ -n "${count[$2]:-}" ]; then
		echo "${count[$1]} ${count[$2]}" | awk '{printf "%.2fx", $1/$2}'
	else
		echo -
	fi
}
echo
echo "instructions per request (callgrind), $requests requests after $warmup warm-up, 50 callers, 10,000 keys, memory store"
echo "$built, $(go version | awk '{print $3}'), $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-56s %12s %s\n' "server" "instr/req" "ratio"
line() { [ -n "${count[$1]:-}" ] && printf '%-56s %12d %s\n' "$2" "${count[$1]}" "$3" || true; }
line grpc-bare "bare grpc-go RLS, NumStreamWorkers($workers), proto codec" ""
line grpc-sluice "sluice serve --store memory, ShouldRateLimit" "$(ratio grpc-sluice grpc-bare) bare RLS (goal 1.2x)"
line http-std "bare net/http /v1/check, encoding/json" ""
line http-v2 "bare net/http /v1/check, go-json-experiment/json" ""
line http-sluice "sluice serve --store memory, POST /v1/check" "$(ratio http-sluice http-std) std, $(ratio http-sluice http-v2) v2 (goal 1.3x)"
