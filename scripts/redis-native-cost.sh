#!/usr/bin/env bash
# redis-native-cost.sh: what Redis spends per fixed-window decision on the
# script path (scripts/fast.lua), on the native path
# (store/redis Options.NativeFixedWindow: INCRBY on per-window keys) and
# with envoyproxy/ratelimit's pattern (INCRBY + EXPIRE per decision,
# pipelined, issued by the test itself), each on a fresh redis-server:
# commands, INFO commandstats usec and INFO cpu used_cpu_user per decision
# (store/redis TestRedisCostPerDecision). Prints the date and load average.
#
# Usage: scripts/redis-native-cost.sh [DECISIONS]   (default 200000)
set -euo pipefail
cd "$(dirname "$0")/.."
date -u +%Y-%m-%dT%H:%M:%SZ
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
redis-server --version
SLUICE_REDIS_COST=1 SLUICE_REDIS_COST_N=${1:-200000} \
	go test -count=1 -run '^TestRedisCostPerDecision$' -v ./store/redis/ |
	grep -E 'native_cost_test|^(ok|FAIL|---)'
