#!/usr/bin/env bash
# plan.sh TGC MODEL DATA [ARGS...]: a compiled plan runs without the model
# and trains exactly as running the model directly does.
set -euo pipefail
tgc=$1 model=$2 data=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$tgc" compile "$model" -o "$dir/model.plan" "$@"
cp "$model" "$dir/gone.tg" # the plan must not need it: run from another directory
(cd "$dir" && "$tgc" run model.plan --data "$data" --quiet --log plan.jsonl --train-iters 3)
"$tgc" run "$model" --data "$data" --quiet --log "$dir/model.jsonl" --train-iters 3 "$@"
for f in plan model; do
  sed -E 's/"tokens_per_s":[^,}]*,?//; s/"step_ms":[^,}]*,?//; s/"(tflops|mfu)":[^,}]*,?//' "$dir/$f.jsonl" > "$dir/$f.txt"
done
cmp "$dir/plan.txt" "$dir/model.txt"
echo "plan ok: $(wc -l < "$dir/plan.txt") steps identical to the model's"
