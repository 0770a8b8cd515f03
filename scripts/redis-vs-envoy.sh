#!/usr/bin/env bash
# redis-vs-envoy.sh: what one redis-server spends per fixed-window decision
# behind three rate-limit services, side by side in one run (issue 30):
#   - sluice serve --store redis --redis-native-fixed-window (native: per
#     call TIME, per decision INCRBY of a per-window key, PEXPIREAT once per
#     key and window, pipelined, no script),
#   - sluice serve --store redis (the default script path: EVALSHA of
#     scripts/fast.lua, for reference),
#   - envoyproxy/ratelimit (the reference Envoy RLS server: INCRBY + EXPIRE
#     per decision, pipelined per request), with its defaults,
# each driven over gRPC by `sluice-bench grpc` (CONCURRENCY callers, KEYS
# client addresses round robin) at a paced RATE requests/s and unpaced (as
# fast as the load generator goes), with the same rule file: domain bench,
# key remote_address, QUOTA requests per UNIT (a fixed window in both:
# envoy's units are fixed windows, and sluice serve gets
# --default-algorithm fixed_window), high enough that nothing is denied.
#
# One fresh redis-server (free port, no persistence) serves them all, one
# service at a time (the others stopped). Per point: an unmeasured warm-up
# (WARMUP, same load), CONFIG RESETSTAT, INFO, the measured load (DURATION,
# no warm-up of its own), INFO again. Per decision (decisions: the requests
# sluice-bench grpc counted): Redis commands and their usec (INFO
# commandstats deltas: every command, SCRIPT LOAD and TIME included, INFO
# itself left out), Redis CPU (INFO used_cpu_user + used_cpu_sys deltas,
# which include the server's cron; the sys part also apart), socket reads Redis processed (INFO
# total_reads_processed: one per pipeline a client wrote, about), and the
# service's own CPU (sluice-bench grpc --pid, 10 ms ticks). The generator
# answers about CONCURRENCY + 1 requests (in flight at the start and end)
# that it does not count: their Redis commands are in the deltas.
# Before the services, Redis's idle CPU over IDLE seconds is printed (its cron:
# part of every paced figure).
#
# A point with a gRPC error or an over-limit answer, or (sluice) a decision
# answered by a failure policy (sluice_decisions_total outcomes failed_open,
# failed_closed, local_allowed, local_denied), is refused: the script says
# why and exits 1.
#
# Usage: RATELIMIT_BIN=/path/to/ratelimit scripts/redis-vs-envoy.sh [DURATION] [RATE]
#   DURATION  measured time per point, default 20s
#   RATE      paced requests per second, default 2000
# Env: RATELIMIT_BIN  envoyproxy/ratelimit's server binary (required; build it
#                     from its repository: go build -o … ./src/service_cmd)
#      KEYS=10000 CONCURRENCY=50 QUOTA=1000000 UNIT=minute (second, minute,
#      hour, day) WARMUP=5s IDLE=10 (seconds of the idle measurement)
#      SLUICE_REDIS_TIMEOUT=10s (sluice serve --redis-timeout: envoy's
#      REDIS_TIMEOUT default, so that a stall of this host, which fails a
#      decision under the store's 1 s default and refuses the point, is
#      waited out by both alike).
# The native path sets a key's expiry once per window: with KEYS addresses
# at RATE/s, a PEXPIREAT comes with about KEYS / (RATE × window seconds) of
# the decisions (10^4 / (2000 × 60): 0.08) in the long run, but a 20 s point
# that a window boundary falls in renews every key (10^4 / 40,000: 0.25)
# and one that none falls in, none. A DURATION of a whole number of windows
# (60s for minute) holds exactly one boundary per window, the long-run mix.
# Prints a Markdown table on stdout; progress on stderr.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."

dur=${1:-20s}
rate=${2:-2000}
keys=${KEYS:-10000}
conc=${CONCURRENCY:-50}
quota=${QUOTA:-1000000}
unit=${UNIT:-minute}
warmup=${WARMUP:-5s}
idle=${IDLE:-10}
rtimeout=${SLUICE_REDIS_TIMEOUT:-10s}

[[ $dur =~ ^[0-9]+s$ ]] || { echo "redis-vs-envoy.sh: DURATION $dur: want whole seconds, like 20s" >&2; exit 2; }
[[ $idle =~ ^[0-9]+$ ]] && [ "$idle" -gt 0 ] || { echo "redis-vs-envoy.sh: IDLE $idle: want a positive whole number of seconds" >&2; exit 2; }
case $unit in second | minute | hour | day) ;; *) echo "redis-vs-envoy.sh: UNIT $unit: want second, minute, hour or day" >&2; exit 2 ;; esac
[[ $rate =~ ^[0-9]+$ ]] && [ "$rate" -gt 0 ] || { echo "redis-vs-envoy.sh: RATE $rate: want a positive whole number" >&2; exit 2; }
if [ -z "${RATELIMIT_BIN:-}" ]; then
	echo "redis-vs-envoy.sh: set RATELIMIT_BIN to envoyproxy/ratelimit's server binary (git clone https://github.com/envoyproxy/ratelimit; go build -o /tmp/ratelimit ./src/service_cmd)" >&2
	exit 2
fi
[ -x "$RATELIMIT_BIN" ] || { echo "redis-vs-envoy.sh: RATELIMIT_BIN=$RATELIMIT_BIN is not an executable file" >&2; exit 2; }
for bin in redis-server redis-cli curl python3 go; do
	command -v "$bin" >/dev/null || { echo "redis-vs-envoy.sh: $bin not found" >&2; exit 1; }
done

tmp=$(mktemp -d)
rpid=
spid=
stop_service() {
	if [ -n "$spid" ] && kill -0 "$spid" 2>/dev/null; then
		kill "$spid" 2>/dev/null || true
		wait "$spid" 2>/dev/null || true
	fi
	spid=
}
cleanup() {
	stop_service
	if [ -n "$rpid" ] && kill -0 "$rpid" 2>/dev/null; then
		kill "$rpid" 2>/dev/null || true
		wait "$rpid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
log() { echo "redis-vs-envoy.sh: $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

log "building sluice and sluice-bench"
go build -o "$tmp/sluice" ./cmd/sluice
go build -o "$tmp/sluice-bench" ./cmd/sluice-bench

# One rule file for both services (envoy reads
# RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml).
mkdir -p "$tmp/rules" "$tmp/runtime/ratelimit/config"
cat >"$tmp/rules/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: $unit
      requests_per_unit: $quota
EOF
cp "$tmp/rules/bench.yaml" "$tmp/runtime/ratelimit/config/bench.yaml"

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$tmp/redis.log" 2>&1 &
rpid=$!
for _ in $(seq 1 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$rport" ping >/dev/null || { cat "$tmp/redis.log" >&2; log "redis-server did not start"; exit 1; }
url="redis://127.0.0.1:$rport/0"

# info FILE: INFO cpu, commandstats and stats, CRs removed.
info() { redis-cli -p "$rport" INFO cpu commandstats stats | tr -d '\r' >"$1"; }

# wait_rls ADDR: until a ShouldRateLimit answers without error (the rules
# loaded), at most 30 s.
wait_rls() {
	for _ in $(seq 1 150); do
		if "$tmp/sluice-bench" grpc --addr "$1" --concurrency 1 --keys 1 --duration 100ms --warmup 0s 2>/dev/null |
			grep -q ' 0 errors, 0 over limit'; then
			return 0
		fi
		sleep 0.2
	done
	log "$1 did not answer ShouldRateLimit"
	return 1
}

# start_service NAME: starts it (its gRPC address in $gaddr, pid in $spid).
start_service() {
	local gport hport
	gport=$(free_port)
	hport=$(free_port)
	gaddr=127.0.0.1:$gport
	haddr=127.0.0.1:$hport
	case $1 in
	native | script)
		local flags=()
		[ "$1" = native ] && flags=(--redis-native-fixed-window)
		"$tmp/sluice" serve --rules "$tmp/rules" --default-algorithm fixed_window \
			--grpc-addr "$gaddr" --http-addr "$haddr" --debug-addr "" --log-level warn \
			--store redis --redis-url "$url" --redis-prefix "vs-$1:" --redis-timeout "$rtimeout" \
			"${flags[@]}" >"$tmp/$1.log" 2>&1 &
		spid=$!
		;;
	envoy)
		# Its defaults otherwise: REDIS_POOL_SIZE 10, REDIS_PIPELINE_WINDOW 0,
		# REDIS_PIPELINE_LIMIT 0, LOCAL_CACHE_SIZE_IN_BYTES 0, REDIS_TYPE SINGLE.
		env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
			RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
			HOST=127.0.0.1 PORT="$hport" GRPC_HOST=127.0.0.1 GRPC_PORT="$gport" \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(free_port)" \
			"$RATELIMIT_BIN" >"$tmp/envoy.log" 2>&1 &
		spid=$!
		;;
	esac
	if ! wait_rls "$gaddr"; then
		cat "$tmp/$1.log" >&2
		exit 1
	fi
}

# outcomes: "<decided by Redis> <by a failure policy>" from sluice's /metrics.
outcomes() {
	curl -sf "http://$haddr/metrics" | awk '
		/^sluice_decisions_total\{/ {
			v = $NF
			if ($0 ~ /outcome="(failed_open|failed_closed|local_allowed|local_denied)"/) bad += v; else good += v
		}
		END { printf "%d %d\n", good, bad }'
}

# figures BEFORE AFTER DECISIONS: "<commands> <usec> <cpu µs> <reads> <sys µs>"
# per decision, and the commands per decision by name on a second line.
figures() {
	awk -F'[:,=]' -v d="$3" '
		FNR == 1 { f++ }
		/^cmdstat_/ && $1 != "cmdstat_info" {
			for (i = 2; i < NF; i += 2) { if ($i == "calls") c[f, $1] = $(i + 1); if ($i == "usec") u[f, $1] = $(i + 1) }
			names[$1] = 1
		}
		/^used_cpu_(user|sys):/ { cpu[f] += $2 }
		/^used_cpu_sys:/ { sys[f] = $2 }
		/^total_reads_processed:/ { rd[f] = $2 }
		END {
			for (n in names) { dc = c[2, n] - c[1, n]; cmds += dc; usec += u[2, n] - u[1, n]
				if (dc > 0) { line = line sprintf("%s%s %.3f", sep, substr(n, 9), dc / d); sep = ", " } }
			printf "%.4f %.3f %.3f %.4f %.3f\n%s\n", cmds / d, usec / d, 1e6 * (cpu[2] - cpu[1]) / d, (rd[2] - rd[1]) / d,
				1e6 * (sys[2] - sys[1]) / d, line
		}' "$1" "$2"
}

# point NAME LOAD RATE: one measured point; appends a row to $tmp/rows.
point() {
	local name=$1 load=$2 r=$3 out
	log "$name, $load: warm-up $warmup"
	"$tmp/sluice-bench" grpc --addr "$gaddr" --concurrency "$conc" --keys "$keys" --rate "$r" \
		--duration "$warmup" --warmup 0s >/dev/null
	local good0=0 bad0=0 good1=0 bad1=0
	[ "$name" = envoy ] || read -r good0 bad0 < <(outcomes)
	redis-cli -p "$rport" CONFIG RESETSTAT >/dev/null
	info "$tmp/info0"
	log "$name, $load: measuring $dur"
	out=$("$tmp/sluice-bench" grpc --addr "$gaddr" --concurrency "$conc" --keys "$keys" --rate "$r" \
		--duration "$dur" --warmup 0s --pid "$spid")
	info "$tmp/info1"
	[ "$name" = envoy ] || read -r good1 bad1 < <(outcomes)
	echo "$out" | sed 's/^/    /' >&2
	local reqs errs over rps scpu
	read -r reqs errs over < <(echo "$out" | sed -n 's/.*(\([0-9]*\) requests, \([0-9]*\) errors, \([0-9]*\) over limit).*/\1 \2 \3/p')
	rps=$(echo "$out" | awk '/req\/s/ {print $1; exit}')
	scpu=$(echo "$out" | sed -n 's/.*server CPU \([0-9.]*\) µs\/req.*/\1/p')
	if [ -z "$reqs" ] || [ "$reqs" -le 0 ]; then
		log "$name, $load: no request counted"
		exit 1
	fi
	if [ "$errs" -ne 0 ] || [ "$over" -ne 0 ]; then
		log "REFUSED: $name, $load: $errs errors, $over over limit of $reqs requests: no figures"
		exit 1
	fi
	if [ "$((bad1 - bad0))" -ne 0 ]; then
		log "REFUSED: $name, $load: $((bad1 - bad0)) of $((good1 - good0 + bad1 - bad0)) decisions answered by a failure policy, not Redis: no figures"
		exit 1
	fi
	local f
	f=$(figures "$tmp/info0" "$tmp/info1" "$reqs")
	echo "$name $load $reqs $rps ${scpu:--} $(echo "$f" | head -1)" >>"$tmp/rows"
	printf '%s\t%s\t%s\n' "$name" "$load" "$(echo "$f" | tail -1)" >>"$tmp/cmds"
}

date -u +%Y-%m-%dT%H:%M:%SZ
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2), port $rport; $conc callers, $keys keys, fixed window $quota/$unit; sluice --redis-timeout $rtimeout; $dur per point (warm-up $warmup); paced $rate/s and unpaced"

log "Redis idle, ${idle}s"
info "$tmp/idle0"
sleep "$idle"
info "$tmp/idle1"
awk -F: -v secs="$idle" 'FNR == 1 { f++ } /^used_cpu_(user|sys):/ { c[f] += $2 }
	END { printf "Redis idle CPU (its cron, no client): %.0f µs/s\n", 1e6 * (c[2] - c[1]) / secs }' "$tmp/idle0" "$tmp/idle1"

: >"$tmp/rows"
: >"$tmp/cmds"
for name in native script envoy; do
	log "starting $name"
	start_service "$name"
	point "$name" "paced $rate/s" "$rate"
	point "$name" unpaced 0
	stop_service
done

echo
echo "| server | load | decisions | decisions/s | Redis commands/decision | command usec/decision | Redis CPU µs/decision | of which sys | Redis reads/decision | service CPU µs/decision |"
echo "|---|---|---|---|---|---|---|---|---|---|"
awk '{ load = $2; i = 3; if ($2 == "paced") { load = $2 " " $3; i = 4 }
	printf "| %s | %s | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %s |\n", $1, load, $i, $(i+1), $(i+3), $(i+4), $(i+5), $(i+7), $(i+6), $(i+2) }' "$tmp/rows"
echo
echo "Commands per decision:"
awk -F'\t' '{ printf "  %-7s %-14s %s\n", $1, $2, $3 }' "$tmp/cmds"
echo
# Ratios against envoy, per load: CPU, command usec, commands.
awk '{ load = $2; i = 3; if ($2 == "paced") { load = $2 " " $3; i = 4 }
	cmds[$1, load] = $(i+3); usec[$1, load] = $(i+4); cpu[$1, load] = $(i+5); loads[load] = 1 }
	END {
		for (l in loads) for (s = 0; s < 2; s++) {
			n = s == 0 ? "native" : "script"
			goal = ""
			if (n == "native") goal = l == "unpaced" ? " (goal <= 0.25x)" : " (goal <= 0.5x)"
			printf "%s / envoy, %s: Redis CPU %.2fx%s, command usec %.2fx, commands %.2fx\n", n, l,
				cpu[n, l] / cpu["envoy", l], goal, usec[n, l] / usec["envoy", l], cmds[n, l] / cmds["envoy", l]
		}
	}' "$tmp/rows" | sort
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
date -u +%Y-%m-%dT%H:%M:%SZ
