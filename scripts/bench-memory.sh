#!/usr/bin/env bash
# Benchmarks of the in-process store against golang.org/x/time/rate, in one
# go test run, repeated; prints the median ns/op of each and its ratio to the
# baseline of the same mode (serial or parallel). Usage:
#   bash scripts/bench-memory.sh [count]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
out=$(mktemp)
go test -run '^$' -bench 'XTimeRate|Take/|TakeMillionKeys|BytesPerKey' -benchmem -benchtime 500ms -count "$count" ./store/memory | tee "$out" >&2
awk '
/^Benchmark/ {
  name=$1; sub(/-[0-9]+$/, "", name)
  for (i=2; i<=NF; i++) {
    if ($(i+1)=="ns/op") ns[name]=ns[name] " " $i
    if ($(i+1)=="allocs/op") al[name]=$i
    if ($(i+1)=="B/key") bk[name]=$i
  }
}
function median(s,   a, n, i, j, t) {
  n=split(s, a, " ")
  for (i=1; i<=n; i++) for (j=i+1; j<=n; j++) if (a[j]+0 < a[i]+0) { t=a[i]; a[i]=a[j]; a[j]=t }
  return (n%2) ? a[(n+1)/2] : (a[n/2]+a[n/2+1])/2
}
END {
  base["serial"]=median(ns["BenchmarkXTimeRate/serial"]); base["parallel"]=median(ns["BenchmarkXTimeRate/parallel"])
  printf "\n| benchmark | median ns/op | × x/time/rate (same mode) | allocs/op |\n|---|---:|---:|---:|\n"
  n=asorti(ns, names)
  for (k=1; k<=n; k++) {
    b=names[k]; if (b ~ /BytesPerKey/) continue
    m=median(ns[b]); mode=(b ~ /parallel/) ? "parallel" : "serial"
    printf "| %s | %.1f | %.2f | %s |\n", substr(b, 10), m, m/base[mode], al[b]
  }
  printf "\n| bytes per live key (10^6 keys of 20 bytes) | B/key |\n|---|---:|\n"
  for (b in bk) printf "| %s | %s |\n", substr(b, 10), bk[b]
}' "$out"
rm -f "$out"
