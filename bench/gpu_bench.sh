#!/usr/bin/env bash
# The GPU benchmark of issue 21: GPT-2 124M at s = 1024, bf16, tgc's fused
# attention, on one GPU (docs/performance.md, "The GPU benchmark"). Prints
#
#   tokens/s, TFLOP/s (tgc check's FLOPs model: forward + backward per
#   token) and MFU against the GPU's bf16 dense tensor-core peak (a table by
#   device name; none, and no MFU, for a GPU not in it),
#   then the top entries of the per-op profile (TGC_DEBUG=2) of a few more
#   steps, each with its achieved GB/s.
#
#   bench/gpu_bench.sh [--dry-run] [--tiny] [--backend cuda|sim] [--tgc PATH]
#                      [--iters N] [--top N]
#
#   --dry-run   print the commands it would run (nothing runs, no tgc needed)
#   --tiny      the same commands on a tiny GPT (2 layers, hidden 64): with
#               --backend sim it runs on a machine without a GPU (a ctest)
#   --backend   cuda (default) or sim (the device simulator, docs/runtime.md)
#   --tgc       the tgc binary (default $TGC, else build/tgc beside this script)
#   --iters     timed steps (default 10: the median of steps 3.. is reported)
#   --top       profile entries printed (default 12)
#
# Exit status: 0, or that of the first command that failed (2: bad arguments).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY=0 TINY=0 BACKEND=cuda ITERS=10 TOP=12
TGC=${TGC:-$ROOT/build/tgc}
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --tiny) TINY=1 ;;
    --backend) BACKEND=${2:-}; shift ;;
    --tgc) TGC=${2:-}; shift ;;
    --iters) ITERS=${2:-}; shift ;;
    --top) TOP=${2:-}; shift ;;
    *) echo "gpu_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
case $BACKEND in cuda | sim) ;; *) echo "gpu_bench: --backend '$BACKEND': cuda or sim" >&2; exit 2 ;; esac
if ! [[ $ITERS =~ ^[0-9]+$ ]] || [ "$ITERS" -lt 1 ]; then echo "gpu_bench: --iters '$ITERS': a count >= 1" >&2; exit 2; fi
[[ $TOP =~ ^[0-9]+$ ]] || { echo "gpu_bench: --top '$TOP': a count" >&2; exit 2; }
if [ $DRY = 0 ] && [ ! -x "$TGC" ]; then echo "gpu_bench: no tgc at '$TGC' (--tgc PATH)" >&2; exit 2; fi
PY=python3

# GPT-2 124M (bench/train_bench.py's 124m config) at s = 1024, batch 8.
MODEL=(--set layers=12 --set hidden=768 --set heads=12 --set seq=1024 --set batch=8 --set vocab=50304 --set pdrop=0)
[ $TINY = 1 ] && MODEL=(--set layers=2 --set hidden=64 --set heads=2 --set seq=32 --set batch=2 --set vocab=50304 --set pdrop=0)
RUNOPTS=(--bf16 --attention-backend tgc --backend "$BACKEND" --data "$ROOT/tests/data/kjv-64k.txt" --seed 7
  --lr 1e-4 --log-interval 1 --quiet)
W=$(mktemp -d "${TMPDIR:-/tmp}/tgc-gpu-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT

# X CMD...: prints the command (on the script's stdout, whatever the
# command's own redirections); runs it unless --dry-run.
exec 3>&1
show() { { printf '+'; printf ' %q' "$@"; printf '\n'; } >&3; }
X() { show "$@"; [ $DRY = 1 ] || "$@"; }
# The same, but run in the dry run too (read-only queries).
Q() { show "$@"; "$@"; }

# The bf16 dense tensor-core peak (TFLOP/s, the vendor's datasheet, no
# sparsity) of the GPU named $1; empty for one not listed.
bf16_peak() {
  case $1 in
    *H200*) echo 989.4 ;;
    *H100*SXM* | *H100\ 80GB\ HBM3*) echo 989.4 ;;
    *H100*NVL*) echo 835.5 ;;
    *H100*) echo 756.0 ;; # PCIe
    *A100*) echo 312.0 ;;
    *L40S*) echo 362.1 ;;
    *) echo "" ;;
  esac
}

# The device's name (a read-only query, made in the dry run too).
gpu=sim peak=
if [ "$BACKEND" = cuda ]; then
  gpu=$(Q nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sed -n 1p)
  peak=$(bf16_peak "$gpu")
fi
if [ -n "$peak" ]; then echo "GPU: ${gpu:-unknown}; bf16 dense peak: $peak TFLOP/s"
else echo "GPU: ${gpu:-unknown}; bf16 dense peak: not in the table (no MFU)"; fi

# 1. The FLOPs model.
X "$TGC" check "$ROOT/samples/gpt.tg" "${MODEL[@]}" >"$W/check.txt" || exit $?
fpt=$(sed -n 's/.* \([0-9.]*[KMGT]*\)FLOP per token.*/\1/p' "$W/check.txt")
# 2. The timed run.
X "$TGC" run "$ROOT/samples/gpt.tg" "${MODEL[@]}" "${RUNOPTS[@]}" --train-iters "$ITERS" --log "$W/run.jsonl" || exit $?
# 3. The per-op profile of 3 more steps (stderr).
X env TGC_DEBUG=2 "$TGC" run "$ROOT/samples/gpt.tg" "${MODEL[@]}" "${RUNOPTS[@]}" --train-iters 3 \
  2>"$W/profile.txt" >/dev/null || { cat "$W/profile.txt" >&2; exit 1; }
[ $DRY = 1 ] && exit 0

echo "model: ${MODEL[*]}; ${fpt:-?}FLOP per token (forward + backward)"
"$PY" "$ROOT/bench/step_figures.py" "$W/run.jsonl" "${fpt:-0}" "${peak:-0}" "bf16 fused" || exit 1
echo "per-op profile (TGC_DEBUG=2, 3 steps), top $TOP:"
grep -E '^op +launches' "$W/profile.txt" || { cat "$W/profile.txt" >&2; echo "gpu_bench: no profile" >&2; exit 1; }
grep -vE '^(op +launches|total|step)' "$W/profile.txt" | grep -E '%' | sed -n "1,${TOP}p"
grep -E '^total' "$W/profile.txt"
