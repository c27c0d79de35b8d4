#!/usr/bin/env bash
# sp_memory.sh TGC MODEL T: with --sequence-parallel the plan's activations
# of the norm/dropout/residual regions are exactly 1/t of those without.
set -euo pipefail
tgc=$1 model=$2 t=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bytes() { "$tgc" compile "$model" --tp "$t" "$@" -o "$dir/p.plan" | sed -n 's/.*residual activations \([0-9]*\) bytes.*/\1/p'; }
tp=$(bytes) sp=$(bytes --sequence-parallel)
echo "t=$t: norm/dropout/residual activations $tp bytes with TP, $sp with SP"
[ -n "$tp" ] && [ "$sp" -gt 0 ] && [ $(( sp * t )) -eq "$tp" ]
