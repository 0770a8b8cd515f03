#!/bin/sh
# idle-cost.sh BINARY [SECONDS] [serve flags…]: starts `BINARY serve` with the
# flags, waits for it to settle, and prints the CPU time (user + system) it
# burns per second while idle, read from /proc/<pid>/stat over SECONDS
# (default 30).
set -eu
bin=$1; secs=${2:-30}; shift 2 || shift $#
"$bin" serve "$@" >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
sleep 3
ticks() { awk '{print $14 + $15}' /proc/$pid/stat; }
hz=$(getconf CLK_TCK)
a=$(ticks); sleep "$secs"; b=$(ticks)
echo "$b $a $hz $secs" | awk '{printf "%.2f ms/s\n", ($1-$2)*1000/$3/$4}'
