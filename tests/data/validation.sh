#!/usr/bin/env bash
# --split and the validation loss (docs/data.md, "Validation"):
#  1. the val_loss tgc logs after the last step equals, independently, the
#     mean training loss of the same weights on the validation samples
#     (a file of exactly those samples, --init-from the exported weights,
#     --lr 0, dropout off), to 1e-6 relative;
#  2. a 3D run (pp 2, dp 2, micro-batches) logs the same validation losses
#     as the serial run, to 1e-5 relative;
#  3. bad splits are refused.
# usage: validation.sh TGC MODEL TEXT
set -u
tgc=$1 model=$2 text=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
sets=(--set layers=2 --set hidden=64 --set heads=4 --set seq=32)
run=(--data "$text" --split 90,10 --eval-interval 3 --eval-iters 2 --train-iters 6 --quiet)
"$tgc" run "$model" "${sets[@]}" --micro-batch-size 1 --global-batch-size 4 "${run[@]}" --log "$dir/serial.jsonl" \
  --export "$dir/w.safetensors" ||
  fail "the serial run failed"
val() { sed -n 's/.*"val_loss": *\([-0-9.eE+]*\).*/\1/p' "$1"; }
echo "validation losses (serial): $(val "$dir/serial.jsonl" | tr '\n' ' ')"
[ "$(val "$dir/serial.jsonl" | wc -l)" -eq 2 ] || fail "expected 2 validation losses (steps 3 and 6)"

# 1. Samples are s = 32 tokens apart: the validation part starts at sample
#    floor(n * 0.9), n = floor((bytes - 1) / 32).
bytes=$(wc -c <"$text")
n=$(( (bytes - 1) / 32 ))
first=$(awk -v n="$n" 'BEGIN { printf "%d", n * 0.9 }')
tail -c +$((first * 32 + 1)) "$text" >"$dir/valid.txt"
"$tgc" run "$model" "${sets[@]}" --set batch=4 --set pdrop=0 --data "$dir/valid.txt" --init-from "$dir/w.safetensors" \
  --lr 0 --train-iters 2 --quiet --log "$dir/check.jsonl" || fail "the check run failed"
want=$(sed -n 's/.*"loss": *\([-0-9.eE+]*\).*/\1/p' "$dir/check.jsonl" | awk '{ s += $1 } END { printf "%.9g", s / NR }')
got=$(val "$dir/serial.jsonl" | tail -1)
echo "last validation loss $got; the weights' loss on the validation samples $want"
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * b) }' ||
  fail "val_loss $got differs from $want"

# 2. The same under (t,p,d) = (1,2,2): 2 micro-batches of 1 per replica.
"$tgc" run "$model" "${sets[@]}" --micro-batch-size 1 --global-batch-size 4 --pp 2 --dp 2 "${run[@]}" \
  --log "$dir/pp.jsonl" || fail "the 3D run failed"
paste <(val "$dir/serial.jsonl") <(val "$dir/pp.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad = 1; printf "serial %s, pp2 dp2 %s\n", $1, $2 }
  END { exit bad }' || fail "the 3D run's validation losses differ"

# 3. Errors.
for bad in "100,0" "90" "a,b" "90,-1" "1,2,3,4"; do
  out=$("$tgc" run "$model" "${sets[@]}" --data "$text" --split "$bad" --train-iters 1 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] && grep -q -- "--split $bad: expected" <<<"$out" || fail "--split $bad: exit $rc: $out"
done
out=$("$tgc" run "$model" --set layers=2 --set hidden=64 --set heads=4 --set seq=2048 --data "$text" --split 99.99,0.01 \
  --train-iters 1 2>&1)
grep -q "each part needs at least one" <<<"$out" || fail "a split without validation samples: $out"
[ "$fails" -eq 0 ] && echo PASS || { echo "$fails failures"; exit 1; }
