#!/usr/bin/env bash
# dp_volume.sh TGC MODEL DATA D: the data-parallel gradient reduction's
# volume on rank 0 (--comm-stats, ring accounting). Plain data
# parallelism all-reduces the G gradient bytes: 2 G (d-1)/d per step. The
# distributed optimizer reduce-scatters each bucket's ranges cut at the
# shard boundaries, each replica sending every piece but its own:
# G (d-1)/d per step, half, also with --overlap-grad-reduce and buckets
# small enough to straddle the boundaries (the communication thread's
# communicator counted too). The distributed optimizer's losses are the
# same bits with and without overlap, and those of plain data parallelism
# within 1e-6 (its gradient norm sums the replicas' partial sums:
# docs/pipeline.md).
set -euo pipefail
tgc=$1 model=$2 data=$3 d=$4
iters=2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sets=(--set layers=2 --set hidden=32 --set heads=2 --set seq=16 --set batch=2)
grad=$("$tgc" dump-ir "$model" "${sets[@]}" | awk '$1 == "mem_size" && $2 == "grad" { print $4 }')
[ -n "$grad" ] || { echo "no mem_size grad line in the IR"; exit 1; }
# The shards are whole 64-byte blocks: this model's gradients split evenly.
[ $(( grad % (64 * d) )) -eq 0 ] || { echo "G = $grad does not split evenly over $d replicas"; exit 1; }
bytes() { # KIND NAME [FLAGS] -> rank 0's dp bytes of KIND; the losses into $work/NAME
  "$tgc" run "$model" "${sets[@]}" --dp "$d" --global-batch-size $(( 2 * d )) --data "$data" \
    --train-iters $iters --quiet --comm-stats --log "$work/$2.jsonl" "${@:3}" |
    awk -v k="$1" '$1 == k && $2 == "dp" { sum += $4 } END { printf "%d\n", sum }'
  grep -o '"loss":[^,}]*' "$work/$2.jsonl" > "$work/$2.loss"
}
ar=$(bytes all_reduce plain)
rs=$(bytes reduce_scatter distopt --use-distributed-optimizer)
rso=$(bytes reduce_scatter overlap --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 3000)
want_ar=$(( 2 * grad * (d - 1) / d * iters )) want_rs=$(( grad * (d - 1) / d * iters ))
echo "d=$d, G=$grad bytes, $iters steps: all-reduce $ar bytes (gradients $want_ar, the rest scalars);" \
  "distributed optimizer reduce-scatter $rs, with overlap and small buckets $rso (want $want_rs)"
fail() { echo "FAIL: $*"; exit 1; }
# The plain run's all-reduces beyond the gradients are the loss's scalars.
[ "$ar" -ge "$want_ar" ] && [ $(( ar - want_ar )) -lt 1024 ] || fail "plain all-reduce $ar, gradients $want_ar"
[ "$rs" -eq "$want_rs" ] || fail "distributed optimizer: $rs bytes, want $want_rs"
[ "$rso" -eq "$want_rs" ] || fail "with --overlap-grad-reduce: $rso bytes, want $want_rs"
[ $(( 2 * rs )) -eq "$want_ar" ] || fail "not half the all-reduce's"
[ -s "$work/plain.loss" ] || fail "no losses logged"
python3 - "$work/plain.loss" "$work/distopt.loss" <<'PY' || fail "the distributed optimizer's losses differ"
import sys
a, b = ([float(l.split(":")[1]) for l in open(p)] for p in sys.argv[1:3])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if len(a) == len(b) and a else 1.0
print("plain vs distributed optimizer: largest relative loss difference %.3g" % worst)
sys.exit(worst > 1e-6)
PY
cmp "$work/distopt.loss" "$work/overlap.loss" || fail "the losses with overlap differ"
echo ok
