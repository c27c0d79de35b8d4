#!/usr/bin/env bash
# comm_volume.sh TGC MODEL DATA T: the communication volume of one GPT layer
# per micro-batch, counted by the runtime (ring accounting, rank 0), equals
# the paper's 8*b*s*h*(t-1)/t elements for tensor parallelism, and sequence
# parallelism's all-gathers and reduce-scatters move the same bytes. One
# layer's volume is the difference between runs with 2 and 1 layers.
set -euo pipefail
tgc=$1 model=$2 data=$3 t=$4
b=4 s=32 h=64
volume() { # LAYERS [FLAGS] -> bytes of the kinds named in $KINDS
  "$tgc" run "$model" --set layers="$1" --set hidden=$h --set heads=4 --set seq=$s --set batch=$b \
    --tp "$t" "${@:2}" --data "$data" --train-iters 1 --quiet --comm-stats |
    awk -v kinds="$KINDS" 'BEGIN { n = split(kinds, k, ","); for (i = 1; i <= n; i++) want[k[i]] = 1 }
                           ($1 in want) && $2 == "tp" { sum += $4 } END { printf "%d\n", sum }'
}
expect=$(( 8 * b * s * h * (t - 1) / t * 4 ))
KINDS=all_reduce
tp=$(( $(volume 2) - $(volume 1) ))
KINDS=all_gather,reduce_scatter
sp=$(( $(volume 2 --sequence-parallel) - $(volume 1 --sequence-parallel) ))
echo "t=$t: one layer moves $tp bytes with TP, $sp bytes of activations with SP; formula 8bsh(t-1)/t x 4 bytes = $expect"
[ "$tp" -eq "$expect" ] && [ "$sp" -eq "$expect" ]
