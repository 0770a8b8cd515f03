#!/usr/bin/env bash
# instr-match.sh: instructions per rules.Snapshot.Match call in
# BenchmarkMatchWildcard (compiled prefix wildcards),
# BenchmarkMatchWildcardSuffix (compiled suffix wildcards) and
# BenchmarkMatchWildcardLinear (the linear scan Match used before, kept as a
# test-only reference), counted by valgrind's callgrind with
# --toggle-collect on the matching function alone, so the benchmark's setup
# (parsing 10,000 rules) is not counted. Each sub-benchmark runs twice, with
# N1 and N2 iterations; (count(N2) - count(N1)) / (N2 - N1) is the cost of
# one call, without the calls outside the loop. Test binary built with
# CGO_ENABLED=0, run with GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1.
#
# usage: scripts/instr-match.sh     (from anywhere in the repository)
# env:   N1, N2 (defaults 20000, 40000; the linear scan uses a tenth)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
command -v valgrind >/dev/null || { echo "instr-match.sh: valgrind not found on PATH" >&2; exit 1; }
n1=${N1:-20000}
n2=${N2:-40000}
tmp=$(mktemp -d /tmp/sluice-instr-match.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && CGO_ENABLED=0 go test -c -o "$tmp/rules.test" ./rules)

# count BENCH FUNC N: instructions executed inside FUNC in a run of N
# iterations.
count() {
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
		--callgrind-out-file="$tmp/cg.out" --toggle-collect="$2" \
		"$tmp/rules.test" -test.run='^$' -test.bench="$1" -test.benchtime="${3}x" >/dev/null 2>&1
	awk '/^(summary|totals):/ {print $2; exit}' "$tmp/cg.out"
}

pkg=github.com/sluice-rl/sluice/rules
for bench in BenchmarkMatchWildcard BenchmarkMatchWildcardSuffix BenchmarkMatchWildcardLinear; do
	fn="$pkg.(*Snapshot).Match"
	a=$n1 b=$n2
	if [ "$bench" = BenchmarkMatchWildcardLinear ]; then
		fn="$pkg.matchLinear"
		a=$((n1 / 10)) b=$((n2 / 10))
	fi
	for n in 10 1000 10000; do
		ca=$(count "^$bench\$/^rules=$n\$" "$fn" "$a")
		cb=$(count "^$bench\$/^rules=$n\$" "$fn" "$b")
		echo "$bench/rules=$n: $(((cb - ca) / (b - a))) instructions per call"
	done
done
