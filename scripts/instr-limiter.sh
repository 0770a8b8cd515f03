#!/usr/bin/env bash
# instr-limiter.sh: instructions per call (callgrind, GOMAXPROCS=1) of root-package
# benchmarks, default BenchmarkLimiterAllow and its baseline
# BenchmarkXTimeRateAllow. Instructions per call of each benchmark: callgrind totals at two -benchtime
# counts, differenced, so start-up and the benchmark's set-up cancel.
set -euo pipefail
command -v valgrind >/dev/null || { echo "instr-limiter.sh: valgrind not found on PATH" >&2; exit 1; }
cd "$(dirname "$0")/.."
go test -c -o ${TMPDIR:-/tmp}/instr-limiter-sl.test . 
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(LimiterAllow XTimeRateAllow)
for b in "${benches[@]}"; do
	t=()
	for n in 200000 600000; do
		GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file=${TMPDIR:-/tmp}/instr-limiter-cg.$b.$n ${TMPDIR:-/tmp}/instr-limiter-sl.test -test.run '^$' -test.bench "^Benchmark$b\$" -test.benchtime=${n}x >/dev/null 2>&1
		t+=("$(grep -m1 '^summary:' ${TMPDIR:-/tmp}/instr-limiter-cg.$b.$n | awk '{print $2}')")
	done
	echo "$b $(( (t[1] - t[0]) / 400000 ))"
done
