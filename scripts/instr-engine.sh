#!/usr/bin/env bash
# instr-engine.sh: instructions per check spent planning it in the engine
# (service): validating, loading the policy, the deny lists, matching,
# resolving each limit, building keys and ops; not the store call, the
# metrics or the answer. It runs each case of BenchmarkPlan (which does
# that work alone: no store, no clock, so its count does not depend on
# how slowly valgrind runs it) under valgrind's callgrind twice, with N1
# and N2 iterations: (count(N2) - count(N1)) / (N2 - N1) is the cost of one
# check, without the set-up. Test binary built with CGO_ENABLED=0, run
# with GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1.
#
# usage: scripts/instr-engine.sh     (from anywhere in the repository)
# env:   N1, N2 (defaults 20000, 60000); CASES (BenchmarkPlan's cases,
#        space-separated; default all)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || { echo "instr-engine.sh: valgrind not found on PATH" >&2; exit 1; }
n1=${N1:-20000}
n2=${N2:-60000}
cases=${CASES:-"two-entries sub-counters penalty hybrid request-limit two-descriptors"}
tmp=$(mktemp -d /tmp/sluice-instr-engine.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && CGO_ENABLED=0 go test -c -o "$tmp/service.test" ./service)

# count CASE N: instructions executed in a run of N iterations.
count() {
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
		"$tmp/service.test" -test.run='^$' -test.bench="^BenchmarkPlan\$/^$1\$" -test.benchtime="${2}x" >/dev/null 2>&1
	awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.out"
}

for c in $cases; do
	c1=$(count "$c" "$n1")
	c2=$(count "$c" "$n2")
	echo "$c $(((c2 - c1) / (n2 - n1)))"
done
