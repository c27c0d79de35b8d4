#!/usr/bin/env bash
# shellcheck disable=SC2317  # the kind_* functions are called as "kind_$kind"
# Bit identity before and after a refactor (docs/testing.md, "Bit identity
# before and after a refactor"): runs the same configurations with two tgc
# builds on this machine and compares everything they write, byte for byte.
#
# usage: scripts/bitcompare.sh [OPTIONS] OLD_BUILD_DIR NEW_BUILD_DIR [OUTDIR]
#
#   OLD_BUILD_DIR, NEW_BUILD_DIR  build trees holding tgc (and libtgc.so)
#   OUTDIR        where the runs write (OUTDIR/old/CASE, OUTDIR/new/CASE);
#                 kept. Without it a temporary directory, removed when every
#                 case is the same, kept (and named) otherwise.
#   --only REGEX  run only the cases whose names match (grep -E; repeatable)
#   --skip REGEX  leave out the cases whose names match (repeatable)
#   --list        print the cases and what they run, and exit
#   --self-test   check the harness instead (OLD and NEW may be one build):
#                 the serial case must be the same, the serial case with
#                 NEW given another --seed must differ, and the comparison
#                 must see a changed loss and a flipped checkpoint byte but
#                 not a changed step time
#   --no-comm-stats  runs without --comm-stats (for a change that moves
#                 other bytes by design; everything else still compared)
#   --timeout S   the limit of each command (default 300 s)
#
# Prints one line per case: `same`, `DIFFERS: FILE (...)`, `FAILED: ...`
# (a command exited non-zero: the harness covers nothing there) or
# `skipped: ...` (no mpirun). Exit status 0 when every case is the same,
# 1 when one differs or failed, 2 on a usage error.
#
# Every run happens in OUTDIR/SIDE/CASE with the same relative paths on
# both sides (the model and text are copied to OUTDIR/inputs), TGC_*
# variables cleared but TGC_CACHE_DIR, which is one fresh kernel cache per
# side. Compared: every file each case leaves (stdout and stderr of each
# command as STEP.out and STEP.err, exit statuses as STEP.rc, --log JSON
# lines, --comm-stats, --export and --export-grads safetensors, every file
# of --save directories, tgc export, compiled plans, tgc plan and dump-ir
# text, sampled text), the names of the files included.
#
# The mask (mask_timings below), and nothing else, is applied to the
# *.out, *.err and *.jsonl files before they are compared; what it hides
# is measured time and memory, which no two runs share:
#   --log JSON:   the values of "tokens_per_s", "step_ms", "tflops", "mfu"
#   step lines:   "| N tok/s | N ms", "| N TFLOP/s", "| mfu N%", "| ETA H:MM:SS"
#   run summary:  "N TFLOP/s achieved (median step N ms", "MFU N% of",
#                 "peak RSS of the process N MiB", "tgc: peak N GFLOP/s"
#   tgc sample:   "tokens in N s, N tokens/s"
# and in each --save directory's tgc.lock ("pid N on host H") the pid.
# The keys and the text around each value stay, so a field that appears,
# disappears or moves still differs.
set -euo pipefail

usage() {
  sed -n '7,29p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

only=() skip=() list=0 self_test=0 timeout_s=300 pos=() comm_stats=(--comm-stats)
while [ $# -gt 0 ]; do
  case "$1" in
    --only) [ $# -ge 2 ] || usage; only+=("$2"); shift 2 ;;
    --skip) [ $# -ge 2 ] || usage; skip+=("$2"); shift 2 ;;
    --list) list=1; shift ;;
    --self-test) self_test=1; shift ;;
    --timeout) [ $# -ge 2 ] || usage; timeout_s=$2; shift 2 ;;
    --no-comm-stats) comm_stats=(); shift ;;
    -h | --help) usage ;;
    --) shift; pos+=("$@"); break ;;
    -*) echo "bitcompare: unknown option '$1'" >&2; usage ;;
    *) pos+=("$1"); shift ;;
  esac
done
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || { echo "bitcompare: --timeout wants seconds, got '$timeout_s'" >&2; exit 2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
model_src=$root/samples/gpt.tg
text_src=$root/tests/data/kjv-64k.txt

# ---- the configurations ------------------------------------------------------
# NAME|KIND|ARGUMENTS. Every model is samples/gpt.tg at TINY's sizes (an
# argument's --set layers=N overrides them), trained on tests/data/kjv-64k.txt
# for 3 steps unless the arguments give --train-iters. Kinds:
#   train    tgc run ARGS with --log, --comm-stats, --export and --save
#   mpi      the same under mpirun -np 4 (one process per rank)
#   resume   SAVE_ARGS -- LOAD_ARGS: 2 steps saved, then --load and 2 more
#            (the checkpoints of both, the resumed log, tgc export)
#   sample   train 3 steps, then tgc sample from the checkpoint and from
#            the exported weights (KV cache, --no-kv-cache, sim)
#   compile  tgc compile ARGS -o gpt.plan, tgc inspect, tgc run gpt.plan
#   plan     tgc plan ARGS
#   ir       tgc dump-ir ARGS
TINY=(--set layers=2 --set hidden=64 --set heads=4 --set seq=32)
MB="--micro-batch-size 2 --global-batch-size 8"   # 4 micro-batches of 2 (2 per replica under d = 2)
MB16="--micro-batch-size 2 --global-batch-size 16"
BUCKET="--ddp-bucket-size 20000"                  # several buckets, as tests/pipeline/overlap.py
EVAL="--split 98,2 --eval-interval 2 --eval-iters 2 --train-iters 4"
CASES=(
  "serial|train|--peak-tflops 1 --export-grads grads.safetensors"
  "serial.microbatches|train|$MB"
  "tp2|train|--tp 2"
  "tp2.sp|train|--tp 2 --sequence-parallel"
  "pp2.1f1b|train|--pp 2 $MB"
  "pp2.gpipe|train|--pp 2 --pipeline-schedule gpipe $MB"
  "pp2.interleaved.v2|train|--set layers=4 --pp 2 --vp 2 --pipeline-schedule interleaved $MB"
  "pp4.1f1b|train|--set layers=4 --pp 4 $MB"
  "pp4.gpipe|train|--set layers=4 --pp 4 --pipeline-schedule gpipe $MB"
  "pp4.interleaved.v2|train|--set layers=8 --pp 4 --vp 2 --pipeline-schedule interleaved $MB"
  "dp2|train|--dp 2 $MB"
  "dp2.distopt|train|--dp 2 --use-distributed-optimizer $MB"
  "dp2.overlap-grad-reduce|train|--dp 2 --overlap-grad-reduce $BUCKET $MB"
  "dp2.distopt.overlap|train|--dp 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather $BUCKET $MB"
  "dp2.pp2.v2.overlap|train|--set layers=4 --dp 2 --pp 2 --vp 2 --pipeline-schedule interleaved --overlap-grad-reduce $BUCKET $MB16"
  "3d.t2p2d2.sp.distopt|train|--tp 2 --pp 2 --dp 2 --sequence-parallel --use-distributed-optimizer $MB16"
  "sim.serial|train|--backend sim"
  "sim.tp2.sp|train|--backend sim --tp 2 --sequence-parallel"
  "sim.pp2.1f1b|train|--backend sim --pp 2 $MB"
  "sim.dp2.distopt.overlap|train|--backend sim --dp 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather $BUCKET $MB"
  "mpi.pp2.dp2|mpi|--pp 2 --dp 2 $MB"
  "bf16|train|--bf16"
  "bf16.tp2.pp2|train|--bf16 --tp 2 --pp 2 $MB"
  "fp16.loss-scale|train|--fp16 --initial-loss-scale 262144 --hysteresis 1 --loss-scale-window 1"
  "recompute.full|train|--recompute-granularity full"
  "recompute.full.block|train|--recompute-granularity full --recompute-method block --recompute-num-layers 1"
  "recompute.selective.tp2.sp|train|--recompute-granularity selective --tp 2 --sequence-parallel"
  "eval.serial|train|$EVAL"
  "eval.tp2.pp2|train|--tp 2 --pp 2 $EVAL $MB"
  "ckpt.resume|resume|--"
  "ckpt.resume.t2p2.bf16|resume|--bf16 --tp 2 --pp 2 $MB -- --bf16 --tp 2 --pp 2 $MB"
  "ckpt.reshard.t2p2-to-d2|resume|--tp 2 --pp 2 $MB -- --dp 2 $MB"
  "ckpt.resume.sim.distopt|resume|--backend sim --dp 2 --use-distributed-optimizer $MB -- --backend sim --dp 2 --use-distributed-optimizer $MB"
  "sample|sample|"
  "compile.run.tp2|compile|--tp 2"
  "plan.serial|plan|"
  "plan.t2.sp.recompute|plan|--tp 2 --sequence-parallel --recompute-granularity selective"
  "plan.p2d2.distopt|plan|--pp 2 --dp 2 --use-distributed-optimizer $MB"
  "ir.lower|ir|--after lower"
  "ir.autodiff|ir|--after autodiff"
  "ir.memplan.t2.sp|ir|--tp 2 --sequence-parallel --after memplan"
  "ir.schedule.p2d2|ir|--pp 2 --dp 2 $MB --after schedule"
  "ir.schedule.p2.gpipe|ir|--pp 2 --pipeline-schedule gpipe $MB --format schedule"
  "ir.schedule.p4.interleaved|ir|--set layers=8 --pp 4 --vp 2 --pipeline-schedule interleaved $MB --format schedule"
)

# ---- the mask ------------------------------------------------------------------
# Measured time and memory in logs (see the header); nothing else.
mask_timings() {
  sed -E \
    -e 's/"(tokens_per_s|step_ms|tflops|mfu)":[^,}]*/"\1":"<masked>"/g' \
    -e 's/\| [^ |]+ tok\/s \| [^ |]+ ms/| <masked> tok\/s | <masked> ms/' \
    -e 's/\| [^ |]+ TFLOP\/s/| <masked> TFLOP\/s/' \
    -e 's/\| mfu [^ |]+%/| mfu <masked>%/' \
    -e 's/\| ETA [0-9:]+/| ETA <masked>/' \
    -e 's/, [^ ]+ TFLOP\/s achieved \(median step [^ ]+ ms/, <masked> TFLOP\/s achieved (median step <masked> ms/' \
    -e 's/, MFU [^ ]+% of /, MFU <masked>% of /' \
    -e 's/peak RSS of the process [^ ]+ MiB/peak RSS of the process <masked> MiB/' \
    -e 's/tgc: peak [^ ]+ GFLOP\/s/tgc: peak <masked> GFLOP\/s/' \
    -e 's/ tokens in [^ ]+ s, [^ ]+ tokens\/s/ tokens in <masked> s, <masked> tokens\/s/'
}
mask_lock() { sed -E 's/^pid [0-9]+ /pid <masked> /'; }

# ---- running one side of a case ------------------------------------------------
# In the case's directory: $tgc, $model and $text (relative, the same on
# both sides), $side_extra (extra `run` arguments of this side: --self-test).

# tgc_step STEP ARGS...: tgc ARGS, stdout to STEP.out, stderr to STEP.err,
# the exit status to STEP.rc.
tgc_step() {
  local step=$1 rc=0
  shift
  timeout -k 5 "$timeout_s" "$tgc" "$@" >"$step.out" 2>"$step.err" </dev/null || rc=$?
  echo "$rc" >"$step.rc"
}

mpi_step() {
  local step=$1 rc=0
  shift
  timeout -k 5 "$timeout_s" mpirun "${mpi_flags[@]}" -x LD_LIBRARY_PATH -x TGC_CACHE_DIR -np 4 \
    "$tgc" "$@" >"$step.out" 2>"$step.err" </dev/null || rc=$?
  echo "$rc" >"$step.rc"
}

# The model's sizes: TINY, with --set batch=4 unless micro-batches are given.
model_args() {
  local a
  for a in "$@"; do
    [ "$a" = --micro-batch-size ] && { printf '%s\n' "${TINY[@]}"; return; }
  done
  printf '%s\n' "${TINY[@]}" --set batch=4
}

# run_args ARGS...: the arguments of a training run (one per line).
run_args() {
  local a iters=(--train-iters 3)
  for a in "$@"; do [ "$a" = --train-iters ] && iters=(); done
  model_args "$@"
  printf '%s\n' --data "$text" --log-interval 1 "${comm_stats[@]}" "${iters[@]}" "$@" "${side_extra[@]}"
}

kind_train() {
  local -a r
  mapfile -t r < <(run_args "$@")
  tgc_step run run "$model" "${r[@]}" --log log.jsonl --export weights.safetensors --save ckpt
}

kind_mpi() {
  local -a r
  mapfile -t r < <(run_args "$@")
  mpi_step run run "$model" "${r[@]}" --log log.jsonl --export weights.safetensors --save ckpt
}

kind_resume() {
  local -a save=() load=() r
  while [ $# -gt 0 ] && [ "$1" != -- ]; do save+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  load=("$@")
  mapfile -t r < <(run_args "${save[@]}" --train-iters 2)
  tgc_step save run "$model" "${r[@]}" --log save.jsonl --save ckpt --save-interval 1
  cp -a ckpt ckpt.saved   # the first run's checkpoints as they were
  mapfile -t r < <(run_args "${load[@]}" --train-iters 4)
  tgc_step resume run "$model" "${r[@]}" --log resume.jsonl --load ckpt --save ckpt --export weights.safetensors
  tgc_step export export ckpt -o exported.safetensors
}

kind_sample() {
  local -a r m
  mapfile -t r < <(run_args)
  mapfile -t m < <(printf '%s\n' "${TINY[@]}")
  tgc_step run run "$model" "${r[@]}" --log log.jsonl --export weights.safetensors --save ckpt
  tgc_step sample.ckpt sample "$model" "${m[@]}" --weights ckpt --prompt "And God said" --tokens 24 \
    --temperature 0.8 --top-k 40 --seed 7
  tgc_step sample.greedy sample "$model" "${m[@]}" --weights weights.safetensors --prompt "In the beginning" \
    --tokens 24 --temperature 0 --logits-out logits.safetensors
  tgc_step sample.nokv sample "$model" "${m[@]}" --weights ckpt --prompt "And God said" --tokens 24 --no-kv-cache
  tgc_step sample.sim sample "$model" "${m[@]}" --weights ckpt --prompt "And God said" --tokens 24 --backend sim
}

kind_compile() {
  local -a m r
  mapfile -t m < <(model_args "$@")
  tgc_step compile compile "$model" "${m[@]}" "$@" -o gpt.plan
  tgc_step inspect inspect gpt.plan
  mapfile -t r < <(printf '%s\n' --data "$text" --log-interval 1 "${comm_stats[@]}" --train-iters 3 "${side_extra[@]}")
  tgc_step run run gpt.plan "${r[@]}" --log log.jsonl --export weights.safetensors
}

kind_plan() {
  local -a m
  mapfile -t m < <(model_args "$@")
  tgc_step plan plan "$model" "${m[@]}" "$@"
}

kind_ir() {
  local -a m
  mapfile -t m < <(model_args "$@")
  tgc_step dump-ir dump-ir "$model" "${m[@]}" "$@"
}

# run_side SIDE BUILD NAME KIND ARGS...: one side of a case, in a subshell.
run_side() {
  local side=$1 build=$2 name=$3 kind=$4
  shift 4
  local dir=$out/$side/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  (
    cd "$dir"
    tgc=$build/tgc model=../../inputs/gpt.tg text=../../inputs/kjv-64k.txt
    side_extra=()
    [ "$side" = new ] && side_extra=("${new_extra[@]}")
    export TGC_CACHE_DIR=$out/kcache/$side
    export LD_LIBRARY_PATH=$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    "kind_$kind" "$@"
  )
}

# ---- comparing ---------------------------------------------------------------
# compare_dirs A B: prints "same" or "DIFFERS: ..." and returns 0 or 1.
compare_dirs() {
  local a=$1 b=$2 fa fb f line only_a only_b
  fa=$(cd "$a" && find . -type f | LC_ALL=C sort)
  fb=$(cd "$b" && find . -type f | LC_ALL=C sort)
  if [ "$fa" != "$fb" ]; then
    only_a=$(LC_ALL=C comm -23 <(printf '%s\n' "$fa") <(printf '%s\n' "$fb") | sed 's|^\./||' | paste -sd' ' -)
    only_b=$(LC_ALL=C comm -13 <(printf '%s\n' "$fa") <(printf '%s\n' "$fb") | sed 's|^\./||' | paste -sd' ' -)
    echo "DIFFERS: files${only_a:+ only in old: $only_a}${only_b:+ only in new: $only_b}"
    return 1
  fi
  local diffs=()
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    case "$f" in
      *.out | *.err | *.jsonl)
        if ! cmp -s <(mask_timings <"$a/$f") <(mask_timings <"$b/$f"); then
          line=$(cmp <(mask_timings <"$a/$f") <(mask_timings <"$b/$f") 2>&1 | sed -n 's/.* line \([0-9]*\).*/\1/p')
          diffs+=("${f#./} (line ${line:-?}, timings masked)")
        fi ;;
      */tgc.lock)
        cmp -s <(mask_lock <"$a/$f") <(mask_lock <"$b/$f") || diffs+=("${f#./} (pid masked)") ;;
      *)
        if ! cmp -s "$a/$f" "$b/$f"; then
          line=$(cmp "$a/$f" "$b/$f" 2>&1 | sed -n 's/.* byte \([0-9]*\).*/\1/p')
          diffs+=("${f#./} (byte ${line:-?})")
        fi ;;
    esac
  done <<<"$fa"
  if [ ${#diffs[@]} -gt 0 ]; then
    local msg=${diffs[0]} i
    for ((i = 1; i < ${#diffs[@]}; i++)); do msg="$msg; ${diffs[i]}"; done
    echo "DIFFERS: $msg"
    return 1
  fi
  echo same
}

# failed_steps DIR: the steps of one side that exited non-zero ("" if none).
failed_steps() {
  local f s=""
  for f in "$1"/*.rc; do
    [ -e "$f" ] || continue
    [ "$(cat "$f")" = 0 ] || s="$s $(basename "$f" .rc)=$(cat "$f")"
  done
  echo "${s# }"
}

n_same=0 n_diff=0 n_fail=0 n_skip=0
# run_case NAME KIND ARGSTRING: both sides, then one line of result.
run_case() {
  local name=$1 kind=$2 argstr=$3 res fo fn
  local -a args=()
  read -r -a args <<<"$argstr"
  if [ "$kind" = mpi ] && [ $have_mpi = 0 ]; then
    printf '%-34s skipped: no mpirun\n' "$name"
    n_skip=$((n_skip + 1))
    return
  fi
  run_side old "$old" "$name" "$kind" "${args[@]}"
  run_side new "$new" "$name" "$kind" "${args[@]}"
  fo=$(failed_steps "$out/old/$name")
  fn=$(failed_steps "$out/new/$name")
  if [ -n "$fo$fn" ]; then
    printf '%-34s FAILED: exit status old: %s, new: %s (see %s)\n' "$name" "${fo:-ok}" "${fn:-ok}" "$out/{old,new}/$name"
    n_fail=$((n_fail + 1))
    return
  fi
  if res=$(compare_dirs "$out/old/$name" "$out/new/$name"); then
    n_same=$((n_same + 1))
  else
    n_diff=$((n_diff + 1))
  fi
  printf '%-34s %s\n' "$name" "$res"
}

selected() {
  local name=$1 re
  if [ ${#only[@]} -gt 0 ]; then
    local hit=0
    for re in "${only[@]}"; do grep -Eq -- "$re" <<<"$name" && hit=1; done
    [ $hit = 1 ] || return 1
  fi
  for re in "${skip[@]}"; do grep -Eq -- "$re" <<<"$name" && return 1; done
  return 0
}

if [ $list = 1 ]; then
  for c in "${CASES[@]}"; do
    IFS='|' read -r name kind argstr <<<"$c"
    selected "$name" && printf '%-34s %-8s %s\n' "$name" "$kind" "$argstr"
  done
  exit 0
fi

if [ ${#pos[@]} -lt 2 ] || [ ${#pos[@]} -gt 3 ]; then usage; fi
old=$(cd "${pos[0]}" 2>/dev/null && pwd) || { echo "bitcompare: no directory ${pos[0]}" >&2; exit 2; }
new=$(cd "${pos[1]}" 2>/dev/null && pwd) || { echo "bitcompare: no directory ${pos[1]}" >&2; exit 2; }
for b in "$old" "$new"; do
  [ -x "$b/tgc" ] || { echo "bitcompare: no executable $b/tgc" >&2; exit 2; }
done

keep=1
if [ ${#pos[@]} -eq 3 ]; then
  mkdir -p "${pos[2]}"
  out=$(cd "${pos[2]}" && pwd)
  # Only a directory this script made (or an empty one) is reused: it is emptied.
  if [ -n "$(ls -A "$out")" ] && [ ! -e "$out/.bitcompare" ]; then
    echo "bitcompare: $out is not empty and not a bitcompare output directory" >&2
    exit 2
  fi
else
  out=$(mktemp -d "${TMPDIR:-/tmp}/bitcompare.XXXXXX")
  keep=0
fi
rm -rf "$out/old" "$out/new" "$out/kcache" "$out/inputs" "$out/selftest"
touch "$out/.bitcompare"
mkdir -p "$out/inputs" "$out/kcache/old" "$out/kcache/new"
cp "$model_src" "$text_src" "$out/inputs/"

# Only TGC_CACHE_DIR of tgc's variables, set per side (fault injection,
# debug output, another compiler must not leak into either side).
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep '^TGC_' || true)

mpi_flags=() have_mpi=0
if command -v mpirun >/dev/null; then
  have_mpi=1
  # OpenMPI refuses root and more ranks than cores without these (as tests/CMakeLists.txt).
  mpi_version=$(mpirun --version 2>&1 || true)
  if grep -q "Open MPI\|OpenRTE" <<<"$mpi_version"; then mpi_flags=(--allow-run-as-root --oversubscribe); fi
fi

new_extra=()
t0=$(date +%s)
echo "bitcompare: old $old/tgc, new $new/tgc, outputs in $out"

if [ $self_test = 1 ]; then
  # The harness's own checks, on the serial case.
  ok=0 bad=0
  expect() { # expect WANT NAME RESULT
    if [[ "$3" == "$1"* ]]; then ok=$((ok + 1)); printf 'self-test %-28s %s (expected)\n' "$2" "$3"
    else bad=$((bad + 1)); printf 'self-test %-28s %s (expected %s)\n' "$2" "$3" "$1"; fi
  }
  st_case() { # st_case NAME: both sides of the serial case, the comparison
    IFS='|' read -r _ kind argstr <<<"${CASES[0]}"
    local -a args=()
    read -r -a args <<<"$argstr"
    run_side old "$old" "$1" "$kind" "${args[@]}"
    run_side new "$new" "$1" "$kind" "${args[@]}"
    [ -z "$(failed_steps "$out/old/$1")$(failed_steps "$out/new/$1")" ] || { echo "FAILED: a run failed in $out/*/$1"; return; }
    compare_dirs "$out/old/$1" "$out/new/$1" || true
  }
  expect same "same seed" "$(st_case serial)"
  new_extra=(--seed 4321)
  expect DIFFERS "NEW with --seed 4321" "$(st_case serial.seed)"
  new_extra=()
  # The comparison itself, on edited copies of the first pair's new side.
  edit() { # edit NAME: a copy of new/serial as selftest/NAME
    rm -rf "$out/selftest/$1"
    mkdir -p "$out/selftest"
    cp -a "$out/new/serial" "$out/selftest/$1"
    echo "$out/selftest/$1"
  }
  edited() { # edited NAME FILE: the edit changed FILE, or the check fails
    cmp -s "$out/new/serial/$2" "$out/selftest/$1/$2" || return 0
    bad=$((bad + 1))
    echo "self-test $1: the edit left $2 as it was"
  }
  d=$(edit timing)
  sed -i -E '1s/"step_ms":[^,}]*/"step_ms":98765.5/' "$d/log.jsonl"
  sed -i -E 's/\| [0-9.]+ ms/| 98765.5 ms/' "$d/run.out" "$d/run.err"
  edited timing log.jsonl
  edited timing run.err
  expect same "a step time changed" "$(compare_dirs "$out/old/serial" "$d" || true)"
  d=$(edit loss)
  sed -i -E '2s/"loss":/"loss":1/' "$d/log.jsonl"
  edited loss log.jsonl
  expect DIFFERS "a logged loss changed" "$(compare_dirs "$out/old/serial" "$d" || true)"
  d=$(edit byte)
  f=$d/ckpt/iter_0000003/optimizer.safetensors
  byte=$(od -An -tu1 -j 4096 -N 1 "$f" | tr -d ' ')
  # shellcheck disable=SC2059  # the format is the byte's octal escape
  printf "\\$(printf '%03o' $(((byte + 1) % 256)))" | dd of="$f" bs=1 seek=4096 conv=notrunc status=none
  edited byte ckpt/iter_0000003/optimizer.safetensors
  expect DIFFERS "a checkpoint byte flipped" "$(compare_dirs "$out/old/serial" "$d" || true)"
  d=$(edit missing)
  rm "$d/ckpt/latest"
  expect DIFFERS "a file missing" "$(compare_dirs "$out/old/serial" "$d" || true)"
  echo "bitcompare --self-test: $ok as expected, $bad not, $(($(date +%s) - t0)) s"
  [ $bad -eq 0 ] || { echo "outputs kept in $out"; exit 1; }
  [ $keep = 1 ] || rm -rf "$out"
  exit 0
fi

n_cases=0
for c in "${CASES[@]}"; do
  IFS='|' read -r name kind argstr <<<"$c"
  selected "$name" || continue
  n_cases=$((n_cases + 1))
  run_case "$name" "$kind" "$argstr"
done
[ $n_cases -gt 0 ] || { echo "bitcompare: no case selected" >&2; exit 2; }
echo "bitcompare: $n_cases cases: $n_same same, $n_diff differ, $n_fail failed, $n_skip skipped in $(($(date +%s) - t0)) s"
if [ $((n_diff + n_fail)) -gt 0 ]; then
  echo "outputs kept in $out (diff -r $out/old/CASE $out/new/CASE)"
  exit 1
fi
[ $keep = 1 ] || rm -rf "$out"
exit 0
