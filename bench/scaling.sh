#!/usr/bin/env bash
# How tgc's CPU training speed scales with the model, and what the local
# communicator costs (docs/performance.md).
#
# usage: bench/scaling.sh [TGC] [--quick]
#   TGC      the tgc binary (default build/tgc)
#   --quick  two steps per point, one round (a smoke test, not a measurement)
#   ROUNDS=N in the environment: rounds per point (default 3)
#
# Table 1: tokens/s against layers, hidden size and sequence length (4 points
# each, byte-level vocabulary 256, batch 8, dropout 0), beside what the
# seed's FLOPs model predicts: tokens/s proportional to the tokens per FLOP,
# 72 B s l h^2 (1 + s/6h + V/12lh) per iteration, normalised to the first
# point of each sweep.
# Table 2: the same model (L=4, h=256, s=256, B=8) serial and split over the
# two cores as t=2, p=2 (4 micro-batches of 2) and d=2 ranks, ranks as
# threads of one process (the local communicator), global batch 8 in every
# case. Serial runs its kernels and GEMMs on 2 OpenMP threads, each of n
# ranks on cores/n.
# Every point runs ROUNDS times, the points round-robin, and a point's
# figure is its fastest round's median step: on a shared or virtual machine
# other work only ever slows a run down.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TGC=$ROOT/build/tgc
STEPS=16 WARM=3 ROUNDS=${ROUNDS:-3}
for a in "$@"; do
  case $a in
    --quick) STEPS=2 WARM=1 ROUNDS=1 ;;
    *) TGC=$a ;;
  esac
done
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
DATA=$ROOT/tests/data/kjv-64k.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
export OPENBLAS_NUM_THREADS=$OMP_NUM_THREADS

# run KEY L H HEADS S B [tgc options...]: appends "KEY L H S B median_ms" to $TMP/res
run() {
  local key=$1 L=$2 H=$3 N=$4 S=$5 B=$6 batch
  shift 6
  batch=(--set batch="$B") # --micro-batch-size sets the model's batch itself (both are an error)
  [[ " $* " == *" --micro-batch-size "* ]] && batch=()
  "$TGC" run "$ROOT/samples/gpt.tg" --set layers="$L" --set hidden="$H" --set heads="$N" --set seq="$S" \
    "${batch[@]}" --set pdrop=0 --data "$DATA" --train-iters $((STEPS + WARM)) --log "$TMP/log.jsonl" \
    --quiet "$@" >"$TMP/out.txt" 2>&1 || { cat "$TMP/out.txt" >&2; exit 1; }
  "$PY" -c '
import json, statistics, sys
ms = statistics.median([json.loads(x)["step_ms"] for x in open(sys.argv[1])][int(sys.argv[2]):])
print("%s %.3f" % (sys.argv[3], ms))' "$TMP/log.jsonl" "$WARM" "$key $L $H $S $B" >>"$TMP/res"
  rm -f "$TMP/log.jsonl"
}

PLANS=(
  "serial (t=1 p=1 d=1)|1|"
  "t=2 p=1 d=1|2|--tp 2"
  "t=2 p=1 d=1, sequence-parallel|2|--tp 2 --sequence-parallel"
  "t=1 p=2 d=1, 4 micro-batches of 2 (1F1B)|2|--pp 2 --micro-batch-size 2 --global-batch-size 8"
  "t=1 p=1 d=2, 4 sequences per replica|2|--dp 2 --micro-batch-size 4 --global-batch-size 8"
)
: >"$TMP/res"
for ((r = 1; r <= ROUNDS; r++)); do
  for v in 1 2 4 8; do run "layers:$v" "$v" 128 4 128 8; done
  for v in 64 128 256 512; do run "hidden:$v" 2 "$v" 4 128 8; done
  for v in 64 128 256 512; do run "seq:$v" 2 128 4 "$v" 8; done
  for i in "${!PLANS[@]}"; do
    IFS='|' read -r _ _ opts <<<"${PLANS[$i]}"
    # shellcheck disable=SC2086
    run "plan:$i" 4 256 4 256 8 $opts
  done
done

echo "# tgc scaling on $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS, $STEPS timed + $WARM warm-up steps per run," \
  "the fastest of $ROUNDS rounds; $(date -u '+%Y-%m-%d %H:%M UTC'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" -c '
import sys
V = 256
best, shape, spread = {}, {}, {}
for line in open(sys.argv[1]):
    key, L, h, s, B, ms = line.split()
    best[key] = min(best.get(key, 1e30), float(ms))
    spread[key] = max(spread.get(key, 0.0), float(ms))
    shape[key] = tuple(map(int, (L, h, s, B)))
def fpt(L, h, s, B):  # the seed FLOPs per token
    return 72.0 * L * h * h * (1 + s / (6.0 * h) + V / (12.0 * L * h))
print("# sweeps: L=2 h=128 heads=4 s=128 B=8 V=256 with one of them varied; FLOPs model: the tokens/s the")
print("# seed formula predicts relative to the first point; measured / model 1.00: scaling as the FLOPs do")
for name in ("layers", "hidden", "seq"):
    print("\n| %s | ms/step (slowest round) | tokens/s | GFLOP/s | relative | FLOPs model | measured / model |" % name)
    print("|---|---|---|---|---|---|---|")
    t0 = f0 = None
    for k in [k for k in best if k.startswith(name + ":")]:
        L, h, s, B = shape[k]
        tps, f = B * s / (best[k] / 1e3), fpt(L, h, s, B)
        if t0 is None:
            t0, f0 = tps, f
        rel, model = tps / t0, f0 / f
        print("| %s | %.1f (%.1f) | %.0f | %.1f | %.3f | %.3f | %.2f |" % (
            k.split(":")[1], best[k], spread[k], tps, tps * f / 1e9, rel, model, rel / model))
print("\n# the local communicator: L=4 h=256 heads=4 s=256 V=256, global batch 8, ranks as threads")
print("\n| plan | ranks | ms/step (slowest round) | tokens/s | vs serial |")
print("|---|---|---|---|---|")
serial = None
for i, p in enumerate(sys.argv[2:]):
    label, ranks, _ = p.split("|")
    L, h, s, B = shape["plan:%d" % i]
    ms = best["plan:%d" % i]
    serial = serial or ms
    print("| %s | %s | %.1f (%.1f) | %.0f | %.2fx |" % (label, ranks, ms, spread["plan:%d" % i],
                                                     B * s / (ms / 1e3), serial / ms))
' "$TMP/res" "${PLANS[@]}"
