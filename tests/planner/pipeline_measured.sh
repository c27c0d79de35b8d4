#!/usr/bin/env bash
# tgc plan's compiled 3D figures against what tgc run allocates (docs/planner.md):
# per pipeline rank, the executor's buffers and the pipeline runtime's
# (stashes and inputs of the micro-batches in flight, step-level values,
# the micro-batches' gradients) as predicted before anything runs and as
# the run reports them after allocating, within 5% (they are built to be
# equal), for 1F1B, GPipe, interleaved and the distributed optimizer.
# usage: pipeline_measured.sh TGC MODEL TEXT
set -u
tgc=$1 model=$2 text=$3
fails=0
sets=(--set layers=4 --set hidden=64 --set heads=4 --set seq=32 --micro-batch-size 2)
extract() { sed -n 's/^\(tgc: \)\{0,1\} *pipeline rank \([0-9]*\): \([0-9]*\) B of executor buffers + \([0-9]*\) B for in-flight micro-batches.*/\2 \3 \4/p'; }
for cfg in "--pp 2 --global-batch-size 8" \
           "--pp 2 --global-batch-size 8 --pipeline-schedule gpipe" \
           "--pp 2 --vp 2 --pipeline-schedule interleaved --global-batch-size 8" \
           "--pp 2 --dp 2 --global-batch-size 16 --use-distributed-optimizer" \
           "--tp 2 --pp 2 --sequence-parallel --global-batch-size 8"; do
  # shellcheck disable=SC2086
  plan=$("$tgc" plan "$model" "${sets[@]}" $cfg | extract)
  # shellcheck disable=SC2086
  run=$("$tgc" run "$model" "${sets[@]}" $cfg --data "$text" --train-iters 1 2>&1 | extract)
  echo "$cfg"
  paste <(echo "$plan") <(echo "$run") | awk '{ printf "  rank %s: plan %s + %s B, run %s + %s B\n", $1, $2, $3, $5, $6 }'
  [ -n "$plan" ] && [ "$(echo "$plan" | wc -l)" = "$(echo "$run" | wc -l)" ] || { echo "FAIL: no figures"; fails=$((fails + 1)); continue; }
  paste <(echo "$plan") <(echo "$run") | awk '{ p = $2 + $3; r = $5 + $6; d = p - r; if (d < 0) d = -d; if (d > 0.05 * r) bad = 1 }
    END { exit bad }' || { echo "FAIL: prediction and measurement differ by more than 5%"; fails=$((fails + 1)); }
done
[ "$fails" -eq 0 ] && echo PASS || exit 1
