#!/usr/bin/env bash
# ir_refeed.sh TGC: IR fed back in is not compiled twice (docs/ir.md, "The
# record of passes"). For the IR of a tiny GPT dumped after every stage of
# the default pipeline (lower and each pass), `tgc run IR` must log exactly
# what `tgc run samples/gpt.tg` logs (losses, learning rates, gradient
# norms; the timings aside), `tgc compile IR` must write the same plan byte
# for byte, `tgc plan IR` print the same report and `tgc sample IR` the same
# text (at t = 1), and the IR must carry its `passes` line through. Then
# once more with tensor and sequence parallelism and recomputation, whose
# passes the default options leave out.
set -euo pipefail
tgc=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model=samples/gpt.tg
sets=(--set layers=2 --set hidden=32 --set heads=2 --set seq=16 --set batch=2)
train=(--data tests/data/kjv-64k.txt --train-iters 3 --quiet)
# The stages: lower, then every pass of passes.def, from the tool itself.
stages=$({ "$tgc" dump-ir "$model" --passes not-a-pass 2>&1 || true; } | sed -n 's/.*the passes are: //p' | tr -d ',') 
[ -n "$stages" ] || { echo "could not list the passes" >&2; exit 1; }
untimed() { sed -E 's/,"(tokens_per_s|step_ms|tflops)":[^,}]*//g' "$1"; }
# A plan's sections but `lowered`, and no checksum line (docs/runtime.md, "Plans").
plan_sections() {
  python3 -c '
import sys
t = open(sys.argv[1], "rb").read()
nl = t.index(b"\n") + 1
out, i = [t[:nl]], nl
while t.startswith(b"section ", i):
    e = t.index(b"\n", i) + 1
    name, size = t[i:e].split()[1:3]
    if name != b"lowered":
        out.append(t[i:e + int(size)])
    i = e + int(size)
sys.stdout.buffer.write(b"".join(out))' "$1"
}
check() { # NAME OPTIONS...: every stage against the .tg
  local name=$1
  shift
  "$tgc" run "$model" "${sets[@]}" "$@" "${train[@]}" --log "$dir/$name.ref.log"
  "$tgc" compile "$model" "${sets[@]}" "$@" -o "$dir/$name.ref.plan" >/dev/null
  "$tgc" dump-ir "$model" "${sets[@]}" "$@" -o "$dir/$name.ref.ir"
  [ "$name" = default ] && "$tgc" plan "$model" "${sets[@]}" "$@" > "$dir/$name.ref.report"
  local w=$dir/$name.safetensors sample=(--prompt "In the" --tokens 6 --seed 3)
  "$tgc" run "$model" "${sets[@]}" "$@" "${train[@]}" --export "$w"
  if [ "$name" = default ]; then
    "$tgc" sample "$model" "${sets[@]}" --weights "$w" "${sample[@]}" > "$dir/$name.ref.txt" 2>/dev/null
    [ -s "$dir/$name.ref.txt" ] || { echo "$name: tgc sample printed nothing" >&2; exit 1; }
  fi
  local n=0
  for s in $stages; do
    local ir=$dir/$name.$s.ir
    "$tgc" dump-ir "$model" "${sets[@]}" "$@" --after "$s" -o "$ir"
    "$tgc" dump-ir "$ir" "$@" -o "$ir.full"
    cmp -s "$dir/$name.ref.ir" "$ir.full" || { echo "$name: IR after $s, compiled again, differs from the model's" >&2
      diff "$dir/$name.ref.ir" "$ir.full" | sed -n 1,20p >&2; exit 1; }
    "$tgc" run "$ir" "$@" "${train[@]}" --log "$ir.log"
    if ! diff <(untimed "$dir/$name.ref.log") <(untimed "$ir.log") >&2; then
      echo "$name: tgc run on the IR after $s logs otherwise than on $model" >&2
      exit 1
    fi
    "$tgc" compile "$ir" "$@" -o "$ir.plan" >/dev/null
    # Byte for byte, but for the `lowered` section (the IR the plan was
    # compiled from, which it recompiles from: here the IR after $s itself)
    # and so the checksum.
    cmp <(plan_sections "$dir/$name.ref.plan") <(plan_sections "$ir.plan") ||
      { echo "$name: the plan of the IR after $s differs" >&2; exit 1; }
    # To a file, not a pipe into grep -q: grep would stop reading at the first
    # match and the writer die of SIGPIPE, which pipefail reports as a failure.
    plan_sections "$ir.plan" > "$ir.sections"
    grep -q '^section kernels ' "$ir.sections" || { echo "$name: no kernels in $ir.plan" >&2; exit 1; }
    # tgc plan's model figures come from the graph, which after tp is one
    # rank's: compared at t = 1 only (docs/ir.md, "Model facts").
    if [ "$name" = default ]; then
      "$tgc" plan "$ir" "$@" > "$ir.report"
      diff "$dir/$name.ref.report" "$ir.report" >&2 || { echo "$name: tgc plan on the IR after $s differs" >&2; exit 1; }
      # tgc sample cuts the backward off IR after autodiff, as off a plan.
      "$tgc" sample "$ir" --weights "$w" "${sample[@]}" > "$ir.txt" 2> "$ir.err" || { cat "$ir.err" >&2; exit 1; }
      diff "$dir/$name.ref.txt" "$ir.txt" >&2 || { echo "$name: tgc sample on the IR after $s differs" >&2; exit 1; }
    fi
    n=$((n + 1))
  done
  [ "$(untimed "$dir/$name.ref.log" | wc -l)" = 3 ] || { echo "$name: expected 3 log lines" >&2; exit 1; }
  echo "$name: $n stages ($(echo $stages)) run and compile as the model"
}
check default
check parallel --tp 2 --sequence-parallel --recompute-granularity selective
# The record reads back: the last dump lists what ran, in order, with the
# options each pass ran with.
grep -qxF 'passes tp(t=2), sp(sequence_parallel=true), attention(backend=auto inplace=true), lmhead(fused=true chunk=0), autodiff, dce, recompute(granularity=selective block=false layers=1), fuse(fuse=all precision=f32), optimizer(optimizer=adamw beta1=0.9 beta2=0.95 eps=1e-08 weight_decay=0.1 clip_grad=1.0 momentum=0.0 dampening=0.0 nesterov=false param_groups="" precision=f32 dist_opt=false), schedule(schedule=1f1b v=1 dp=1 micro_batch=2 global_batch=2 bucket=0), memplan' "$dir/parallel.ref.ir" ||
  { echo "unexpected passes line: $(grep '^passes' "$dir/parallel.ref.ir")" >&2; exit 1; }
