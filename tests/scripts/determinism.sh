#!/usr/bin/env bash
# determinism.sh TGC MODEL DATA [ARGS...]: two runs of the same training give
# bit-identical logs, timings aside.
set -euo pipefail
tgc=$1 model=$2 data=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for run in 1 2; do
  "$tgc" run "$model" --data "$data" --quiet --log "$dir/$run.jsonl" "$@"
  sed -E 's/"tokens_per_s":[^,}]*,?//; s/"step_ms":[^,}]*,?//; s/"(tflops|mfu)":[^,}]*,?//' "$dir/$run.jsonl" > "$dir/$run.txt"
done
[ -s "$dir/1.txt" ] || { echo "no log lines" >&2; exit 1; }
if ! cmp "$dir/1.txt" "$dir/2.txt"; then
  diff "$dir/1.txt" "$dir/2.txt" | sed -n 1,10p >&2
  exit 1
fi
echo "deterministic: $(wc -l < "$dir/1.txt") identical log lines"
